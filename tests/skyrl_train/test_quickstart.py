"""The quickstart's machinery end to end (rows, eval before/after, checkpoint, export, plot, summary).

The full run (SmolLM2-135M, 40 steps, 6-25 minutes depending on the machine's load) is opt-in with
SKYRL_GYM_FULL_QUICKSTART=1; it asserts that the reward really rises. CI runs the same code on the tiny
random model for two steps.
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
@pytest.mark.skipif(os.environ.get("SKYRL_GYM_FULL_QUICKSTART") != "1", reason="the full quickstart takes 6-25 minutes; set SKYRL_GYM_FULL_QUICKSTART=1")
def test_full_quickstart_improves_reward(tmp_path):
    summary = run_quickstart(tmp_path, steps=40)
    assert summary["train_reward_last_steps"] > summary["train_reward_first_steps"] + 0.2
    assert summary["eval_after"]["eval/reward"] > summary["eval_before"]["eval/reward"]
