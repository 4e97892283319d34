"""Every registered skyrl_gym env as a real ``gymnasium.Env``.

Importing this module registers each skyrl_gym id with Gymnasium as ``skyrl_gym/<name>-v<N>``
(an unversioned id such as ``gsm8k`` becomes ``skyrl_gym/gsm8k-v0``). Gymnasium has no plugin entry
points, so use its ``module:id`` syntax when nothing imported this module yet::

    import gymnasium
    env = gymnasium.make("skyrl_gym.gymnasium_bridge:skyrl_gym/gsm8k-v0", rows="gsm8k.jsonl")
    obs, info = env.reset(seed=0)            # a row sampled with the seeded ``np_random``
    obs, reward, terminated, truncated, info = env.step("... #### 72")

An episode is one dataset row: ``reset(options={"prompt": ..., "extras": {...}})`` or
``reset(options={"row": {...}})`` or ``reset(options={"index": i})`` choose it; with no such option a
row is sampled from the ``rows`` given at ``make``. Ids registered with skyrl_gym after this module
was imported get their Gymnasium id at once (the bridge listens to registry changes); ids that cannot
be Gymnasium ids are reachable through ``skyrl_gym/lazy-v0`` with ``env_id=...``.

``import skyrl_gym`` never imports this module: gymnasium and numpy are optional (extra ``gymnasium``).
"""

from __future__ import annotations

import copy
import json
import re
import string
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

try:
    import gymnasium
    import numpy as np
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "skyrl_gym.gymnasium_bridge needs gymnasium and numpy: pip install 'skyrl-gym[gymnasium]'"
    ) from exc

import skyrl_gym
from skyrl_gym import data
from skyrl_gym.data import row_extras
from skyrl_gym.episode import apply_turn_limit
from skyrl_gym.registration import add_change_listener, parse_env_id
from skyrl_gym.errors import MissingRewardSpec

NAMESPACE = "skyrl_gym"
LAZY_ID = f"{NAMESPACE}/lazy-v0"
"""A Gymnasium id that resolves its skyrl_gym id (``env_id=...``) when made, for ids added later."""

ENTRY_POINT = "skyrl_gym.gymnasium_bridge:SkyRLGymnasiumEnv"
DEFAULT_MAX_TEXT_CHARS = 1 << 24  # 16 Mi characters: larger than any action or message we expect
_GYM_NAME_RE = re.compile(r"^[\w.-]+$")  # the characters Gymnasium's id parser accepts in a name

# Characters the spaces draw samples from: ASCII plus a few scripts, emoji, a zero-width joiner and a
# right-to-left mark, so that random actions exercise an env's unicode handling.
SAMPLE_CHARSET = (
    string.ascii_letters + string.digits + string.punctuation + " \n\t" + "éßøñÜ" + "αβγ" + "дж" + "中文字"
    + "نص" + "🙂🚀" + "\u200d\u200f"
)


class UnicodeText(spaces.Text):
    """A ``Text`` space that contains every ``str`` of ``min_length`` to ``max_length`` characters.

    Gymnasium's ``Text`` only contains strings over a fixed charset; model output is arbitrary
    unicode. Samples are drawn from :data:`SAMPLE_CHARSET` with lengths up to ``sample_max_length``
    (short by default: ``max_length`` bounds what the space contains, not what is useful to sample).
    """

    def __init__(
        self,
        max_length: int = DEFAULT_MAX_TEXT_CHARS,
        *,
        min_length: int = 0,
        sample_charset: str = SAMPLE_CHARSET,
        sample_max_length: int = 256,
        seed: Optional[int] = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=sample_charset, seed=seed)
        self.sample_max_length = max(min_length, min(sample_max_length, max_length))

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            length = int(self.np_random.integers(self.min_length, self.sample_max_length + 1))
            return super().sample(mask=(length, None))
        return super().sample(mask=mask, probability=probability)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    __hash__ = None  # type: ignore[assignment]  # mutable rng state: like other spaces, not hashable


def message_space(max_message_chars: int = DEFAULT_MAX_TEXT_CHARS) -> spaces.Dict:
    """One chat message: ``{"role": str, "content": str}``."""
    return spaces.Dict(
        {
            "role": UnicodeText(64, min_length=1, sample_charset=string.ascii_lowercase + "_", sample_max_length=16),
            "content": UnicodeText(max_message_chars),
        }
    )


