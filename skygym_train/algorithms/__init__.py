"""RL algorithms: advantage estimators, policy losses, KL, batch filters (one module each)."""

from skygym_train.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_advantages,
    register_advantage_estimator,
)
from skygym_train.algorithms.kl import kl_estimate, make_kl_controller
from skygym_train.algorithms.policy_losses import POLICY_LOSSES, reduce_loss, register_policy_loss, value_loss
from skygym_train.algorithms.sampling_filters import dynamic_sampling, overlong_filter

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "compute_advantages",
    "dynamic_sampling",
    "kl_estimate",
    "make_kl_controller",
    "overlong_filter",
    "reduce_loss",
    "register_advantage_estimator",
    "register_policy_loss",
    "value_loss",
]
