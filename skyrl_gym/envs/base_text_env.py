"""``BaseTextEnv``: chat-message observations, string actions, turns and tool groups."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from skyrl_gym.core import ConversationType, Env, MessageType, StepOutput
from skyrl_gym.errors import ToolError
from skyrl_gym.metrics import default_aggregate_metrics

# SkyRL-gym's name for the step output of text envs.
BaseTextEnvStepOutput = StepOutput

__all__ = ["BaseTextEnv", "BaseTextEnvStepOutput", "ConversationType", "MessageType"]


class BaseTextEnv(Env[ConversationType, str]):
    """Base class of text-in / text-out envs, single- or multi-turn, with optional tools.

    ``env_config`` holds settings shared by all episodes (a database folder, a search URL),
    ``extras`` the dataset row's own fields (``reward_spec``, ``extra_info``, ...). Both are
    optional so that subclasses written for SkyRL-gym (``super().__init__()``) work unchanged.
    """

    INIT_ATTRIBUTES = frozenset({"env_config", "extras", "turns", "_max_turns", "_max_turns_is_default",
                                 "tool_groups", "tool_to_toolgroup"})
    """What ``__init__`` sets: a subclass whose ``__init__`` does not call ``super().__init__()`` lacks them (the
    checker then says so)."""

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        self.env_config = env_config if env_config is not None else {}
        self.extras = extras if extras is not None else {}
        self.turns = 0
        self._max_turns = 1  # SkyRL-gym's default; "unset" until a subclass or the episode driver assigns one
        self._max_turns_is_default = True
        self.tool_groups: List[Any] = []
        self.tool_to_toolgroup: Dict[str, str] = {}

    @property
    def max_turns(self) -> int:
        """The last turn of an episode. The episode driver resolves it once (the row's ``max_turns``, else the
        env's own, capped by the caller) and writes it back here, so the env and the driver agree."""
        return self._max_turns

    @max_turns.setter
    def max_turns(self, value: int) -> None:
        self._max_turns = value
        self._max_turns_is_default = False

    @property
    def max_turns_is_default(self) -> bool:
        """True while ``max_turns`` is the base class's placeholder (1) that no subclass has set: the episode
        driver then takes the turn limit from the row or its caller instead."""
        return self._max_turns_is_default

    # ----- tools -------------------------------------------------------------------------------
    def init_tool_groups(self, tool_groups: Sequence[Any] = ()) -> None:
        """Attach tool groups. Two tools with the same name in one env raise :class:`ToolError`;
        give the groups distinct tool names, or call tools as ``group.tool`` via ``_execute_tool``."""
        self.tool_groups = list(tool_groups)
        self.tool_to_toolgroup = {}
        for group in self.tool_groups:
            for tool_name, group_name in group.get_tool_to_group_mapping().items():
                if tool_name in self.tool_to_toolgroup:
                    raise ToolError(
                        f"tool {tool_name!r} is defined by both group {self.tool_to_toolgroup[tool_name]!r} "
                        f"and group {group_name!r} in {type(self).__name__}; tool names must be unique per env"
                    )
                self.tool_to_toolgroup[tool_name] = group_name

    def _start_tool_calls(self) -> None:
        """A step's tool calls are one message's: each group that bounds a message's calls (``message_timeout_s``,
        see :class:`~skyrl_gym.tools.core.ToolGroup`) starts that message's clock now."""
        for group in self.tool_groups:
            start = getattr(group, "start_message", None)
            if start is not None:
                start()

    def _execute_tool(self, tool_group_name: str, tool_name: str, tool_input: Any) -> Any:
        """Run ``tool_name`` of ``tool_group_name``; ``tool_input`` is a list/tuple of positional
        arguments (SkyRL-gym's convention) or a dict of keyword arguments."""
        for group in self.tool_groups:
            if group.name == tool_group_name:
                if isinstance(tool_input, dict):
                    return group.execute_tool(tool_name, **tool_input)
                if isinstance(tool_input, (list, tuple)):
                    return group.execute_tool(tool_name, *tool_input)
                return group.execute_tool(tool_name, tool_input)
        raise ToolError(f"tool group {tool_group_name!r} not found in {type(self).__name__}")

    def tool_schemas(self) -> List[Dict[str, Any]]:
        """OpenAI function-calling schemas of every tool in the env."""
        return [schema for group in self.tool_groups for schema in group.get_tool_schemas()]

    # ----- episode -----------------------------------------------------------------------------
    def init(self, prompt: ConversationType = None) -> Tuple[ConversationType, Dict[str, Any]]:  # type: ignore[override]
        """Return the prompt to give to the model (unchanged by default) and an empty info dict."""
        return (prompt if prompt is not None else []), {}

    def step(self, action: str) -> StepOutput:
        raise NotImplementedError(f"{type(self).__name__} must implement step(action)")

    def close(self) -> None:
        """Override to release resources; must be idempotent."""

    # ----- metrics -----------------------------------------------------------------------------
    def get_metrics(self) -> Dict[str, Any]:
        """Episode-level metrics, aggregated over episodes by :meth:`aggregate_metrics`."""
        return {}

    @staticmethod
    def aggregate_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
        """Mean of numbers (booleans as 0/1) across episodes; other values are dropped."""
        return default_aggregate_metrics(metrics)
