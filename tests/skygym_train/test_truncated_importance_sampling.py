"""trainer.algorithm.use_tis: the per-token weight min(pi_old / pi_rollout, cap) reaches the update."""

from __future__ import annotations

import math

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


def test_tis_weights_are_one_when_engine_and_trainer_hold_the_same_weights(tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(toy_overrides(
        tiny_chat_model, toy_data, tmp_path,
        **{"trainer.algorithm.use_tis": "true", "trainer.algorithm.tis_imp_ratio_cap": 2.0,
           "trainer.max_training_steps": 1, "trainer.logger": "console"},
    ))
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
    step = result["history"][0]
    # the HF engine samples from the policy's own weights (fp32 on CPU), so pi_old / pi_rollout is 1 up to rounding
    assert math.isclose(step["tis/weight_mean"], 1.0, abs_tol=1e-3)
    assert step["tis/capped_fraction"] == 0.0
