"""``searchcode``: solve a problem with a search tool and a sandboxed Python tool.

Calls are written ``<tool><search>query</search></tool>`` or ``<tool><python>code</python></tool>``;
the tool's output comes back as the next user message. The episode ends on
``<solution>...</solution>`` or at ``max_turns`` (default 2), and is scored like ``gsm8k`` (the
first ``#### N`` in the whole conversation must equal the ground truth).

Dataset row (extras)::

    {"reward_spec": {"method": "rule", "ground_truth": "42"}, "max_turns": 4}

``env_config``: the search settings of the ``search`` env (``search_url``, ``topk``, ``timeout``,
``retry_attempts``, ``retry_delay_s``), ``python_timeout`` (seconds, default 10) and ``sandbox``
(a :func:`skygym_sandboxes.sandbox_from_config` mapping; default: the shared warm local sandbox).
"""

from __future__ import annotations

import bisect
import re
from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym.core import ConversationType, StepOutput
from skyrl_gym.envs._common import require_ground_truth, turn_limit, uses_default_tool_path
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.config_values import config_value
from skyrl_gym.envs.search.env import SEARCH_DEFAULTS, search_tool_group_from_config
from skyrl_gym.rewards.gsm8k import compute_score, extract_solution
from skyrl_gym.tools.parsers import find_tag_blocks
from skyrl_gym.tools.python import NO_OUTPUT_MESSAGE, PythonCodeExecutorToolGroup

_OPENING = re.compile(r"<(\w+)>")
_CLOSING = re.compile(r"</(\w+)>")


def _first_inner_call(text: str) -> Optional[Tuple[str, str]]:
    """``(name, body)`` of the first ``<name>body</name>``, as ``re.search(r"<(\\w+)>(.*?)</\\1>", DOTALL)``
    finds it, in linear time: that expression searched from every opening to the end of the text for its
    closing, so 100,000 characters of ``<x>`` in a ``<tool>`` block held a step 10 s, 400,000 157 s."""
    closings: Dict[str, List[int]] = {}
    for match in _CLOSING.finditer(text):
        closings.setdefault(match.group(1), []).append(match.start())
    for opening in _OPENING.finditer(text):
        ends = closings.get(opening.group(1))
        if not ends:
            continue
        at = bisect.bisect_left(ends, opening.end())
        if at < len(ends):
            return opening.group(1), text[opening.end() : ends[at]]
    return None
EXPECTED_FORMAT = (
    " Call a tool as <tool><search>your query</search></tool> or <tool><python>your code</python></tool>,"
    " or give the final answer as <solution>... #### N</solution>."
)


class ToolCallError(ValueError):
    """The action has no usable tool call; the message is shown to the model."""


