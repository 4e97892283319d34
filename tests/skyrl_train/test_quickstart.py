"""The quickstart: its machinery end to end, and the real model's reward rising.

CI runs the machinery on the tiny random model (2 steps) and the real recipe (SmolLM2-135M) for 12 steps,
long enough for it to start boxing answers (reward ~0 -> ~0.1). The full 40-step run with evaluations
(5 minutes on a quiet 2-core machine, far more on a busy one) is opt-in with SKYRL_GYM_FULL_QUICKSTART=1.
"""

from __future__ import annotations

import json
import os

import pytest

from skyrl_train.quickstart import run_quickstart


@pytest.mark.slow
def test_quickstart_plumbing_on_a_tiny_model(tiny_chat_model, tmp_path):
    summary = run_quickstart(
        tmp_path,
        steps=2,
        model=str(tiny_chat_model),
        extra_overrides=["trainer.eval_batch_size=8", "trainer.progress_bar=false", "generator.sampling_params.max_generate_length=4",
                         "generator.eval_sampling_params.max_generate_length=4"],
    )
    assert summary["steps"] == 2
    assert "eval/reward" in summary["eval_before"] and "eval/reward" in summary["eval_after"]
    assert (tmp_path / "ckpts" / "global_step_2" / "policy.pt").exists()
    assert (tmp_path / "export" / "global_step_2" / "config.json").exists()
    assert (tmp_path / "reward_per_step.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "summary.json").read_text())["reward_per_step"] == summary["reward_per_step"]
    assert len(summary["reward_per_step"]) == 2
    def questions(name):
        return {json.loads(line)["prompt"][-1]["content"] for line in (tmp_path / "data" / name).read_text().splitlines()}

    assert questions("validation.jsonl") and not questions("validation.jsonl") & questions("train.jsonl")  # held out


@pytest.mark.slow
def test_real_model_reward_rises_in_12_steps(tmp_path):
    summary = run_quickstart(
        tmp_path,
        steps=12,
        extra_overrides=["trainer.eval_before_train=false", "data.val_data=[]", "trainer.hf_save_interval=-1",
                         "trainer.progress_bar=false"],
    )
    rewards = summary["reward_per_step"]
    assert len(rewards) == 12
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.03, f"reward did not rise: {rewards}"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SKYRL_GYM_FULL_QUICKSTART") != "1", reason="the full quickstart takes 5-25 minutes; set SKYRL_GYM_FULL_QUICKSTART=1")
def test_full_quickstart_improves_reward(tmp_path):
    summary = run_quickstart(tmp_path, steps=40)
    assert summary["train_reward_last_steps"] > summary["train_reward_first_steps"] + 0.2
    assert summary["eval_after"]["eval/reward"] > summary["eval_before"]["eval/reward"]
