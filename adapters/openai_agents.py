"""Run agents written against the OpenAI chat API (messages and tool calls) against ``skyrl_gym`` envs.

An agent loop built on chat completions keeps a list of messages, offers tools as JSON schemas, and
reads back assistant messages that carry ``content`` and/or ``tool_calls``. :class:`EnvChatSession`
puts an env behind that shape:

* ``session.messages`` starts as the env's first observation (the row's prompt);
* ``session.tools`` are the env's tools as OpenAI function schemas (``BaseTextEnv.tool_schemas()``);
* ``session.step(assistant_message)`` turns the message into the env's action text (tool calls become
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks, the syntax every tool env parses,
  unless the env defines ``tool_call_to_action``), steps the env, and appends its observations as
  ``tool`` messages answering the calls (or as the env's own messages when there were no calls).

:func:`run_episode` drives a whole episode with any ``agent(messages, tools) -> assistant message``
callable; :func:`chat_completions_agent` makes one from an OpenAI-compatible client object
(``client.chat.completions.create``), without depending on the ``openai`` package.
"""

from __future__ import annotations

import inspect
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import skyrl_gym
from skyrl_gym.core import Env
from skyrl_gym.data import row_extras, validate_row
from skyrl_gym.episode import BasePolicy, EnvCallError, EpisodeEnd, StepRecord, make_env_factory, resolve_max_turns
from skyrl_gym.episode import Episode as EpisodeRecord
from skyrl_gym.episode import run_episode as drive_episode
from skyrl_gym.episode import run_sync

Message = Dict[str, Any]
Agent = Callable[[List[Message], List[Dict[str, Any]]], Any]


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Read a field of a dict or of an SDK object (``ChatCompletionMessage`` and friends)."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def normalize_assistant_message(message: Any) -> Message:
    """An assistant message (dict or SDK object) as a plain dict with ``content`` and ``tool_calls``."""
    content = _get(message, "content") or ""
    if isinstance(content, list):  # typed content parts
        content = "".join(str(_get(part, "text", "")) for part in content)
    calls = []
    for index, call in enumerate(_get(message, "tool_calls") or []):
        function = _get(call, "function")
        if function is None:
            raise ValueError(f"tool call {index} has no 'function' field: {call!r:.200}")
        name = _get(function, "name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool call {index} has no function name")
        arguments = _get(function, "arguments", "{}")
        calls.append(
            {
                "id": _get(call, "id") or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)},
            }
        )
    normalized: Message = {"role": "assistant", "content": str(content)}
    if calls:
        normalized["tool_calls"] = calls
    return normalized


def _arguments(call: Message) -> Any:
    raw = call["function"]["arguments"]
    try:
        return json.loads(raw) if raw else {}
    except (ValueError, RecursionError):  # malformed, nested past the decoder's depth, a 5000-digit integer
        return raw  # the env sees the model's malformed arguments and reports them, as it would in text


def default_tool_call_to_action(name: str, arguments: Any) -> str:
    """The Hermes/Qwen text form of a call, which ``skyrl_gym.tools.parsers.parse_tool_calls`` reads."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


def assistant_message_to_action(
    message: Message, tool_call_to_action: Callable[[str, Any], str] = default_tool_call_to_action
) -> str:
    """The env action for an assistant message: its text, then each tool call in the env's syntax."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        parts.append(tool_call_to_action(call["function"]["name"], _arguments(call)))
    return "\n".join(part for part in parts if part)


@dataclass
class StepResult:
    """What one assistant message did: the env's reward, whether the episode ended, the messages appended."""

    reward: float
    done: bool
    new_messages: List[Message]
    action: str
    metadata: Dict[str, Any] = field(default_factory=dict)


