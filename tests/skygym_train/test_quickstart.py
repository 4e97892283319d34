"""The quickstart: its machinery end to end, and the real model's reward rising.

CI runs the machinery on the tiny random model (2 steps), then the quickstart itself: 40 steps of the real
recipe (SmolLM2-135M) with evaluations, about 3.5 minutes on a quiet 2-core machine (6.5 beside the rest of CI).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from skygym_train.quickstart import EARLIER_RUNS, main, move_earlier_run_aside, output_paths, run_quickstart


def test_a_bad_override_is_one_error_line_from_either_entry_point(tmp_path, capsys):
    from skyrl_gym.cli import main as skyrl_gym_main
    from skygym_train.quickstart import main

    assert main(["--out", str(tmp_path), "--steps", "1", "trainer.polciy.optimizer_config.lr=2e-5"]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "did you mean 'policy'" in err and "Traceback" not in err
    code = skyrl_gym_main(["quickstart", "--out", str(tmp_path), "--steps", "1", "trainer.polciy.x=1"])
    assert code == 2 and "did you mean 'policy'" in capsys.readouterr().err


def test_steps_below_1_are_refused_naming_the_option(tmp_path, capsys):
    """`--steps 0` complained about trainer.hf_save_interval=0, a key the user never set."""
    from skyrl_gym.cli import main as skyrl_gym_main
    from skygym_train.quickstart import main

    for run in (main, lambda argv: skyrl_gym_main(["quickstart", *argv])):
        with pytest.raises(SystemExit) as exit_:
            run(["--out", str(tmp_path), "--steps", "0"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "argument --steps: must be at least 1, got 0" in err, err
        assert "hf_save_interval" not in err
    assert not any(tmp_path.iterdir())  # nothing written
    with pytest.raises(ValueError, match="steps must be at least 1, got 0"):
        run_quickstart(tmp_path, steps=0)


def test_a_bad_model_or_env_is_one_error_line_and_moves_nothing_aside(tmp_path, capsys):
    from skygym_train.quickstart import main

    (tmp_path / "summary.json").write_text('{"steps": 40}')  # an earlier run's
    for bad in (["--model", str(tmp_path / "missing")], ["environment.env_class=multiplyy"]):
        assert main(["--out", str(tmp_path), "--steps", "1", *bad]) == 2
        err = capsys.readouterr().err
        assert "error: invalid trainer configuration:" in err and "Traceback" not in err
        assert "does not exist" in err or "Did you mean: 'multiply'?" in err, err
    assert (tmp_path / "summary.json").read_text() == '{"steps": 40}'
    assert not (tmp_path / EARLIER_RUNS).exists()


def test_the_quickstarts_rows_score_a_boxed_wrong_answer_as_training_does(tmp_path, capsys, monkeypatch):
    """The rows did not carry the recipe's boxed_wrong_reward=0.1 (env config): `skyrl-gym step` and `eval` on
    them gave 0.5 for a boxed wrong answer, and re-evaluating the export disagreed with the summary."""
    import io
    import sys

    from skyrl_gym.cli import main as skyrl_gym_main
    from skygym_train.quickstart import quickstart_overrides, write_multiply_rows

    recipe = quickstart_overrides(tmp_path, 40, "smollm2-135m")
    credit = recipe["environment.env_config"]["boxed_wrong_reward"]
    write_multiply_rows(tmp_path, num_train=8, num_val=4, boxed_wrong_reward=credit)
    monkeypatch.setattr(sys, "stdin", io.StringIO("\\boxed{-1}\n"))
    assert skyrl_gym_main(["step", "multiply", "--row", str(tmp_path / "validation.jsonl"), "--json"]) == 0
    [reward] = [json.loads(line)["reward"] for line in capsys.readouterr().out.splitlines()
                if "reward" in json.loads(line)]
    assert reward == credit == 0.1


def test_a_run_whose_last_steps_trained_nothing_because_it_learned_reads_as_success():
    """A finished run ended on the trainer's 'steps 37-39 trained nothing' note, which read like an error; the
    summary now says those steps had nothing left to learn. The steps' figures are a real run's (40 steps)."""
    from skygym_train.quickstart import _report, _summary

    trained = [0.5, 0.25, 0.125, 0.125, 0.25, 0.125, 0.125, 0.0, 0.0, 0.0, 0.0]  # steps 30-40
    solved = [0.5, 0.75, 0.875, 0.875, 0.75, 0.875, 0.875, 1.0, 1.0, 0.875, 1.0]
    history = [{"step": 30 + i, "reward/mean": 0.9, "policy/trained_group_fraction": t,
                "reward/solve_all_fraction": f} for i, (t, f) in enumerate(zip(trained, solved))]
    result = {"global_step": 40, "total_steps": 40, "minutes": 3.0, "export": "export/global_step_40",
              "history": history}
    summary = _summary(result)
    assert summary["untrained_last_steps"] == {"steps": [37, 40], "solved_by_every_sample": 0.9688}
    report = _report(summary).splitlines()
    assert report[1] == "== quickstart finished in 3.0 min (40 steps)"
    assert report[3] == ("   steps 37-40 trained nothing, as expected once the model has learned the task: "
                         "each question's answers agreed, 97% of questions right in every answer (GRPO "
                         "learns from the differences between a question's answers)")
    # fewer such steps than make the trainer say so, or a task the model does not solve: no such line
    history[-3]["policy/trained_group_fraction"] = 0.125
    assert _summary(result)["untrained_last_steps"] is None
    for h in history:
        h["policy/trained_group_fraction"], h["reward/solve_all_fraction"] = 0.0, 0.0
    assert "as expected" not in _report(_summary(result))
    one = _summary({**result, "global_step": 1, "total_steps": 1, "history": history[:1]})
    assert _report(one).splitlines()[1] == "== quickstart finished in 3.0 min (1 step)"


def _quickstart_config(out_dir, *overrides):
    from omegaconf import OmegaConf

    from skygym_train.config.loader import load_config
    from skygym_train.quickstart import quickstart_recipe

    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    for name in ("train.jsonl", "validation.jsonl"):  # the config checks that the data files exist
        (out_dir / "data" / name).write_text("")
    return load_config(OmegaConf.to_container(quickstart_recipe(out_dir, 2, "smollm2-135m", overrides)))


def test_a_step_keeps_its_rows_in_one_pass_when_the_user_changes_how_many_there_are(tmp_path):
    """`generator.n_samples_per_prompt=6` (what the trainer suggests when steps train nothing) was refused: the
    recipe's micro-batch of 32 rows did not divide 48, a size the user never set."""
    def micro(*overrides):
        t = _quickstart_config(tmp_path, *overrides).trainer
        return t.micro_train_batch_size_per_gpu, t.micro_forward_batch_size_per_gpu

    assert micro() == (32, 32)  # the recipe: 8 prompts x 4 samples
    assert micro("generator.n_samples_per_prompt=6") == (48, 48)
    assert micro("generator.n_samples_per_prompt=5") == (40, 40)
    assert micro("trainer.train_batch_size=16", "trainer.policy_mini_batch_size=16") == (64, 64)
    # more than one pass holds: as few equal passes as split the rows
    assert micro("generator.n_samples_per_prompt=12") == (48, 48)  # 96 rows in two passes
    assert micro("generator.n_samples_per_prompt=13") == (52, 52)  # 104 rows in two passes
    # sizes the user gives are theirs
    assert micro("generator.n_samples_per_prompt=6", "trainer.micro_train_batch_size_per_gpu=12") == (12, 48)


