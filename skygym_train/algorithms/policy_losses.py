"""Policy losses (PPO clip, dual clip, asymmetric clip, GSPO, CISPO) and loss reductions.

A policy loss takes ``(log_probs, old_log_probs, advantages, loss_mask, config)`` (tensors ``(B, T)``)
and returns ``(loss, metrics)`` where ``loss`` is already reduced with ``reduce_loss`` according to
``config.loss_reduction``, and each metric is a number or a detached 0-dim tensor. The worker reads tensors once
per optimizer step: ``float()`` in the loss would wait for the GPU between each micro-batch's forward and backward
passes. Register your own with ``@register_policy_loss("name")``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch

from skygym_train.algorithms.registry import FunctionRegistry

Metrics = Dict[str, Union[float, torch.Tensor]]
PolicyLossFn = Callable[..., Tuple[torch.Tensor, Metrics]]
POLICY_LOSSES: FunctionRegistry[PolicyLossFn] = FunctionRegistry("policy loss")

LOSS_REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm")


def register_policy_loss(
    name: str, *, override: bool = False, vanishes_without_advantage: bool = False
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register a policy loss under ``name``.

    ``vanishes_without_advantage=True`` declares that rows whose advantages are all 0 add exactly nothing to the
    loss's gradient (true of every loss here: each per-token term is a multiple of its advantage). The policy
    worker then skips those rows' forward and backward passes (``TrainingWorker._adds_nothing``).
    """
    register = POLICY_LOSSES.decorator(name, override=override)

    def decorate(fn: PolicyLossFn) -> PolicyLossFn:
        fn.vanishes_without_advantage = vanishes_without_advantage  # type: ignore[attr-defined]
        return register(fn)

    return decorate


def reduce_loss(
    per_token: torch.Tensor, mask: torch.Tensor, reduction: str, max_seq_len: Optional[int] = None
) -> torch.Tensor:
    """Reduce a ``(B, T)`` per-token loss to a scalar.

    - ``token_mean``: every unmasked token weighs the same (long answers weigh more);
    - ``sequence_mean``: mean per sequence, then mean over sequences (every answer weighs the same);
    - ``seq_mean_token_sum_norm``: per-sequence token sum divided by a constant ``max_seq_len``, then
      mean over sequences (Dr. GRPO: no length bias either way).
    """
    mask = mask.to(per_token.dtype)
    if reduction == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp_min(1)
    if reduction == "sequence_mean":
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp_min(1)
        return per_seq.mean()
    if reduction == "seq_mean_token_sum_norm":
        if not max_seq_len:
            raise ValueError("loss_reduction=seq_mean_token_sum_norm needs trainer.algorithm.max_seq_len")
        return ((per_token * mask).sum(-1) / max_seq_len).mean()
    raise ValueError(f"unknown loss_reduction {reduction!r}; expected one of {', '.join(LOSS_REDUCTIONS)}")


def _reduction_of(config: Any) -> Tuple[str, Optional[int]]:
    return getattr(config, "loss_reduction", "token_mean"), getattr(config, "max_seq_len", None)


def _clip_metrics(clipped: torch.Tensor, mask: torch.Tensor, ratio: torch.Tensor) -> Metrics:
    with torch.no_grad():
        m = mask.to(ratio.dtype)
        denom = m.sum().clamp_min(1)
        approx_kl = ((ratio - 1) - ratio.clamp_min(1e-12).log()) * m
        return {"clip_fraction": (clipped.to(ratio.dtype) * m).sum() / denom, "ppo_kl": approx_kl.sum() / denom}


