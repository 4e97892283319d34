"""A run killed after a checkpoint and resumed with resume_mode=latest ends with the same parameters: with the engine
reading the policy's fp32 tensors, and with a bf16 engine lending the bf16-autocast policy its weights
(``borrowed_weights``), which the resumed policy must write before the first rollout."""

from __future__ import annotations

import pytest
import torch

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


class Killed(Exception):
    pass


def _base_config(model, data, tmp, **extra):
    settings = {
        "trainer.max_training_steps": 4,
        "trainer.ckpt_interval": 2,
        "trainer.resume_mode": "latest",
        "trainer.policy.optimizer_config.lr": 1e-2,
    }
    settings.update(extra)
    return load_config(toy_overrides(model, data, tmp, **settings))


COMPUTE = {
    "float32-shared": {},
    "bf16-lent": {"trainer.bf16": "true", "generator.model_dtype": "bfloat16"},
}


@pytest.mark.slow
@pytest.mark.parametrize("compute", sorted(COMPUTE))
def test_killed_and_resumed_run_matches_uninterrupted(compute, tiny_chat_model, toy_data, tmp_path,
                                                     deterministic_kernels, native_linear):
    def _config(model, data, tmp):
        return _base_config(model, data, tmp, **COMPUTE[compute])

    with PPOTrainer(_config(tiny_chat_model, toy_data, tmp_path / "straight")) as trainer:
        straight = trainer.fit()
        expected = trainer.policy.call("full_state_dict")[0]
        on_gpu = trainer.policy.worker.device.type == "cuda"
    measured = [h for h in straight["history"] if "memory/peak_gib" in h]
    assert len(measured) == 4
    for metrics in measured:  # the peak up to the end of generation, where the models are on a GPU; none on a CPU
        if on_gpu:
            assert 0 < metrics["memory/peak_generate_gib"] <= metrics["memory/peak_gib"]
        else:
            assert "memory/peak_generate_gib" not in metrics

    def kill_after_step_3(step, metrics):
        if step == 3:
            raise Killed()

    interrupted = tmp_path / "interrupted"
    with PPOTrainer(_config(tiny_chat_model, toy_data, interrupted)) as trainer:
        with pytest.raises(Killed):
            trainer.fit(on_step=kill_after_step_3)
    assert (interrupted / "ckpts" / "latest_ckpt_global_step.txt").read_text() == "2"

    with PPOTrainer(_config(tiny_chat_model, toy_data, interrupted)) as trainer:
        resumed = trainer.fit()
        actual = trainer.policy.call("full_state_dict")[0]
        assert (trainer._weight_sync.shared, trainer._weight_sync.lent) == (compute == "float32-shared",
                                                                            compute == "bf16-lent")
    assert resumed["resumed_from"].endswith("global_step_2")
    assert resumed["global_step"] == 4

    straight_rewards = [h["reward/mean"] for h in straight["history"] if "reward/mean" in h]
    resumed_rewards = [h["reward/mean"] for h in resumed["history"] if "reward/mean" in h]
    assert resumed_rewards == pytest.approx(straight_rewards)  # the same samples, step for step
    for name, value in expected.items():
        torch.testing.assert_close(actual[name], value, msg=lambda m: f"{name}: {m}")
    # and training really changed them
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(str(tiny_chat_model)).state_dict()
    assert any(not torch.equal(initial[k], expected[k]) for k in initial if k in expected)