def conversation_space(max_message_chars: int = DEFAULT_MAX_TEXT_CHARS) -> spaces.Sequence:
    """A tuple of chat messages (the prompt at ``reset``, the env's new messages at ``step``)."""
    return spaces.Sequence(message_space(max_message_chars))


# ------------------------------------------------------------------------------------------------
# Conversions between skyrl_gym rows / messages and Gymnasium observations
# ------------------------------------------------------------------------------------------------


def to_observation(messages: Any) -> Tuple[Dict[str, str], ...]:
    """Chat messages as the observation space holds them: a tuple of fresh ``{role, content}`` dicts.

    A bare string becomes one user message; ``content=None`` becomes ``""``; structured content
    (lists of parts) is written as JSON; keys other than role and content are not part of the space
    (the full messages stay available as ``env.conversation``).
    """
    if messages is None:
        return ()
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if isinstance(messages, Mapping):
        messages = [messages]
    observation = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise TypeError(f"expected chat messages as dicts with 'role' and 'content', got {type(message).__name__}")
        content = message.get("content")
        if content is None:
            content = ""
        elif not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, default=str)
        observation.append({"role": str(message.get("role", "")), "content": content})
    return tuple(observation)


def prompt_messages(prompt: Any) -> List[Dict[str, Any]]:
    """A row's prompt as a list of chat messages (a string becomes one user message)."""
    if prompt is None:
        return []
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, Mapping):
        return [dict(prompt)]
    return [dict(m) if isinstance(m, Mapping) else m for m in prompt]