class SearchCodeEnv(BaseTextEnv):
    """Multi-tool env: search plus Python in a sandbox."""

    # The defaults of the env_config keys it reads: also serve-env's ceilings of what a client may set.
    config_defaults = {**SEARCH_DEFAULTS, "python_timeout": 10.0, "max_turns": 2, "sandbox": None}

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.ground_truth = str(require_ground_truth(self.extras, "searchcode"))
        self.max_turns = turn_limit(self.extras, env_config, self.config_defaults["max_turns"], "searchcode")
        self.search_tools = search_tool_group_from_config(env_config)
        self.python_tools = PythonCodeExecutorToolGroup(
            timeout=float(config_value(env_config, "python_timeout", self.config_defaults["python_timeout"])),
            sandbox_config=config_value(env_config, "sandbox"),
        )
        self.init_tool_groups([self.search_tools, self.python_tools])
        self.chat_history: ConversationType = []
        self._calls: Dict[str, int] = {"search": 0, "python": 0}
        self._final_reward: Optional[float] = None

    def _parse_action(self, action: str) -> Tuple[str, str, List[str]]:
        """``(group, tool, [input])`` of the first ``<tool>`` block; raises :class:`ToolCallError`."""
        blocks, _ = find_tag_blocks(action, "tool")
        if not blocks:
            raise ToolCallError("No <tool>...</tool> block found in action string.")
        inner = _first_inner_call(blocks[0].strip())
        if not inner:
            raise ToolCallError("No valid inner tool tag found inside <tool> block.")
        tool_name, tool_input = inner[0], inner[1].strip()
        if tool_name not in self.tool_to_toolgroup:
            raise ToolCallError(f"Tool '{tool_name}' not found in any registered tool group.")
        return self.tool_to_toolgroup[tool_name], tool_name, [tool_input]

    def _get_reward(self, action: str, done: bool) -> float:
        if not done:
            return 0.0
        return compute_score("\n".join(m["content"] for m in self.chat_history), self.ground_truth)

    def _is_done(self, action: str) -> bool:
        if self.turns >= self.max_turns:
            return True
        return "<solution>" in action and "</solution>" in action

    def _begin(self, action: str) -> Tuple[Optional[StepOutput], Optional[Tuple[str, str, List[str]]], Optional[str]]:
        if not isinstance(action, str):
            action = "" if action is None else str(action)
        self.turns += 1
        self.chat_history.append({"role": "assistant", "content": action})
        if self._is_done(action):
            self._final_reward = self._get_reward(action, True)
            answer = extract_solution("\n".join(m["content"] for m in self.chat_history))
            metadata = {"parsed_answer": answer, "ground_truth": self.ground_truth}
            if self._final_reward < 1.0:
                metadata["reason"] = (
                    "no '#### N' answer in the conversation"
                    if answer is None
                    else f"the answer {answer!r} does not equal the ground truth {self.ground_truth!r}"
                )
            return StepOutput(observations=[], reward=self._final_reward, done=True, metadata=metadata), None, None
        try:
            return None, self._parse_action(action), None
        except ToolCallError as exc:
            return None, None, str(exc) + EXPECTED_FORMAT

    def _observe(self, call: Optional[Tuple[str, str, List[str]]], output: Optional[str], error: Optional[str]) -> StepOutput:
        if call is not None:
            self._calls[call[1]] = self._calls.get(call[1], 0) + 1
        content = error if error is not None else (output or NO_OUTPUT_MESSAGE)
        observation = {"role": "user", "content": content}
        self.chat_history.append(observation)
        group_name, tool_name, tool_input = call if call is not None else (None, None, "")
        metadata = {
            "tool_group": group_name,
            "tool_name": tool_name,
            "tool_input": tool_input,
            "tools": [group.get_tool_names() for group in self.tool_groups],
            "reason": "a tool turn: only the final answer is rewarded",
        }
        return StepOutput(observations=[observation], reward=0.0, done=False, metadata=metadata)

    def step(self, action: str) -> StepOutput:
        final, call, error = self._begin(action)
        if final is not None:
            return final
        output = None
        if call is not None:
            try:  # a tool that raises: its message is the observation, as in SkyRL-gym
                output = self._execute_tool(call[0], call[1], call[2])
            except Exception as exc:
                error = str(exc)
        return self._observe(call, output, error)

    async def astep(self, action: str) -> StepOutput:
        """Like :meth:`step`; search is awaited on the loop and Python runs off the loop."""
        final, call, error = self._begin(action)
        if final is not None:
            return final
        output = None
        if call is not None:
            code_or_query = call[2][0]
            try:
                if not all(uses_default_tool_path(self, group) for group in self.tool_groups):
                    from skyrl_gym.tools.blocking import run_blocking  # an override of _execute_tool is used

                    output = await run_blocking(self._execute_tool, call[0], call[1], call[2])
                elif call[1] == "search":
                    output = await self.search_tools.asearch(code_or_query)
                else:
                    output = await self.python_tools.apython(code_or_query)
            except Exception as exc:
                error = str(exc)
        return self._observe(call, output, error)

    async def ainit(self, prompt: ConversationType = None) -> Tuple[ConversationType, Dict[str, Any]]:
        return self.init(prompt)

    def get_metrics(self) -> Dict[str, Any]:
        return {
            "turns": self.turns,
            "search_calls": self._calls.get("search", 0),
            "python_calls": self._calls.get("python", 0),
            "correct": self._final_reward == 1.0,
        }
