"""trainer.algorithm.use_tis: the per-token weight min(pi_old / pi_rollout, cap) reaches the update; and
trainer.dump_eval_results writes the evaluated samples (one short run covers both)."""

from __future__ import annotations

import json
import math

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


def test_tis_weights_are_one_when_engine_and_trainer_hold_the_same_weights(tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(toy_overrides(
        tiny_chat_model, toy_data, tmp_path,
        **{"trainer.algorithm.use_tis": "true", "trainer.algorithm.tis_imp_ratio_cap": 2.0,
           "trainer.max_training_steps": 1, "trainer.logger": "console", "data.val_data": f"[{toy_data}]",
           "trainer.eval_batch_size": 64, "generator.eval_n_samples_per_prompt": 1, "trainer.eval_interval": 5,
           "trainer.dump_eval_results": "true", "trainer.export_path": str(tmp_path / "exports")},
    ))
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
    step = result["history"][0]
    # the HF engine samples from the policy's own weights (fp32 on CPU), so pi_old / pi_rollout is 1 up to rounding
    assert math.isclose(step["tis/weight_mean"], 1.0, abs_tol=1e-3)
    assert step["tis/capped_fraction"] == 0.0
    dumped = (tmp_path / "exports" / "dumped_evals" / "global_step_1.jsonl").read_text().splitlines()
    assert len(dumped) == 64
    first = json.loads(dumped[0])
    assert first["env_class"] == "test_letter_e" and isinstance(first["response"], str) and "reward" in first