def test_a_size_that_cannot_be_read_is_the_only_problem_named(tmp_path, capsys):
    """`n_samples_per_prompt=four` was refused, then a micro-batch check that used the schema's default in its
    place complained about 40 sequences, a number the user never gave."""
    from skygym_train.quickstart import main

    assert main(["--out", str(tmp_path / "out"), "--steps", "1", "generator.n_samples_per_prompt=four"]) == 2
    err = capsys.readouterr().err
    assert "generator.n_samples_per_prompt=four" in err and "expected an integer" in err, err
    assert "does not divide" not in err and "sequences" not in err, err
    assert not (tmp_path / "out").exists()  # a refused run leaves no folder behind


def test_the_outputs_a_rerun_moves_aside_are_the_runs_own_inside_its_folder(tmp_path):
    out = tmp_path / "out"
    names = lambda paths: sorted(str(p.relative_to(out)) for p in paths)  # noqa: E731
    cfg = _quickstart_config(out)
    # and what the printed `skyrl-gym eval` command wrote beside the rows: it measured this run's export (it was
    # left beside the next run's data)
    assert names(output_paths(cfg, out)) == ["ckpts", "data/eval_trajectories.jsonl", "export", "logs/quickstart",
                                             "reward_per_step.png", "summary.json"]
    # a resumed run keeps the checkpoints it goes on from and the logs it adds to
    assert names(output_paths(cfg, out, keep_resumable=True)) == ["data/eval_trajectories.jsonl", "export",
                                                                  "reward_per_step.png", "summary.json"]
    # a path the user moved out of the folder is not the quickstart's to move; one inside another goes with
    # it; never the data rows or the earlier runs
    cfg = _quickstart_config(out, f"trainer.export_path={tmp_path / 'elsewhere'}",
                             f"trainer.plot_path={out / 'logs' / 'quickstart' / 'plot.png'}",
                             f"trainer.ckpt_path={out / 'data'}")
    assert names(output_paths(cfg, out)) == ["data/eval_trajectories.jsonl", "logs/quickstart", "summary.json"]


