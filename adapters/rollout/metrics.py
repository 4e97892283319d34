"""Aggregate figures over a batch of trajectories: rewards, pass@k, lengths, stop reasons, env metrics, timing."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any, Dict, List, Sequence

from skygym_adapters.rollout.trajectory import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al., 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def rollout_metrics(
    trajectories: Sequence[Trajectory], success_threshold: float = 1.0, env_metric_prefix: str = "environment/"
) -> Dict[str, Any]:
    """Figures over ``trajectories`` (keys in SkyRL's ``generate/...`` style plus this project's additions).

    A trajectory counts as solved when its total reward is >= ``success_threshold``. pass@1 and pass@k are
    computed per prompt (``instance_id``) over its samples, then averaged.
    """
    if not trajectories:
        return {}
    rewards = [t.total_reward for t in trajectories]
    lengths = [len(t.response_ids()) for t in trajectories]
    assistant_tokens = [sum(t.response_loss_mask()) for t in trajectories]
    by_prompt: Dict[str, List[bool]] = defaultdict(list)
    for t in trajectories:
        by_prompt[t.trajectory_id["instance_id"]].append(t.total_reward >= success_threshold)
    k = min(len(v) for v in by_prompt.values())
    metrics: Dict[str, Any] = {
        "generate/num_trajectories": len(trajectories),
        "generate/avg_reward": _mean(rewards),
        "generate/pass_at_1": _mean([pass_at_k(len(v), sum(v), 1) for v in by_prompt.values()]),
        f"generate/pass_at_{k}": _mean([pass_at_k(len(v), sum(v), k) for v in by_prompt.values()]),
        "generate/samples_per_prompt": k,
        "generate/avg_num_turns": _mean([t.num_turns for t in trajectories]),
        "generate/avg_num_tokens": _mean(lengths),
        "generate/min_num_tokens": min(lengths),
        "generate/max_num_tokens": max(lengths),
        "generate/avg_assistant_tokens": _mean(assistant_tokens),
        "generate/num_errors": sum(t.error is not None for t in trajectories),
        "generate/truncated_by_max_turns": sum(t.truncated_by_max_turns for t in trajectories),
        "generate/max_turns_cap_reached": _mean([float(t.max_turns_cap_reached) for t in trajectories]),
    }
    for reason, count in Counter(t.stop_reason for t in trajectories).items():
        metrics[f"generate/stop_reason/{reason}"] = count / len(trajectories)
    model_s = sum(t.model_seconds for t in trajectories)
    env_s = sum(t.env_seconds for t in trajectories)
    metrics["timing/avg_model_s"] = model_s / len(trajectories)
    metrics["timing/avg_env_s"] = env_s / len(trajectories)
    metrics["timing/env_share"] = env_s / (model_s + env_s) if model_s + env_s > 0 else 0.0
    drift_checked = [t for t in trajectories if t.drift is not None]
    if drift_checked:
        metrics["drift/checked"] = len(drift_checked)
        metrics["drift/num_drifted"] = sum(not t.drift.ok for t in drift_checked)
    metrics.update(_env_metrics(trajectories, env_metric_prefix))
    return metrics


def _env_metrics(trajectories: Sequence[Trajectory], prefix: str) -> Dict[str, float]:
    """Per env class, the env's own ``aggregate_metrics`` of its episodes' ``get_metrics()``."""
    from skyrl_gym.metrics import aggregate_for_environment, default_aggregate_metrics

    grouped: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for t in trajectories:
        if t.env_metrics:
            grouped[t.env_class].append(t.env_metrics)
    out: Dict[str, float] = {}
    for env_class, episodes in grouped.items():
        try:
            aggregated = aggregate_for_environment(env_class, episodes)
        except Exception:  # an unregistered class or a broken aggregate: fall back to plain means
            aggregated = default_aggregate_metrics(episodes)
        for key, value in aggregated.items():
            out[f"{prefix}{env_class}/{key}"] = value
    return out


__all__ = ["pass_at_k", "rollout_metrics"]
