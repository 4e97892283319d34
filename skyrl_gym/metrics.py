"""Aggregation of per-episode env metrics."""

from __future__ import annotations

import math
from typing import Any, Dict, List


def default_aggregate_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, float]:
    """Mean of every numeric field across episodes; booleans count as 0/1; other values are dropped.

    A key missing from some episodes is averaged over the episodes that have it. NaN values are kept
    out of the mean so that one broken episode does not poison the aggregate.
    """
    sums: Dict[str, float] = {}
    counts: Dict[str, int] = {}
    for episode in metrics:
        for key, value in episode.items():
            if isinstance(value, bool):
                value = float(value)
            elif isinstance(value, (int, float)):
                value = float(value)
                if math.isnan(value):
                    continue
            else:
                continue
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}


def aggregate_for_environment(env_id: str, metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Aggregate with the ``aggregate_metrics`` of the class registered under ``env_id``."""
    from skyrl_gym.registration import spec

    creator = spec(env_id).load_entry_point()
    aggregate = getattr(creator, "aggregate_metrics", None)
    result = aggregate(metrics) if aggregate is not None else default_aggregate_metrics(metrics)
    if any("judge_error" in m for m in metrics):  # episodes scored by an LLM judge (reward_spec.method "judge")
        from skyrl_gym.rewards.judged_env import aggregate_judge_metrics

        result = {**result, **aggregate_judge_metrics(metrics)}
    return result
