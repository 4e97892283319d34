"""One-step-off asynchronous training: the next batch is generated while the current one trains."""

from __future__ import annotations

import pytest

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


@pytest.mark.slow
def test_one_step_off_stays_within_the_staleness_bound(tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(
        toy_overrides(
            tiny_chat_model,
            toy_data,
            tmp_path,
            **{
                "trainer.max_training_steps": 5,
                "trainer.async_training.enabled": "true",
                "trainer.async_training.max_staleness_steps": 1,
                "trainer.placement.colocate_all": "false",
            },
        )
    )
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
    steps = [h for h in result["history"] if "reward/mean" in h]
    assert len(steps) == 5
    staleness = [h["async/staleness"] for h in steps]
    assert staleness[0] == 0
    assert max(staleness) == 1 and min(staleness[1:]) >= 0
    # off-policy batches are trained against log-probs recomputed before the update
    assert all(h["policy/grad_norm"] > 0 for h in steps)
    assert result["global_step"] == 5
