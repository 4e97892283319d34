"""Agents: what turns the history into the next assistant message.

:class:`ReActAgent` is an LLM with tools. It plays its task's env (a registered env for ``task: env``, or an
:class:`~skygym_adapters.agents.tools.AgentToolEnv` holding its tools) through the one episode driver,
:func:`skyrl_gym.episode.run_episode`, with a policy that depends on the backend:

* chat backends (``openai_server``): :class:`ReActChatPolicy`, the OpenAI-agents adapter's
  :class:`~skygym_adapters.openai_agents.ChatAgentPolicy` asking the server for each message (tools offered as
  OpenAI schemas; native tool calls become ``<tool_call>`` JSON text for the env's parser, and the env's answers
  come back as ``tool`` messages);
* token backends (``skyrl-train``): the rollout loop's token policy (:func:`skygym_adapters.rollout.loop.run_trajectory`),
  which records prompt/response ids, loss masks and logprobs for training.

It stops when the env is done (the ``finish`` tool for an ``AgentToolEnv``), after ``generator.max_iterations``
assistant messages, or when the context would pass ``generator.max_prompt_length`` (or the server cut a reply for
length). ``finish_reason`` uses SkyAgent's words: ``FINISH_TOOL``, ``FINISH`` (the env ended the episode without a
finish tool), ``max_iterations_reached``, ``CONTEXT_WINDOW_EXCEEDED``, ``error_runtime`` (the env or a tool
broke), ``error_backend`` (the model server failed or timed out), ``aborted``.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from skyrl_gym.episode import EnvCaller, Episode, EpisodeEnd, run_episode

from skygym_adapters.agents.tools import AgentToolEnv, CodeActToolEnv
from skygym_adapters.openai_agents import ChatAgentPolicy
from skygym_adapters.types import TrajectoryID

logger = logging.getLogger(__name__)

FINISH_REASONS = (
    "FINISH_TOOL",
    "FINISH",
    "max_iterations_reached",
    "CONTEXT_WINDOW_EXCEEDED",
    "error_runtime",
    "error_backend",
    "aborted",
)


def finish_reason_of(end: Optional[EpisodeEnd], finished_tool: bool, error_method: Optional[str]) -> str:
    """The episode driver's :class:`EpisodeEnd` in SkyAgent's finish-reason words."""
    if end is EpisodeEnd.ENV_DONE:
        return "FINISH_TOOL" if finished_tool else "FINISH"
    if end is EpisodeEnd.MAX_TURNS:
        return "max_iterations_reached"
    if end is EpisodeEnd.LENGTH:
        return "CONTEXT_WINDOW_EXCEEDED"
    if end is EpisodeEnd.ERROR:
        return "error_backend" if error_method == "agent" else "error_runtime"
    return "aborted"


@dataclass
class AgentRun:
    """What an agent did: the conversation, why it stopped, its answer, and the env's reward."""

    messages: List[Dict[str, Any]]
    finish_reason: str
    answer: Optional[str] = None
    env_reward: float = 0.0
    error: Optional[str] = None
    num_turns: int = 0
    episode: Optional[Episode] = None
    trajectory: Any = None  # the rollout loop's Trajectory (token backends): ids, masks, logprobs
    env_metrics: Dict[str, Any] = field(default_factory=dict)
    replies_cut: int = 0  # replies that reached max_tokens and were played as they were (token backends)


def tools_prompt(env: AgentToolEnv) -> str:
    """How to call the agent's tools, for the system message."""
    lines = []
    for schema in env.tool_schemas():
        fn = schema["function"]
        params = ", ".join(fn["parameters"].get("properties", {}))
        lines.append(f"- {fn['name']}({params}): {fn['description']}")
    return (
        "You can call these tools:\n" + "\n".join(lines) + "\n\nCall a tool with "
        '<tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>, or with <TOOL>argument</TOOL> for a tool '
        "of one argument. When you know the final answer, call finish with it, e.g. <finish>\\boxed{42}</finish>."
    )


