"""Advantage estimators: grpo, rloo, reinforce++, gae, and a registry for user-defined ones.

Every estimator takes keyword arguments and returns ``(advantages, returns)``, both ``(batch, tokens)``:

- ``token_level_rewards`` ``(B, T)``: the episode reward sits on the last response token (per-turn
  rewards on each turn's last token);
- ``response_mask`` ``(B, T)``: 1 for tokens the model produced, 0 for padding and env tokens;
- ``index``: a group id per row (rows from the same prompt share one);
- ``values`` ``(B, T)`` (gae only), ``config`` (the ``AlgorithmConfig``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Optional, Sequence, Tuple

import torch

from skygym_train.algorithms.registry import FunctionRegistry

AdvantageFn = Callable[..., Tuple[torch.Tensor, torch.Tensor]]
ADVANTAGE_ESTIMATORS: FunctionRegistry[AdvantageFn] = FunctionRegistry("advantage estimator")


def register_advantage_estimator(name: str, *, override: bool = False) -> Callable[[AdvantageFn], AdvantageFn]:
    return ADVANTAGE_ESTIMATORS.decorator(name, override=override)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp_min(1)
    return (values * mask).sum(dim) / mask.sum(dim).clamp_min(1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries (unbiased variance, as in PPO implementations)."""
    mean = masked_mean(values, mask)
    centered = values - mean
    count = mask.sum()
    var = (centered.pow(2) * mask).sum() / (count - 1).clamp_min(1)
    return centered * torch.rsqrt(var + eps)


def _group_rows(index: Sequence[Any]) -> "defaultdict[Any, list[int]]":
    groups: defaultdict[Any, list[int]] = defaultdict(list)
    for row, group in enumerate(index):
        groups[group].append(row)
    return groups


def _config_value(config: Any, name: str, default: Any) -> Any:
    return getattr(config, name, default) if config is not None else default


@register_advantage_estimator("grpo")
def grpo_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    config: Any = None,
    epsilon: float = 1e-6,
    norm_by_std: Optional[bool] = None,
    **_: Any,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Group-relative: (score - group mean) / (group std + eps); without std norm (Dr. GRPO) just centred."""
    if norm_by_std is None:
        norm_by_std = _config_value(config, "grpo_norm_by_std", True)
    scores = token_level_rewards.sum(dim=-1)
    normalized = torch.zeros_like(scores)
    for rows in _group_rows(index).values():
        group = scores[rows]
        if len(rows) == 1:
            # a lone sample has nothing to be compared with
            continue
        centered = group - group.mean()
        normalized[rows] = centered / (group.std() + epsilon) if norm_by_std else centered
    advantages = normalized.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_advantage_estimator("rloo")
def rloo_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any], **_: Any
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Leave-one-out baseline: score_i minus the mean of the other samples of its group."""
    scores = token_level_rewards.sum(dim=-1)
    baselined = torch.zeros_like(scores)
    for rows in _group_rows(index).values():
        n = len(rows)
        if n == 1:
            continue
        group = scores[rows]
        baselined[rows] = group - (group.sum() - group) / (n - 1)
    advantages = baselined.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_advantage_estimator("reinforce++")
def reinforce_plus_plus_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None, **_: Any
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Discounted return-to-go per token, whitened across the whole batch (no critic, no groups)."""
    gamma = float(_config_value(config, "gamma", 1.0))
    returns = torch.zeros_like(token_level_rewards)
    running = token_level_rewards.new_zeros(token_level_rewards.shape[0])
    for t in reversed(range(token_level_rewards.shape[1])):
        running = token_level_rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * response_mask[:, t]  # padding ends the episode
    advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


@register_advantage_estimator("gae")
def gae_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    values: Optional[torch.Tensor] = None,
    config: Any = None,
    whiten: bool = True,
    **_: Any,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation with the critic's values (PPO)."""
    if values is None:
        raise ValueError("the gae advantage estimator needs critic values (trainer.critic.model.path)")
    gamma = float(_config_value(config, "gamma", 1.0))
    lam = float(_config_value(config, "lambd", 1.0))
    batch, length = token_level_rewards.shape
    advantages_reversed = []
    last_gae = token_level_rewards.new_zeros(batch)
    for t in reversed(range(length)):
        next_value = values[:, t + 1] * response_mask[:, t + 1] if t + 1 < length else values.new_zeros(batch)
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        last_gae = delta + gamma * lam * last_gae
        last_gae = last_gae * response_mask[:, t]
        advantages_reversed.append(last_gae)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values
    if whiten:
        advantages = masked_whiten(advantages, response_mask)
    return advantages * response_mask, returns * response_mask


def compute_advantages(name: str, **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    return ADVANTAGE_ESTIMATORS.get(name)(**kwargs)
