"""KL to the reference policy: estimators k1/k2/k3 and fixed or adaptive coefficients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import torch

KL_ESTIMATORS = ("k1", "k2", "k3", "abs")


def kl_estimate(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from samples of the policy.

    k1 = log p - log q (unbiased, noisy, can be negative); k2 = (log p - log q)^2 / 2;
    k3 = q/p - log(q/p) - 1 (unbiased, always >= 0, low variance). k3 is clamped to [-10, 10] as its
    exponential can overflow on tokens where the policy has moved far.
    """
    diff = log_probs - ref_log_probs
    if estimator == "k1":
        return diff
    if estimator == "abs":
        return diff.abs()
    if estimator == "k2":
        return 0.5 * diff.pow(2)
    if estimator in ("k3", "low_var_kl"):
        log_ratio = (-diff).clamp(-20, 20)
        return (torch.exp(log_ratio) - log_ratio - 1).clamp(-10, 10)
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {', '.join(KL_ESTIMATORS)}")


@dataclass
class FixedKLController:
    value: float

    def update(self, current_kl: float, n_steps: int) -> None:
        """The coefficient never changes."""


@dataclass
class AdaptiveKLController:
    """Moves the coefficient so that the observed KL tracks ``target`` (Ziegler et al., 2019)."""

    value: float
    target: float
    horizon: int

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = max(-0.2, min(0.2, current_kl / self.target - 1))
        self.value *= 1 + proportional_error * n_steps / self.horizon


KLController = Union[FixedKLController, AdaptiveKLController]


def make_kl_controller(algorithm_config: Any) -> KLController:
    ctrl = algorithm_config.kl_ctrl
    if ctrl.type == "fixed":
        return FixedKLController(value=algorithm_config.kl_loss_coef)
    if ctrl.type == "adaptive":
        return AdaptiveKLController(value=algorithm_config.kl_loss_coef, target=ctrl.kl_target, horizon=ctrl.horizon)
    raise ValueError(f"trainer.algorithm.kl_ctrl.type must be 'fixed' or 'adaptive', got {ctrl.type!r}")


def apply_kl_penalty(
    token_level_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    coef: float,
    estimator: str = "k1",
) -> tuple[torch.Tensor, float]:
    """KL in the reward: r_t - coef * kl_t on every response token. Returns (rewards, mean KL)."""
    kl = kl_estimate(log_probs, ref_log_probs, estimator) * response_mask
    mean_kl = float((kl.sum(-1) / response_mask.sum(-1).clamp_min(1)).mean())
    return token_level_rewards - coef * kl, mean_kl