class ReActChatPolicy(ChatAgentPolicy):
    """:class:`ChatAgentPolicy` over a chat backend, with the ReAct agent's context rules: no new message once the
    conversation passes ``max_prompt_length`` tokens (counted when a tokenizer was given), and a reply the server
    cut for length ends the trajectory (``CONTEXT_WINDOW_EXCEEDED``) instead of being run as an action."""

    def __init__(
        self, backend: Any, sampling_params: Dict[str, Any], max_prompt_length: Optional[int]
    ) -> None:
        super().__init__(self._ask)
        self.backend = backend
        self.sampling_params = dict(sampling_params)
        self.max_prompt_length = max_prompt_length
        self.last_finish_reason: Optional[str] = None

    async def _ask(self, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]]) -> Dict[str, Any]:
        reply = await self.backend.chat(messages, tools, self.sampling_params)
        self.last_finish_reason = reply.finish_reason
        return reply.message

    async def act(self, episode: Episode) -> Union[str, EpisodeEnd]:
        if self.max_prompt_length is not None:
            used = self.backend.count_tokens(self.messages)
            if used is not None and used >= self.max_prompt_length:
                return EpisodeEnd.LENGTH
        action = await super().act(episode)
        if self.last_finish_reason == "length":
            self.messages.append(self._pending)  # kept in the history, not run
            self._pending = None
            return EpisodeEnd.LENGTH
        return action


class _TurnReportingCaller(EnvCaller):
    """An :class:`EnvCaller` that calls ``on_turn()`` after each step, however it ended."""

    def __init__(self, executor: Any, on_turn: Callable[[], None]) -> None:
        super().__init__(executor)
        self.on_turn = on_turn

    async def step(self, env: Any, action: str) -> Any:
        try:
            return await super().step(env, action)
        finally:
            self.on_turn()


