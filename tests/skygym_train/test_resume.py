"""A run killed after a checkpoint and resumed with resume_mode=latest ends with the same parameters."""

from __future__ import annotations

import pytest
import torch

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


class Killed(Exception):
    pass


def _config(model, data, tmp, **extra):
    settings = {
        "trainer.max_training_steps": 4,
        "trainer.ckpt_interval": 2,
        "trainer.resume_mode": "latest",
        "trainer.policy.optimizer_config.lr": 1e-2,
    }
    settings.update(extra)
    return load_config(toy_overrides(model, data, tmp, **settings))


@pytest.mark.slow
def test_killed_and_resumed_run_matches_uninterrupted(tiny_chat_model, toy_data, tmp_path, deterministic_kernels):
    with PPOTrainer(_config(tiny_chat_model, toy_data, tmp_path / "straight")) as trainer:
        straight = trainer.fit()
        expected = trainer.policy.call("full_state_dict")[0]

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