def test_moving_an_earlier_run_aside_keeps_every_file_and_names_the_folder_by_its_time(tmp_path):
    def earlier_run():
        (tmp_path / "logs" / "quickstart").mkdir(parents=True)
        (tmp_path / "logs" / "quickstart" / "metrics.jsonl").write_text('{"step": 1}\n')
        (tmp_path / "summary.json").write_text("{}")
        for path in (tmp_path / "logs" / "quickstart" / "metrics.jsonl", tmp_path / "summary.json"):
            os.utime(path, (1_700_000_000, 1_700_000_000))
        # and no export: that run never got there
        return [tmp_path / "logs", tmp_path / "summary.json", tmp_path / "export"]

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("rows")
    # a first run
    assert move_earlier_run_aside([tmp_path / "logs", tmp_path / "summary.json"], tmp_path) is None
    first = move_earlier_run_aside(earlier_run(), tmp_path)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(1_700_000_000))
    assert first == tmp_path / EARLIER_RUNS / stamp
    assert (first / "logs" / "quickstart" / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert (first / "summary.json").read_text() == "{}" and not (first / "export").exists()
    assert not (tmp_path / "logs").exists() and not (tmp_path / "summary.json").exists()
    assert (tmp_path / "data" / "train.jsonl").read_text() == "rows"  # the data rows stay
    # another at the same time: a folder of its own, nothing replaced
    second = move_earlier_run_aside(earlier_run(), tmp_path)
    assert second == tmp_path / EARLIER_RUNS / f"{stamp}-2" and (second / "summary.json").is_file()
    assert (first / "summary.json").is_file()


def test_an_earlier_runs_summary_names_its_outputs_where_they_were_moved(tmp_path):
    """The moved summary still named the export at its old path: its `skyrl-gym eval` command found no model."""
    export, data = tmp_path / "export" / "global_step_40", tmp_path / "data" / "validation.jsonl"
    export.mkdir(parents=True)
    (tmp_path / "export2").mkdir()  # a folder whose name starts like a moved one's
    summary = {"export": str(export), "plot": str(tmp_path / "reward_per_step.png"), "steps": 40,
               "eval_command": f"skyrl-gym eval --data {data} --model {export} --temperature 0",
               "notes": [str(tmp_path / "export2"), None]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "reward_per_step.png").write_bytes(b"png")
    moved = move_earlier_run_aside([tmp_path / "export", tmp_path / "reward_per_step.png",
                                    tmp_path / "summary.json"], tmp_path)
    earlier = json.loads((moved / "summary.json").read_text())
    assert earlier == {**summary, "export": str(moved / "export" / "global_step_40"),
                       "plot": str(moved / "reward_per_step.png"),
                       "eval_command": f"skyrl-gym eval --data {data} --model {moved / 'export' / 'global_step_40'} "
                                       "--temperature 0"}
    assert os.path.isdir(earlier["export"]) and os.path.isfile(earlier["plot"])


def test_an_earlier_runs_entry_that_is_not_a_folder_is_a_clear_error_and_moves_nothing(tmp_path):
    from skygym_train.config.errors import ConfigError

    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / EARLIER_RUNS).write_text("a file the user put here")
    with pytest.raises(ConfigError, match="is not a folder: .*move it away, or give another --out"):
        move_earlier_run_aside([tmp_path / "summary.json"], tmp_path)
    assert (tmp_path / "summary.json").read_text() == "{}"
    assert (tmp_path / EARLIER_RUNS).read_text() == "a file the user put here"