def split_row(row: Mapping[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """A dataset row as ``(prompt, extras)``: every column but ``prompt`` and ``env_class`` is an extra,
    as SkyRL's dataset passes them to the env."""
    if not isinstance(row, Mapping):
        raise TypeError(f"a dataset row must be a dict, got {type(row).__name__}")
    return row.get("prompt"), row_extras(row)


def load_rows(source: Union[str, Path, Sequence[Mapping[str, Any]]]) -> List[Dict[str, Any]]:
    """Validated rows from a list of dicts or a JSONL/Parquet file (a bad row raises, naming it)."""
    return [dict(row) for row in data.load_rows(source)]


# ------------------------------------------------------------------------------------------------
# The Gymnasium env
# ------------------------------------------------------------------------------------------------


class SkyRLGymnasiumEnv(gymnasium.Env):
    """A skyrl_gym env behind Gymnasium's API.

    Args:
        env_id: the skyrl_gym id (``"gsm8k"``); or pass ``env_class=`` as SkyRL's rows name it.
        env_config: passed to the skyrl_gym env at every ``reset`` (settings shared by episodes).
        rows: dataset rows (a list of dicts, or a JSONL/Parquet path) that ``reset`` samples from.
        prompt, extras: a fixed episode, used when there are no rows and ``reset`` gets no options.
        max_turns: a cap on the env's own ``max_turns`` (truncation comes at the lower of the two).
        max_action_chars, max_message_chars: bounds of the text spaces.
        make_kwargs: any other keyword argument of the skyrl_gym env's constructor.

    ``step(text)`` returns ``(new messages, reward, terminated, truncated, info)`` where
    ``terminated`` is the env's ``done``, ``truncated`` is true when ``max_turns`` steps passed
    without ``done``, and ``info`` is a copy of the step's ``metadata``.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(
        self,
        env_id: Optional[str] = None,
        *,
        env_class: Optional[str] = None,
        env_config: Any = None,
        rows: Union[str, Path, Sequence[Mapping[str, Any]], None] = None,
        prompt: Any = None,
        extras: Optional[Mapping[str, Any]] = None,
        max_turns: Optional[int] = None,
        max_action_chars: int = DEFAULT_MAX_TEXT_CHARS,
        max_message_chars: int = DEFAULT_MAX_TEXT_CHARS,
        render_mode: Optional[str] = None,
        **make_kwargs: Any,
    ) -> None:
        env_id = env_id or env_class
        if not env_id:
            raise ValueError("SkyRLGymnasiumEnv needs env_id='<skyrl_gym id>' (e.g. env_id='gsm8k')")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        self.env_spec = skyrl_gym.spec(env_id)  # fails early, naming the id, if it is unknown
        sync_registry()  # ids registered with skyrl_gym since the last sync get their Gymnasium id
        self.env_id = self.env_spec.id
        self.env_config = env_config if env_config is not None else {}
        self.rows: List[Dict[str, Any]] = load_rows(rows) if rows is not None else []
        self.default_prompt = prompt
        self.default_extras = dict(extras or {})
        self.max_turns_override = max_turns
        self.make_kwargs = make_kwargs
        self.render_mode = render_mode
        self.action_space = UnicodeText(max_action_chars)
        self.observation_space = conversation_space(max_message_chars)

        self.inner_env: Optional[skyrl_gym.Env] = None
        self.conversation: List[Dict[str, Any]] = []  # full messages of the episode, actions included
        self.row_index: Optional[int] = None
        self.turns = 0
        self.episode_over = False
        self.last_step_output: Optional[Mapping[str, Any]] = None

    # ----- episode ----------------------------------------------------------------------------
    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
    ) -> Tuple[Tuple[Dict[str, str], ...], Dict[str, Any]]:
        super().reset(seed=seed)
        prompt, extras = self._choose_episode(options or {})
        self._close_inner()
        kwargs = {**self.make_kwargs, "env_config": self.env_config, "extras": extras}
        self.episode_over = True  # until init succeeds, step() must ask for a reset
        try:
            self.inner_env = skyrl_gym.make(self.env_id, **kwargs)
        except MissingRewardSpec as exc:
            if self.rows or options or extras:
                raise
            raise MissingRewardSpec(
                f"{exc}. This Gymnasium env was made without rows, so reset() has no episode to play: pass "
                f"rows=... to gymnasium.make (dataset rows or a JSONL file; skyrl_gym.datasets.build_rows("
                f"{self.env_id!r}) makes them where the env has a builder), extras=... for one fixed episode, or "
                f"reset(options={{'row': row}})") from None
        try:
            observation, info = self.inner_env.init(prompt_messages(prompt))
        except BaseException:
            self._close_inner()
            raise
        self.conversation = [dict(m) for m in prompt_messages(observation)]
        self.turns = 0
        self.turn_limit = apply_turn_limit(self.inner_env, (extras or {}).get("max_turns"), self.max_turns_override)
        self.episode_over = False
        self.last_step_output = None
        return to_observation(observation), copy.deepcopy(dict(info or {}))

    def _choose_episode(self, options: Mapping[str, Any]) -> Tuple[Any, Dict[str, Any]]:
        known = {"row", "index", "prompt", "extras"}
        unknown = set(options) - known
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; expected some of {sorted(known)}")
        if "row" in options:
            self.row_index = None
            prompt, extras = split_row(options["row"])
            return copy.deepcopy(prompt), copy.deepcopy(extras)
        if "index" in options:
            index = options["index"]
            if not self.rows:
                raise ValueError("reset(options={'index': ...}) needs rows given at make (rows=...)")
            if not isinstance(index, (int, np.integer)) or not -len(self.rows) <= index < len(self.rows):
                raise IndexError(f"row index {index!r} out of range for {len(self.rows)} rows")
            self.row_index = int(index) % len(self.rows)
            return copy.deepcopy(split_row(self.rows[self.row_index]))
        if "prompt" in options or "extras" in options:
            self.row_index = None
            return copy.deepcopy(options.get("prompt")), copy.deepcopy(dict(options.get("extras") or {}))
        if self.rows:
            self.row_index = int(self.np_random.integers(len(self.rows)))
            return copy.deepcopy(split_row(self.rows[self.row_index]))
        self.row_index = None
        return copy.deepcopy(self.default_prompt), copy.deepcopy(self.default_extras)

    @property
    def max_turns(self) -> int:
        """The episode's turn limit (the episode driver's rule: the row's, else the env's own, capped by
        ``max_turns=`` given at make); 1 for an env that has none."""
        limit = getattr(self, "turn_limit", None)
        if limit is None and self.inner_env is None:
            limit = self.max_turns_override
        return limit or 1

    def step(self, action: str) -> Tuple[Tuple[Dict[str, str], ...], float, bool, bool, Dict[str, Any]]:
        if self.inner_env is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        if self.episode_over:
            raise gymnasium.error.ResetNeeded("the episode is over (terminated or truncated); call reset()")
        if not isinstance(action, str):
            raise TypeError(f"the action must be the model's text (str), got {type(action).__name__}")
        if len(action) > self.action_space.max_length:
            raise ValueError(
                f"the action has {len(action)} characters, more than max_action_chars={self.action_space.max_length}"
            )
        output = self.inner_env.step(action)
        self.last_step_output = output
        self.turns += 1
        recorded = output.get("postprocessed_action") or action
        self.conversation.append({"role": "assistant", "content": recorded})
        new_messages = prompt_messages(output.get("observations"))
        self.conversation.extend(dict(m) for m in new_messages)

        terminated = bool(output["done"])
        truncated = not terminated and self.turns >= self.max_turns
        self.episode_over = terminated or truncated
        info = copy.deepcopy(dict(output.get("metadata") or {}))
        return to_observation(new_messages), float(output["reward"]), terminated, truncated, info

    # ----- rendering and clean-up -------------------------------------------------------------
    def render(self) -> Optional[str]:
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; make the env with render_mode='ansi'")
            return None
        text = "\n".join(f"[{m.get('role', '')}] {m.get('content', '')}" for m in self.conversation)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def _close_inner(self) -> None:
        inner, self.inner_env = self.inner_env, None
        if inner is not None:
            inner.close()

    def close(self) -> None:
        self._close_inner()
        super().close()


# ------------------------------------------------------------------------------------------------
# Registration with Gymnasium
# ------------------------------------------------------------------------------------------------

_bridged: Dict[str, str] = {}  # gymnasium id -> skyrl_gym id, for the ids this module registered
skipped: Dict[str, str] = {}  # skyrl_gym id -> why it has no Gymnasium id of its own


def gymnasium_id(env_id: str) -> str:
    """The Gymnasium id of a skyrl_gym id: ``gsm8k`` -> ``skyrl_gym/gsm8k-v0``, ``foo-v2`` -> ``skyrl_gym/foo-v2``."""
    name, version = parse_env_id(env_id)
    return f"{NAMESPACE}/{name}-v{version if version is not None else 0}"


def sync_registry() -> Dict[str, str]:
    """Give every skyrl_gym id a Gymnasium id; drop Gymnasium ids whose skyrl_gym env is gone.

    Returns the mapping Gymnasium id -> skyrl_gym id of all bridged envs. A versioned skyrl_gym id
    (``foo-v0``) wins over an unversioned one (``foo``) that would map to the same Gymnasium id.
    """
    gym_registry = gymnasium.envs.registration.registry
    wanted: Dict[str, str] = {}
    skipped.clear()
    for env_id in sorted(skyrl_gym.registry, key=lambda i: parse_env_id(i)[1] is None):
        name, _ = parse_env_id(env_id)
        if not _GYM_NAME_RE.match(name):
            skipped[env_id] = (f"Gymnasium ids allow only letters, digits, '_', '-', '.'; use {LAZY_ID} with "
                               f"env_id={env_id!r}")
            continue
        gym_id = gymnasium_id(env_id)
        if gym_id in wanted:
            skipped[env_id] = f"{gym_id} is taken by {wanted[gym_id]!r}; use {LAZY_ID} with env_id={env_id!r}"
            continue
        wanted[gym_id] = env_id

    for gym_id in [g for g in _bridged if g not in wanted or _bridged[g] != wanted[g]]:
        gym_registry.pop(gym_id, None)
        del _bridged[gym_id]
    for gym_id, env_id in wanted.items():
        if gym_id in _bridged:
            continue
        if gym_id in gym_registry:  # registered by someone else: leave theirs alone
            skipped[env_id] = f"{gym_id} is already registered with Gymnasium by another package"
            continue
        gymnasium.register(id=gym_id, entry_point=ENTRY_POINT, kwargs={"env_id": env_id})
        _bridged[gym_id] = env_id
    if LAZY_ID not in gym_registry:
        gymnasium.register(id=LAZY_ID, entry_point=ENTRY_POINT)
    return dict(_bridged)


def make(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """``gymnasium.make`` for a skyrl_gym id (``"gsm8k"``) or Gymnasium id, after a registry sync."""
    sync_registry()
    gym_id = env_id if env_id.startswith(f"{NAMESPACE}/") else gymnasium_id(skyrl_gym.spec(env_id).id)
    if gym_id not in _bridged and not env_id.startswith(f"{NAMESPACE}/"):
        return gymnasium.make(LAZY_ID, env_id=env_id, **kwargs)
    return gymnasium.make(gym_id, **kwargs)


sync_registry()
# Ids registered or removed later get (or lose) their Gymnasium id at once.
add_change_listener(sync_registry)

__all__ = [
    "SkyRLGymnasiumEnv",
    "UnicodeText",
    "message_space",
    "conversation_space",
    "to_observation",
    "gymnasium_id",
    "sync_registry",
    "make",
    "LAZY_ID",
    "NAMESPACE",
]