class EnvChatSession:
    """One env episode behind the OpenAI chat shape (see the module docstring).

    Build it from an env and a prompt, or from a dataset row with :meth:`from_row`.
    ``max_turns`` ends the episode after that many assistant messages even if the env is not done
    (default: the env's own ``max_turns``).
    """

    def __init__(
        self,
        env: Env,
        prompt: Sequence[Message],
        max_turns: Optional[int] = None,
        tool_call_to_action: Optional[Callable[[str, Any], str]] = None,
    ) -> None:
        self.env = env
        observation, self.info = env.init([dict(m) for m in prompt])
        self.messages: List[Message] = [dict(m) for m in observation]
        unwrapped = getattr(env, "unwrapped", env)
        schemas = getattr(unwrapped, "tool_schemas", None)
        self.tools: List[Dict[str, Any]] = list(schemas()) if callable(schemas) else []
        env_formatter = getattr(unwrapped, "tool_call_to_action", None)
        self.tool_call_to_action = tool_call_to_action or env_formatter or default_tool_call_to_action
        env_max_turns = None if getattr(unwrapped, "max_turns_is_default", False) else getattr(unwrapped, "max_turns", None)
        self.max_turns = resolve_max_turns(None, env_max_turns, max_turns)
        self.rewards: List[float] = []
        self.done = False
        self.env_done = False  # the env itself ended the episode (not the turn cap)

    @classmethod
    def from_row(
        cls, row: Mapping[str, Any], env_config: Any = None, env_id: Optional[str] = None, **kwargs: Any
    ) -> "EnvChatSession":
        row = validate_row(dict(row), require_env_class=env_id is None)
        env = skyrl_gym.make(env_id or row["env_class"], env_config=env_config, extras=row_extras(row))
        return cls(env, row["prompt"], **kwargs)

    @property
    def turns(self) -> int:
        return len(self.rewards)

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    def step(self, assistant_message: Any) -> StepResult:
        """Apply one assistant message (dict or SDK object); returns the reward and the messages appended."""
        if self.done:
            raise RuntimeError("the episode is over; start a new EnvChatSession")
        message = normalize_assistant_message(assistant_message)
        action = assistant_message_to_action(message, self.tool_call_to_action)
        output = self.env.step(action)
        self.messages.append(message)
        reward = float(output["reward"])
        self.rewards.append(reward)
        self.env_done = bool(output["done"])
        self.done = self.env_done or (self.max_turns is not None and self.turns >= self.max_turns)
        observations = [dict(m) for m in output.get("observations") or []]
        new_messages = self._answer_calls(message.get("tool_calls") or [], observations)
        self.messages.extend(new_messages)
        return StepResult(reward, self.done, new_messages, action, dict(output.get("metadata") or {}))

    @staticmethod
    def _answer_calls(calls: List[Message], observations: List[Message]) -> List[Message]:
        """OpenAI servers want one ``tool`` message per call id: pair observations with calls where they match."""
        if not calls:
            return observations
        if len(observations) == len(calls):
            return [
                {"role": "tool", "tool_call_id": call["id"], "content": str(obs.get("content", ""))}
                for call, obs in zip(calls, observations)
            ]
        joined = "\n".join(str(obs.get("content", "")) for obs in observations)
        answers = [{"role": "tool", "tool_call_id": calls[0]["id"], "content": joined}]
        for call in calls[1:]:
            answers.append({"role": "tool", "tool_call_id": call["id"], "content": "(answered together with the first call)"})
        return answers

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> "EnvChatSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class Episode:
    """A finished episode: the whole conversation, each turn's reward, and why it ended."""

    messages: List[Message]
    rewards: List[float]
    done: bool
    stop: str  # an EpisodeEnd value: "env_done" | "max_turns" | "error"
    error: Optional[str] = None

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def turns(self) -> int:
        return len(self.rewards)