@pytest.mark.slow
def test_a_rerun_into_the_same_folder_leaves_only_its_own_outputs_and_starts_at_step_0(
        tiny_chat_model, tmp_path, capsys):
    """The README's command twice in a row: the second run's metrics, export, checkpoint, plot and summary are
    its own, it trains from step 0 (the first run's checkpoint is not resumed from, nor replaced), and the
    first run's outputs are all kept, in one folder that a line on stderr names."""
    def quickstart(steps, *overrides):
        return run_quickstart(tmp_path, steps=steps, model=str(tiny_chat_model), save_checkpoint=True,
                              extra_overrides=[*TINY, *overrides])

    def metric_steps(folder):
        lines = (folder / "logs" / "quickstart" / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line)["step"] for line in lines if "reward/mean" in json.loads(line)]

    def listing(folder, sub):
        return sorted(p.name for p in (folder / sub).iterdir() if p.name.startswith("global_step_"))

    first = quickstart(2)
    first_export = (tmp_path / "export" / "global_step_2" / "model.safetensors").read_bytes()
    (tmp_path / "data" / "eval_trajectories.jsonl").write_text("{}\n")  # the summary's eval command, run on it
    capsys.readouterr()
    second = quickstart(2)
    err = capsys.readouterr().err
    # the new run: from step 0 (evaluated before training, which a resumed run is not), nothing of the first
    assert second["steps"] == 2 and len(second["reward_per_step"]) == 2
    assert "eval/reward" in second["eval_before"]
    assert metric_steps(tmp_path) == [1, 2]
    assert listing(tmp_path, "export") == listing(tmp_path, "ckpts") == ["global_step_2"]
    assert json.loads((tmp_path / "summary.json").read_text())["reward_per_step"] == second["reward_per_step"]
    run_files = [f for f in tmp_path.rglob("*") if f.is_file() and EARLIER_RUNS not in f.parts]
    assert second["output_mb"] < sum(f.stat().st_size for f in run_files) / 1e6 + 0.1  # only its own outputs
    assert second["output_mb"] > 0.5 * first["output_mb"]
    # the first run, whole, beside it, in the folder a line on stderr names
    [earlier] = list((tmp_path / EARLIER_RUNS).iterdir())
    moved = [line for line in err.splitlines() if "moved" in line]
    assert moved == ["quickstart: moved the earlier run's outputs (ckpts, data/eval_trajectories.jsonl, export, "
                     f"logs/quickstart, reward_per_step.png, summary.json) to {earlier}"]
    assert metric_steps(earlier) == [1, 2]
    assert (earlier / "export" / "global_step_2" / "model.safetensors").read_bytes() == first_export
    assert (earlier / "ckpts" / "global_step_2" / "policy" / ".metadata").is_file()
    assert json.loads((earlier / "summary.json").read_text())["reward_per_step"] == first["reward_per_step"]
    assert (earlier / "reward_per_step.png").is_file()
    assert [f.name for f in (earlier / "data").iterdir()] == ["eval_trajectories.jsonl"]  # the rows stay
    assert not (tmp_path / "data" / "eval_trajectories.jsonl").exists()
    assert json.loads((earlier / "summary.json").read_text())["export"] == str(earlier / "export" / "global_step_2")

    # resuming (trainer.resume_mode=latest) goes on from the checkpoint, which stays with the logs it adds to;
    # on the command line the resume is one `warning:` line, and its checkpoint replaces the one it went on from
    assert main(["--out", str(tmp_path), "--steps", "3", "--model", str(tiny_chat_model), "--checkpoint", *TINY,
                 "trainer.resume_mode=latest"]) == 0
    third = json.loads((tmp_path / "summary.json").read_text())
    assert third["steps"] == 3 and third["eval_before"] is None
    assert metric_steps(tmp_path) == [1, 2, 3] and listing(tmp_path, "export") == ["global_step_3"]
    assert listing(tmp_path, "ckpts") == ["global_step_3"]  # trainer.max_ckpts_to_keep=1: not 1.7 GB per run
    err = capsys.readouterr().err
    assert "outputs (export, reward_per_step.png, summary.json) to" in err
    [resumed] = [line for line in err.splitlines() if "resumed from" in line]
    assert resumed.startswith("warning: resumed from ") and "global_step_2 at step 2" in resumed, resumed
    assert "ResumedWarning" not in err
    assert len(list((tmp_path / EARLIER_RUNS).iterdir())) == 2


