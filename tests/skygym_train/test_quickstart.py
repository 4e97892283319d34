"""The quickstart: its machinery end to end, and the real model's reward rising.

CI runs the machinery on the tiny random model (2 steps), then the quickstart itself: 40 steps of the real
recipe (SmolLM2-135M) with evaluations, about 5 minutes on a quiet 2-core machine.
"""

from __future__ import annotations

import json

import pytest

from skygym_train.quickstart import run_quickstart


def test_a_bad_override_is_one_error_line_from_either_entry_point(tmp_path, capsys):
    from skyrl_gym.cli import main as skyrl_gym_main
    from skygym_train.quickstart import main

    assert main(["--out", str(tmp_path), "--steps", "1", "trainer.polciy.optimizer_config.lr=2e-5"]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "did you mean 'policy'" in err and "Traceback" not in err
    code = skyrl_gym_main(["quickstart", "--out", str(tmp_path), "--steps", "1", "trainer.polciy.x=1"])
    assert code == 2 and "did you mean 'policy'" in capsys.readouterr().err


@pytest.mark.slow
def test_quickstart_plumbing_on_a_tiny_model(tiny_chat_model, tmp_path):
    summary = run_quickstart(
        tmp_path,
        steps=2,
        model=str(tiny_chat_model),
        save_checkpoint=True,
        extra_overrides=["trainer.eval_batch_size=8", "trainer.progress_bar=false", "generator.sampling_params.max_generate_length=4",
                         "generator.eval_sampling_params.max_generate_length=4"],
    )
    assert summary["steps"] == 2
    assert "eval/reward" in summary["eval_before"] and "eval/reward" in summary["eval_after"]
    assert (tmp_path / "ckpts" / "global_step_2" / "policy" / ".metadata").is_file()  # sharded (DCP) training state
    export_config = json.loads((tmp_path / "export" / "global_step_2" / "config.json").read_text())
    assert export_config.get("dtype", export_config.get("torch_dtype")) == "bfloat16"  # half the size of float32
    assert (tmp_path / "reward_per_step.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "summary.json").read_text())["reward_per_step"] == summary["reward_per_step"]
    assert len(summary["reward_per_step"]) == 2
    def questions(name):
        return {json.loads(line)["prompt"][-1]["content"] for line in (tmp_path / "data" / name).read_text().splitlines()}

    assert questions("validation.jsonl") and not questions("validation.jsonl") & questions("train.jsonl")  # held out


@pytest.mark.slow
def test_full_quickstart_improves_reward(tmp_path, embedded_model):
    """The README's main job as it is: 40 GRPO steps of SmolLM2-135M-Instruct, evaluated before and after."""
    summary = run_quickstart(tmp_path, steps=40)
    assert len(summary["reward_per_step"]) == 40
    assert summary["checkpoint"] is None and not (tmp_path / "ckpts").exists()  # small outputs by default
    assert summary["output_mb"] < 400, summary["output_mb"]
    # measured (two worked examples before each question): 0.25 -> 0.97 (train), 0.35 -> 0.80 (held-out, greedy)
    assert summary["train_reward_last_steps"] > summary["train_reward_first_steps"] + 0.15, summary["reward_per_step"]
    assert summary["eval_after"]["eval/reward"] > summary["eval_before"]["eval/reward"] + 0.2
    assert (tmp_path / "reward_per_step.png").read_bytes()[:4] == b"\x89PNG"
