"""A veRL custom reward function that scores a response with the ``skyrl_gym`` env of its row.

Point veRL at it with::

    reward.custom_reward_function.path=pkg://skygym_adapters.verl.reward
    reward.custom_reward_function.name=compute_score

veRL calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)`` once
per response. Single-turn rows are scored by building the row's env and stepping it once with the response.
Rows rolled out by our agent loop (``agent_name: skyrl_gym_agent``) already carry the env's episode
reward, which veRL merges into ``extra_info``; that reward is returned as is, so a multi-turn episode is
never re-scored from its flattened text. Imports only ``skyrl_gym``.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from skyrl_gym.episode import score_response
from skyrl_gym.errors import DataError
from skyrl_gym.registration import env_config_for

from skygym_adapters.verl.rows import SIDECAR_COLUMN, env_class_of, read_sidecar

# Keys our agent loop puts in veRL's extra_fields (veRL merges them into extra_info for the reward function).
EPISODE_REWARD_KEY = "skyrl_gym_reward"
ENV_CLASS_KEY = "skyrl_gym_env_class"




def score_with_env(
    env_class: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[Mapping[str, Any]] = None,
    extras: Optional[Mapping[str, Any]] = None,
    env_config: Any = None,
    prompt: Any = None,
) -> float:
    """The reward of one env step with ``solution_str`` as the action (the first turn for multi-turn envs)."""
    env_extras: Dict[str, Any] = dict(extras or {})
    spec = dict(env_extras.get("reward_spec") or {})
    spec.setdefault("method", "rule")
    spec["ground_truth"] = ground_truth
    env_extras["reward_spec"] = spec
    env_extras["extra_info"] = dict(extra_info or {})
    episode = score_response(env_class, list(prompt or []), solution_str, env_config, env_extras)
    if episode.exception is not None:
        raise episode.exception  # veRL's reward manager reports it for this sample
    return episode.steps[0].reward


def compute_score(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Optional[Mapping[str, Any]] = None,
    env_class: Optional[str] = None,
    env_configs: Optional[Mapping[str, Any]] = None,
    **kwargs: Any,
) -> float:
    """veRL's custom-reward entry point. ``env_class`` and ``env_configs`` may come from ``reward_kwargs``.

    A row whose env cannot be built (unknown id, missing ground truth) raises :class:`DataError` naming the
    data source and env, so a misconfigured run stops at its first batch instead of training on zeros.
    """
    extra_info = dict(extra_info or {})
    if extra_info.get(EPISODE_REWARD_KEY) is not None:
        return float(extra_info[EPISODE_REWARD_KEY])
    env_id = env_class or env_class_of(
        {"data_source": data_source, "extra_info": extra_info, "env_class": extra_info.get(ENV_CLASS_KEY)}
    )
    # Rows converted by skygym_adapters.verl.rows carry their other columns (max_turns, db_id, ...) in extra_info.
    extras: Dict[str, Any] = {"data_source": data_source, **(read_sidecar(extra_info).get("extras") or {})}
    extra_info.pop(SIDECAR_COLUMN, None)
    for key in ("num_turns", "rollout_reward_scores", "turn_scores", "tool_rewards"):  # added by veRL's managers
        extra_info.pop(key, None)
    env_config = env_config_for(dict(env_configs or {}), env_id)
    try:
        return score_with_env(env_id, solution_str, ground_truth, extra_info, extras, env_config)
    except DataError as exc:
        raise DataError(f"veRL reward for data_source {data_source!r} with env {env_id!r}: {exc}") from exc


__all__ = ["compute_score", "score_with_env", "EPISODE_REWARD_KEY", "ENV_CLASS_KEY"]
