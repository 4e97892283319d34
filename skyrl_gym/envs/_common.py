"""Small helpers shared by the built-in envs: reading the ground truth and bounding action size."""

from __future__ import annotations

import difflib
from typing import Any, Dict, Mapping, Optional

from skyrl_gym.errors import DataError, EnvConfigError, MissingRewardSpec

# Rule-based rewards only need the end of a long answer; scanning 10 MB of text per step would turn
# one adversarial sample into a stalled batch. Envs score at most this many trailing characters.
MAX_SCORED_CHARS = 100_000


def row_extra_info(extras: Mapping[str, Any], env_id: str) -> Mapping[str, Any]:
    """The row's ``extra_info`` dict (empty where it has none, or an empty value: ``""`` and ``[]`` were read as
    ``{}``), or a :class:`DataError` naming what it is."""
    extra_info = extras.get("extra_info")
    if not extra_info:
        return {}
    if not isinstance(extra_info, Mapping):
        raise DataError(f"env {env_id!r}: the row's extra_info must be a dict, got {type(extra_info).__name__}")
    return extra_info


def require_ground_truth(extras: Optional[Mapping[str, Any]], env_id: str, field: str = "reward_spec") -> Any:
    """``extras[field]["ground_truth"]``, or a :class:`DataError` that names what is missing."""
    # type(...) is dict first: rows are plain dicts, and isinstance against typing.Mapping is slow
    if type(extras) is not dict and not isinstance(extras, Mapping):
        raise DataError(
            f"env {env_id!r} needs its dataset row as extras, e.g. skyrl_gym.make({env_id!r}, "
            f"extras={{{field!r}: {{'ground_truth': ...}}}}); got {extras!r:.80}"
        )
    spec = extras.get(field)
    if type(spec) is not dict and not isinstance(spec, Mapping):
        raise MissingRewardSpec(
            f"env {env_id!r}: {field} field is required; the row has no {field!r} dict (expected {{'ground_truth': ...}})"
        )
    if spec.get("ground_truth") is None:
        if "ground_truth" in spec:  # a null in a Parquet or JSON row
            raise MissingRewardSpec(f"env {env_id!r}: {field}.ground_truth is null in the row; it needs the answer "
                                    "to score against (a row whose answer was lost when the dataset was written?)")
        close = difflib.get_close_matches("ground_truth", [str(key) for key in spec], n=1, cutoff=0.7)
        raise MissingRewardSpec(
            f"env {env_id!r}: ground_truth is required in {field} field; {field}.ground_truth is missing from the row"
            + (f" (it has {close[0]!r}: did you mean 'ground_truth'?)" if close else "")
        )
    return spec["ground_truth"]


def config_number(config: Mapping[str, Any], key: str, default: Any, env_id: str, kind: type = float) -> Any:
    """``env_config[key]`` as a ``kind`` (``float`` or ``int``), or an ``EnvConfigError`` that names the env, the
    key and the value (``float('x')`` alone said ``could not convert string to float: 'x'``)."""
    value = config.get(key, default)
    try:
        if isinstance(value, bool):  # float(True) is 1.0: a flag where a number belongs is a mistake
            raise TypeError
        return kind(value)
    except (TypeError, ValueError):
        what = "an integer" if kind is int else "a number"
        raise EnvConfigError(f"env {env_id!r}: env_config.{key} must be {what}, got {value!r:.80}") from None


def turn_limit(extras: Any, env_config: Any, default: int, env_id: str) -> int:
    """The episode's turn limit: the row's ``max_turns`` when it is set (not None; a 0 too, which ends the episode
    after its first step, as in SkyRL-gym), else ``env_config``'s, else ``default``, through :func:`whole_turns`.
    SkyRL-gym reads the row or the default only; ``env_config`` is this project's addition."""
    from skyrl_gym.envs.config_values import config_value

    row = extras.get("max_turns") if isinstance(extras, Mapping) else None
    if row is not None:
        return whole_turns(row, "the row's max_turns", env_id)
    return whole_turns(config_value(env_config, "max_turns", default), "env_config.max_turns", env_id)


def row_turn_limit(extras: Mapping[str, Any], default: Any, env_id: str) -> int:
    """The turn limit of envs that read only the row, as SkyRL-gym's do: ``extras["max_turns"]`` when the key is
    there (0 included), else ``default`` (which the caller may take from the row's ``extra_info``)."""
    return whole_turns(extras.get("max_turns", default), "max_turns", env_id)


def whole_turns(value: Any, where: str, env_id: str) -> int:
    """``int(value)``, or a :class:`DataError` naming ``where`` the value came from (``int('abc')`` alone said
    ``invalid literal for int() with base 10``). What ``int()`` reads is kept (2.5 is 2), so rows that worked
    still do."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"env {env_id!r}: {where} must be a whole number, got {value!r:.80}") from None


def uses_default_tool_path(env: Any, tool_group: Any) -> bool:
    """True when neither the env's ``_execute_tool`` nor the group's ``execute_tool`` is overridden (on the
    class or the instance), so an env may take its own async path to the tool instead of ``_execute_tool``."""
    from skyrl_gym.envs.base_text_env import BaseTextEnv
    from skyrl_gym.tools.core import ToolGroup

    return (
        type(env)._execute_tool is BaseTextEnv._execute_tool
        and "_execute_tool" not in vars(env)
        and type(tool_group).execute_tool is ToolGroup.execute_tool
        and "execute_tool" not in vars(tool_group)
    )


def clip_action(action: Any, metadata: Dict[str, Any]) -> str:
    """The action as a string, keeping its last ``MAX_SCORED_CHARS`` characters (noted in metadata)."""
    if not isinstance(action, str):
        metadata["action_type_error"] = f"action must be a string, got {type(action).__name__}"
        action = "" if action is None else str(action)
    if len(action) > MAX_SCORED_CHARS:
        metadata["action_clipped_from_chars"] = len(action)
        action = action[-MAX_SCORED_CHARS:]
    return action