def _ppo_clip_per_token(
    ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> Tuple[torch.Tensor, torch.Tensor]:
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_low, 1 + eps_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


@register_policy_loss("regular", vanishes_without_advantage=True)
def ppo_clip_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    **_: Any,
) -> Tuple[torch.Tensor, Metrics]:
    """PPO's clipped surrogate. ``eps_clip_high > eps_clip_low`` gives DAPO's asymmetric clip-higher."""
    ratio = torch.exp(log_probs - old_log_probs)
    per_token, was_clipped = _ppo_clip_per_token(ratio, advantages, config.eps_clip_low, config.eps_clip_high)
    reduction, max_len = _reduction_of(config)
    return reduce_loss(per_token, loss_mask, reduction, max_len), _clip_metrics(was_clipped, loss_mask, ratio)


@register_policy_loss("dual_clip", vanishes_without_advantage=True)
def dual_clip_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    **_: Any,
) -> Tuple[torch.Tensor, Metrics]:
    """PPO clip plus a bound of ``clip_ratio_c * |A|`` on the loss of negative-advantage tokens."""
    ratio = torch.exp(log_probs - old_log_probs)
    per_token, was_clipped = _ppo_clip_per_token(ratio, advantages, config.eps_clip_low, config.eps_clip_high)
    lower_bound = -advantages * config.clip_ratio_c
    dual = torch.where(advantages < 0, torch.minimum(per_token, lower_bound), per_token)
    reduction, max_len = _reduction_of(config)
    metrics = _clip_metrics(was_clipped, loss_mask, ratio)
    m = loss_mask.to(ratio.dtype)
    metrics["dual_clip_fraction"] = ((dual < per_token).to(ratio.dtype) * m).sum().detach() / m.sum().clamp_min(1)
    return reduce_loss(dual, loss_mask, reduction, max_len), metrics


@register_policy_loss("gspo", vanishes_without_advantage=True)
def gspo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    **_: Any,
) -> Tuple[torch.Tensor, Metrics]:
    """GSPO: one importance ratio per sequence (geometric mean of token ratios), clipped as in PPO.

    Each token carries ``exp(logp - sg(logp) + sg(seq_log_ratio))``: its value is the sequence ratio and
    its gradient flows through the token's own log-probability.
    """
    mask = loss_mask.to(log_probs.dtype)
    seq_log_ratio = ((log_probs - old_log_probs) * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    token_log_ratio = log_probs - log_probs.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(token_log_ratio)
    per_token, was_clipped = _ppo_clip_per_token(ratio, advantages, config.eps_clip_low, config.eps_clip_high)
    reduction, max_len = _reduction_of(config)
    return reduce_loss(per_token, loss_mask, reduction, max_len), _clip_metrics(was_clipped, loss_mask, ratio)


@register_policy_loss("cispo", vanishes_without_advantage=True)
def cispo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    **_: Any,
) -> Tuple[torch.Tensor, Metrics]:
    """CISPO: a REINFORCE loss weighted by the clamped, detached importance ratio (no token dropped)."""
    ratio = torch.exp(log_probs - old_log_probs)
    low = 1 - config.cispo.cispo_eps_clip_low
    high = 1 + config.cispo.cispo_eps_clip_high
    weight = ratio.clamp(low, high).detach()
    per_token = -advantages * weight * log_probs
    reduction, max_len = _reduction_of(config)
    was_clipped = (ratio < low) | (ratio > high)
    return reduce_loss(per_token, loss_mask, reduction, max_len), _clip_metrics(was_clipped, loss_mask, ratio)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    value_clip: Optional[float],
) -> Tuple[torch.Tensor, Metrics]:
    """Clipped value loss: 0.5 * max((v - R)^2, (v_clipped - R)^2), token mean."""
    unclipped = (values - returns) ** 2
    if value_clip is not None and value_clip > 0:
        v_clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
        clipped = (v_clipped - returns) ** 2
        per_token = 0.5 * torch.maximum(unclipped, clipped)
        frac = (clipped > unclipped).to(values.dtype)
    else:
        per_token = 0.5 * unclipped
        frac = torch.zeros_like(values)
    m = loss_mask.to(values.dtype)
    return reduce_loss(per_token, loss_mask, "token_mean"), {
        "vf_clip_fraction": (frac * m).sum().detach() / m.sum().clamp_min(1)
    }