class ReActAgent:
    """An LLM with tools (see the module docstring). Built per trajectory from its :class:`TrajectoryConfig`."""

    # the env an agent acts in when its task has none of its own (BaseTask.initialize_runtime builds it)
    tool_env_cls = AgentToolEnv
    default_tools: List[str] = []

    def __init__(self, traj_config: Any, infer_engine: Any, tokenizer: Any) -> None:
        self.cfg = traj_config
        self.backend = infer_engine
        self.tokenizer = tokenizer

    def instruction(self, instruction: List[Dict[str, Any]], env: Any) -> List[Dict[str, Any]]:
        """The task's messages, with how to call the agent's own tools in the system message."""
        messages = [dict(m) for m in instruction]
        if not isinstance(env, AgentToolEnv) or not env.tool_names:
            return messages  # an env's own prompt already says how to act in it
        prefix = self.system_prompt(env)
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] = prefix + "\n\n" + str(messages[0]["content"])
        else:
            messages.insert(0, {"role": "system", "content": prefix})
        return messages

    def system_prompt(self, env: AgentToolEnv) -> str:
        return tools_prompt(env)

    def _caller(self, executor: Any) -> EnvCaller:
        """Runs the env's calls in ``executor``; reports each step to the config's ``on_turn`` when it has one."""
        on_turn = getattr(self.cfg, "on_turn", None)
        return EnvCaller(executor) if on_turn is None else _TurnReportingCaller(executor, on_turn)

    async def run(
        self,
        instruction: List[Dict[str, Any]],
        env: Any,
        *,
        env_class: str = "agent",
        extras: Optional[Dict[str, Any]] = None,
        rollout: Any = None,
        executor: Any = None,
    ) -> AgentRun:
        """Play ``env`` (already built by the task) from ``instruction`` until it ends; never raises for a failure
        of the env, a tool or the backend (the run's ``finish_reason`` and ``error`` say what happened)."""
        prompt = self.instruction(instruction, env)
        if getattr(self.backend, "token_level", False):
            return await self._run_tokens(prompt, env, env_class, extras or {}, rollout, executor)
        return await self._run_chat(prompt, env, env_class, extras or {}, executor)

    async def _run_chat(
        self, prompt: List[Dict[str, Any]], env: Any, env_class: str, extras: Dict[str, Any], executor: Any
    ) -> AgentRun:
        policy = ReActChatPolicy(self.backend, self.cfg.sampling_params, self.cfg.max_prompt_length)

        def make_env() -> Any:
            policy.env = env
            return env

        episode = await run_episode(
            make_env,
            prompt,
            policy,
            env_class=env_class,
            max_turns_cap=self.cfg.max_iterations,
            row_max_turns=extras.get("max_turns"),
            caller=self._caller(executor),
        )
        reason = finish_reason_of(episode.end, getattr(env, "finished", False), episode.error_method)
        messages = policy.messages or [dict(m) for m in prompt]
        return AgentRun(
            messages=messages,
            finish_reason=reason,
            answer=self._answer(env, messages),
            env_reward=episode.total_reward,
            error=episode.error,
            num_turns=episode.num_turns,
            episode=episode,
            env_metrics=episode.env_metrics,
        )

    async def _run_tokens(
        self,
        prompt: List[Dict[str, Any]],
        env: Any,
        env_class: str,
        extras: Dict[str, Any],
        rollout: Any,
        executor: Any,
    ) -> AgentRun:
        from skygym_adapters.rollout.loop import run_trajectory
        from skygym_adapters.rollout.trajectory import Trajectory

        trajectory_id = TrajectoryID(
            instance_id=str(self.cfg.instance_id), repetition_id=int(self.cfg.trajectory_id)
        )
        try:
            trajectory = await run_trajectory(
                rollout.client,
                rollout.chat,
                rollout.config,
                copy.deepcopy(prompt),
                env_class,
                extras,
                trajectory_id,
                self.cfg.sampling_params,
                make_env=lambda: env,
                caller=self._caller(executor),
            )
        except Exception as exc:  # the engine failed: this trajectory fails, the batch goes on
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("trajectory %s: the inference engine failed: %s", trajectory_id, error)
            try:
                prompt_ids = rollout.chat.prompt_ids(prompt)
            except Exception:
                prompt_ids = [rollout.chat.turn_end_token_id]
            trajectory = Trajectory(
                trajectory_id=trajectory_id,
                env_class=env_class,
                prompt_ids=prompt_ids,
                conversation=list(prompt),
                error=error,
                stop_reason="error",
            )
            return AgentRun(
                messages=list(prompt), finish_reason="error_backend", error=error, trajectory=trajectory
            )
        method = None
        if trajectory.error:
            method = trajectory.error.split(":", 1)[0]
        reason = finish_reason_of(trajectory.episode_end, getattr(env, "finished", False), method)
        messages = [dict(m) for m in trajectory.conversation]
        return AgentRun(
            messages=messages,
            finish_reason=reason,
            answer=self._answer(env, messages),
            env_reward=trajectory.total_reward,
            error=trajectory.error,
            num_turns=trajectory.num_turns,
            trajectory=trajectory,
            env_metrics=trajectory.env_metrics,
            replies_cut=sum(turn.stop_reason == "length" for turn in trajectory.turns),
        )

    @staticmethod
    def _answer(env: Any, messages: List[Dict[str, Any]]) -> Optional[str]:
        if getattr(env, "answer", None) is not None:
            return env.answer
        last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
        if last is None:
            return None
        content = last.get("content") or ""
        if not content and last.get("tool_calls"):
            return json.dumps(last["tool_calls"])
        return str(content)


class CodeActAgent(ReActAgent):
    """CodeAct: the model acts by writing Python (a fenced ```python block), which runs in the hub's sandbox with
    state kept between turns; the output comes back as the next message; ``finish`` ends the trajectory. Its tools
    default to ``[finish]`` (the code blocks replace a code tool). On ``task: swe_bench`` (SkyAgent's OpenHands
    CodeAct setting) it acts in the task's container instead: tools ``bash``, ``str_replace_editor`` and
    ``submit`` (``finish`` is read as ``submit``), and a fenced ```bash block runs as a ``bash`` call."""

    tool_env_cls = CodeActToolEnv
    default_tools = ["finish"]

    def system_prompt(self, env: AgentToolEnv) -> str:
        return (
            "Solve the task by writing Python. Put code in a ```python block: it runs in a sandbox (variables and "
            "imports are kept between your messages) and you get back what it printed.\n\n"
            + tools_prompt(env)
        )


__all__ = [
    "AgentRun",
    "CodeActAgent",
    "FINISH_REASONS",
    "ReActAgent",
    "ReActChatPolicy",
    "finish_reason_of",
    "tools_prompt",
]