class ChatAgentPolicy(BasePolicy):
    """The episode driver's policy for an agent written against the chat API: ``agent(messages, tools)`` answers
    with an assistant message; its tool calls become the env's action text, and the env's observations come back
    as ``tool`` messages answering them."""

    def __init__(self, agent: Agent, tool_call_to_action: Optional[Callable[[str, Any], str]] = None) -> None:
        self.agent = agent
        self.tool_call_to_action = tool_call_to_action
        self.env: Optional[Env] = None  # set by make_env, before start()
        self.tools: List[Dict[str, Any]] = []
        self.messages: List[Message] = []
        self._pending: Optional[Message] = None

    async def start(self, episode: EpisodeRecord) -> Optional[EpisodeEnd]:
        unwrapped = getattr(self.env, "unwrapped", self.env)
        schemas = getattr(unwrapped, "tool_schemas", None)  # BaseTextEnv has tools; a bare Env need not
        self.tools = list(schemas()) if callable(schemas) else []
        self.tool_call_to_action = (self.tool_call_to_action or getattr(unwrapped, "tool_call_to_action", None)
                                    or default_tool_call_to_action)
        self.messages = [dict(m) for m in episode.prompt]
        return None

    async def act(self, episode: EpisodeRecord) -> Union[str, EpisodeEnd]:
        try:
            reply = self.agent([dict(m) for m in self.messages], list(self.tools))
            if inspect.isawaitable(reply):
                reply = await reply
            self._pending = normalize_assistant_message(reply)
        except Exception as exc:  # the agent's failure ends this episode only
            raise EnvCallError("agent", exc) from exc
        return assistant_message_to_action(self._pending, self.tool_call_to_action)

    async def observe(self, episode: EpisodeRecord, step: StepRecord) -> Optional[EpisodeEnd]:
        message, self._pending = self._pending, None
        assert message is not None, "observe() without act()"
        self.messages.append(message)
        self.messages.extend(EnvChatSession._answer_calls(message.get("tool_calls") or [], step.observations))
        return None


async def arun_episode(
    agent: Agent,
    row: Mapping[str, Any],
    max_turns: Optional[int] = None,
    env_config: Any = None,
    env_id: Optional[str] = None,
) -> Episode:
    """Play one episode of the row's env with ``agent`` through the episode driver (``agent`` may be async).

    The turn limit is the row's ``max_turns``, else the env's own, capped by ``max_turns``. An agent or env error
    ends the episode with ``stop="error"`` and the error text; nothing is raised.
    """
    row = validate_row(dict(row), require_env_class=env_id is None)
    env_class = env_id or row["env_class"]
    extras = row_extras(row)
    policy = ChatAgentPolicy(agent)
    make = make_env_factory(env_class, env_config, extras)

    def make_env() -> Env:
        policy.env = make()
        return policy.env

    record = await drive_episode(make_env, row["prompt"], policy, env_class=env_class, max_turns_cap=max_turns,
                               row_max_turns=extras.get("max_turns"))
    end = record.end or EpisodeEnd.ERROR
    messages = policy.messages or [dict(m) for m in row["prompt"]]
    return Episode(messages, record.rewards, end is not EpisodeEnd.ERROR, end.value, record.error)


def run_episode(
    agent: Agent,
    row: Mapping[str, Any],
    max_turns: Optional[int] = None,
    env_config: Any = None,
    env_id: Optional[str] = None,
) -> Episode:
    """:func:`arun_episode` from sync code."""
    return run_sync(arun_episode(agent, row, max_turns=max_turns, env_config=env_config, env_id=env_id))


def chat_completions_agent(client: Any, model: str, **create_kwargs: Any) -> Agent:
    """An agent that asks an OpenAI-compatible client (``client.chat.completions.create``) for each turn."""

    def agent(messages: List[Message], tools: List[Dict[str, Any]]) -> Any:
        kwargs = dict(create_kwargs)
        if tools:
            kwargs["tools"] = tools
        response = client.chat.completions.create(model=model, messages=messages, **kwargs)
        choices = _get(response, "choices")
        if not choices:
            raise ValueError(f"the chat completion for model {model!r} has no choices")
        return _get(choices[0], "message")

    return agent


__all__ = [
    "ChatAgentPolicy",
    "EnvChatSession",
    "Episode",
    "arun_episode",
    "StepResult",
    "assistant_message_to_action",
    "chat_completions_agent",
    "default_tool_call_to_action",
    "normalize_assistant_message",
    "run_episode",
]