TINY = [  # the smallest run: with the tiny model, 4 new tokens and no progress bar
    "trainer.eval_batch_size=8", "trainer.progress_bar=false",
    "generator.sampling_params.max_generate_length=4", "generator.eval_sampling_params.max_generate_length=4",
]


@pytest.mark.slow
def test_quickstart_plumbing_on_a_tiny_model(tiny_chat_model, tmp_path):
    summary = run_quickstart(
        tmp_path,
        steps=2,
        model=str(tiny_chat_model),
        save_checkpoint=True,
        extra_overrides=[*TINY, "environment.env_config.boxed_wrong_reward=0.3"],
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
    # the rows carry the partial credit the run trained with, the user's override of the recipe's included
    for name in ("train.jsonl", "validation.jsonl"):
        rows = [json.loads(line) for line in (tmp_path / "data" / name).read_text().splitlines()]
        assert {row["boxed_wrong_reward"] for row in rows} == {0.3}
    # and the command the summary gives runs the held-out evaluation again, on the export
    from skyrl_gym.cli import main as skyrl_gym_main

    export = tmp_path / "export" / "global_step_2"
    from skygym_adapters.models import computes_bf16_natively

    dtype = "bfloat16" if computes_bf16_natively() else "float32"  # as the trainer's engine decoded
    assert summary["eval_command"] == (f"skyrl-gym eval --data {tmp_path / 'data' / 'validation.jsonl'} "
                                       f"--model {export} --temperature 0 --max-tokens 4 --dtype {dtype}")
    again = tmp_path / "again.json"
    argv = [*summary["eval_command"].split()[1:], "--summary-json", str(again), "--no-progress",
            "--output", str(tmp_path / "trajectories.jsonl")]
    assert skyrl_gym_main(argv) == 0
    assert json.loads(again.read_text())["mean_reward"] == summary["eval_after"]["eval/reward"]
    assert (summary["eval_command_note"] is None) == (dtype == "bfloat16")  # the export is bfloat16


@pytest.mark.parametrize("engine, export, differs", [
    ("float32", "bfloat16", True),  # a CPU without bfloat16 arithmetic: the engine evaluated unrounded weights
    ("bfloat16", "bfloat16", False),  # the engine's weights are the export's
    ("bfloat16", "float32", False),  # the command rounds the export as the engine did
    ("float32", "float32", False),
    ("bfloat16", "float16", True),
])
def test_the_summary_says_when_the_exports_weights_are_not_the_ones_the_run_evaluated(engine, export, differs):
    from omegaconf import OmegaConf

    from skygym_train.quickstart import _eval_command_note

    cfg = OmegaConf.create({"generator": {"backend": "hf", "model_dtype": engine}, "trainer": {"export_dtype": export}})
    note = _eval_command_note(cfg)
    assert (note is not None) == differs
    if differs:
        assert note == (f"its weights are {export}, the run evaluated {engine} ones: expect a greedy answer or two "
                        f"to differ; trainer.export_dtype={engine} exports what the run evaluated")


def test_turning_off_the_evaluation_before_training_keeps_the_one_after(tiny_chat_model, tmp_path, capsys):
    """``trainer.eval_before_train=false`` dropped the evaluation after training too, and the report printed
    ``held-out eval reward (greedy): None -> None``."""
    summary = run_quickstart(tmp_path, steps=1, model=str(tiny_chat_model),
                             extra_overrides=[*TINY, "trainer.eval_before_train=false"])
    assert summary["eval_before"] is None and "eval/reward" in summary["eval_after"]
    assert "eval/reward" in json.loads((tmp_path / "summary.json").read_text())["eval_after"]
    [line] = [line for line in capsys.readouterr().out.splitlines() if "held-out eval reward" in line]
    after = summary["eval_after"]["eval/reward"]
    assert line == f"   held-out eval reward (greedy): (not run) -> {after:.3f}"  # 0.400, not 0.4 beside 0.353


@pytest.mark.slow
def test_ctrl_c_stops_the_quickstart_between_steps_with_one_line_and_the_partial_outputs(tiny_chat_model,
                                                                                          tmp_path):
    """Ctrl-C at step 8 ended in a 16-frame KeyboardInterrupt traceback and left only the data rows and the
    metrics; now the step in progress finishes, the run stops with one line, exit status 130, the steps done
    plotted and summed up in summary.json (saying the run was interrupted), and no export of a half-trained
    policy."""
    from tests.skygym_train.ctrl_c import interrupt_after

    out = tmp_path / "out"
    code, output = interrupt_after(["-m", "skygym_train.quickstart", "--out", str(out), "--steps", "300",
                                    "--model", str(tiny_chat_model), *TINY], "[step 2]")
    assert code == 130, output
    assert "Traceback" not in output and "Task was destroyed" not in output, output
    assert "Ctrl-C: stopping once the step in progress is done (Ctrl-C again stops at once)" in output
    [line] = [line for line in output.splitlines() if "interrupted at step" in line]
    step = int(line.split("interrupted at step ")[1].split()[0])
    assert line.startswith(f"== quickstart interrupted at step {step} of 300 (Ctrl-C)") and 2 <= step < 300
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["steps"] == step and summary["steps_planned"] == 300
    assert len(summary["reward_per_step"]) == step and summary["export"] is None
    assert "eval/reward" in summary["eval_before"] and summary["eval_after"] is None
    assert (out / "reward_per_step.png").read_bytes()[:4] == b"\x89PNG"
    metrics = (out / "logs" / "quickstart" / "metrics.jsonl").read_text().splitlines()
    assert max(json.loads(line)["step"] for line in metrics) == step
    assert not (out / "export").exists() and not (out / "ckpts").exists()


@pytest.mark.slow
def test_a_second_ctrl_c_stops_the_quickstart_at_once(tiny_chat_model, tmp_path):
    from tests.skygym_train.ctrl_c import interrupt_after

    code, output = interrupt_after(["-m", "skygym_train.quickstart", "--out", str(tmp_path), "--steps", "300",
                                    "--model", str(tiny_chat_model), *TINY], "[step 2]", "Ctrl-C again")
    assert code == 130 and "Traceback" not in output, output
    assert output.rstrip().endswith("interrupted: stopped at once (Ctrl-C again, or outside the training "
                                    "steps); nothing more written"), output


@pytest.mark.slow
def test_the_quickstart_script_ends_saying_how_to_use_its_skyrl_gym_command(tiny_chat_model, tmp_path):
    """Nothing said where the quickstart's virtual environment is, which every next step in the docs needs; it
    is said after a finished run and after Ctrl-C. The script runs for real into a venv folder of the test's
    (SKYRL_GYM_VENV) whose pip is a test double (the install is CI's to test) and whose python is this one."""
    import stat
    import subprocess
    import sys
    from pathlib import Path

    from tests.skygym_train.ctrl_c import interrupt_after

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    pip_calls = tmp_path / "pip_calls"
    for name, body in (("python", f'exec {sys.executable} "$@"'), ("pip", f'echo "$@" >> {pip_calls}')):
        (venv / "bin" / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (venv / "bin" / name).chmod(stat.S_IRWXU)
    script = Path(__file__).resolve().parents[2] / "scripts" / "quickstart.sh"
    env = {**os.environ, "SKYRL_GYM_VENV": str(venv), "SKYRL_GYM_OUT": str(tmp_path / "out")}
    next_steps = (f"== next: the skyrl-gym command is installed in {venv}; in a new shell, activate it "
                  f"first:\n   source {venv}/bin/activate\n"
                  "   skyrl-gym list        # the environments; then init, check, eval (docs/new-environment.md)")
    cpu_index = "file:///nowhere/torch-cpu-wheels"  # where a machine without a GPU takes torch's CPU build from
    done = subprocess.run(["bash", str(script), "--steps", "1", "--model", str(tiny_chat_model), *TINY],
                          cwd=tmp_path, env={**env, "SKYRL_GYM_TORCH_INDEX": cpu_index}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(next_steps)
    assert "real_accelerator" not in done.stdout + done.stderr  # DeepSpeed's "unable to detect" GPU warning, in a run without it
    # piped to a file, Hugging Face's loading and writing bars are left out; the trainer's own lines stay
    assert "Loading weights" not in done.stderr and "Writing model shards" not in done.stderr
    assert "[step 1]" in done.stdout + done.stderr
    torch_install = [line for line in pip_calls.read_text().splitlines() if "torch==" in line]
    assert torch_install == [f"install -q --index-url {cpu_index} torch==2.13.0"]
    # Ctrl-C in the terminal (to bash and the quickstart both): the quickstart's summary, then the same lines
    code, output = interrupt_after([str(script), "--steps", "300", "--model", str(tiny_chat_model), *TINY],
                                   "[step 2]", program=["bash"], cwd=tmp_path, env=env)
    assert code == 130 and "Traceback" not in output, output
    assert "== quickstart interrupted at step" in output and output.rstrip().endswith(next_steps)


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
    # the command the summary gives measures the export as the run did: 0.831 against the summary's 0.859
    # without the engine's dtype, 0.906 when the rows did not carry the partial credit. Where the engine decodes
    # in float32 (a CPU without bfloat16 arithmetic) the bfloat16 export's weights are not the ones the run
    # evaluated, and the summary says so: 0.859 against the run's 0.831 on such a CPU, one answer of 32.
    from skyrl_gym.cli import main as skyrl_gym_main

    again = tmp_path / "again.json"
    argv = [*summary["eval_command"].split()[1:], "--summary-json", str(again), "--no-progress",
            "--output", str(tmp_path / "trajectories.jsonl")]
    assert skyrl_gym_main(argv) == 0
    measured, run = json.loads(again.read_text())["mean_reward"], summary["eval_after"]["eval/reward"]
    if summary["eval_command_note"] is None:
        assert measured == pytest.approx(run)
    else:
        assert summary["eval_command_note"].startswith("its weights are bfloat16, the run evaluated float32 ones")
        assert measured == pytest.approx(run, abs=2 / 32 + 1e-9)  # two greedy answers of 32


def test_a_hub_model_that_cannot_be_fetched_is_one_error_line_from_either_entry_point(tmp_path, capsys,
                                                                                       monkeypatch):
    """A hub model that cannot be had (offline and not cached, or misspelt) is one `error:` line and exit 2, not
    three chained tracebacks, from either entry point, before anything starts."""
    import huggingface_hub.constants

    from skygym_train.entrypoints.main_base import main as train_main
    from skygym_train.quickstart import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read when fetching: no network
    hub_id = "skygym-tests/no-such-model"
    said = (f"  - trainer.policy.model.path={hub_id}: hub model '{hub_id}' is not in the hub cache, and "
            "HF_HUB_OFFLINE=1 forbids fetching it")
    assert main(["--out", str(tmp_path / "qs"), "--steps", "1", "--model", hub_id]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply", '
                    '"reward_spec": {"ground_truth": "6"}}\n')  # a row the trainer takes: the model is what fails
    keys = [f"data.train_data=[{data}]", f"trainer.policy.model.path={hub_id}", "trainer.use_ray=false",
            "trainer.train_batch_size=1", "trainer.policy_mini_batch_size=1",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}", f"trainer.log_path={tmp_path / 'logs'}"]
    assert train_main(keys) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
