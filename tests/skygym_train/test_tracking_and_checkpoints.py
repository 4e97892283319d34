"""Loggers (console, JSONL, TensorBoard, wandb offline), the reward plot, checkpoint folders."""

from __future__ import annotations

import io
import json

import pytest
import torch

from skygym_train import checkpoint as ckpt
from skygym_train.tracking import Tracker, plot_reward_curve


def test_console_jsonl_tensorboard_loggers(tmp_path):
    stream = io.StringIO()
    tracker = Tracker(["console", "jsonl", "tensorboard"], project="p", run_name="r", log_dir=tmp_path, console_stream=stream)
    tracker.log({"reward/mean": 0.25, "timing/generate": 1.5, "note": "text", "bad": float("nan")}, step=1)
    tracker.log({"reward/mean": 0.5, "eval/reward": 0.4}, step=2)
    tracker.log({"reward/mean": 1.0, "policy/trained_group_fraction": 0.0}, step=3)
    tracker.close()
    assert "[step 1] reward/mean=0.250 generate=1.5s\n" in stream.getvalue()  # rounded, one line per step
    # a step that updated nothing (no policy/* figures) says why
    assert "[step 3] reward/mean=1.000 (no update: each prompt's samples all got one reward)\n" in stream.getvalue()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3] and "note" not in lines[0] and "bad" not in lines[0]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("reward/mean")] == [0.25, 0.5, 1.0]
    png = plot_reward_curve(tracker.history, tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wandb_offline_needs_no_network(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="needs the 'wandb' extra: pip install 'skyrl-gym[wandb]'")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = Tracker(["wandb"], project="skyrl-test", run_name="offline", log_dir=tmp_path)
    tracker.log({"reward/mean": 1.0}, step=1)
    tracker.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert runs, "wandb wrote no offline run"


def test_checkpoint_pointer_and_pruning(tmp_path):
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step, {"policy": {"w": torch.tensor([float(step)])}}, {"global_step": step}, max_to_keep=2)
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_2", "global_step_3"]
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "global_step_3"
    assert ckpt.load_worker_state(latest, "policy")["w"].item() == 3.0
    assert ckpt.load_trainer_state(latest)["global_step"] == 3
    (tmp_path / ckpt.LATEST_FILE).write_text("7")
    with pytest.raises(FileNotFoundError, match="global_step_7"):
        ckpt.latest_checkpoint(tmp_path)
    assert ckpt.latest_checkpoint(tmp_path / "none") is None


@pytest.mark.parametrize("state, said", [
    ({"global_step": -5, "dataset": {"epoch": 0, "index": 8}}, "global_step is '-5'"),
    ({"global_step": 2, "dataset": {"epoch": 0, "index": 8}}, "global_step is 2, but the folder is global_step_3"),
    ({"global_step": 3.5, "dataset": {"epoch": 0, "index": 8}}, "global_step is '3.5'"),
    ({"global_step": 3, "dataset": {"epoch": -1, "index": 8}}, "dataset.epoch is '-1'"),
    ({"global_step": 3}, "dataset.epoch is 'None'"),
])
def test_a_resumed_position_that_is_not_the_folders_is_refused(tmp_path, state, said):
    """A downloaded checkpoint's trainer state is input: a negative step trained past the run's end, into
    checkpoints named global_step_-N that max_ckpts_to_keep never pruned."""
    folder = ckpt.save_checkpoint(tmp_path, 3, {"policy": {"w": torch.zeros(1)}}, state)
    with pytest.raises(ValueError, match=f"trainer_state.pt: {said}"):
        ckpt.check_trainer_position(ckpt.load_trainer_state(folder), folder)
    ckpt.check_trainer_position({"global_step": 3, "dataset": {"epoch": 1, "index": 0}}, folder)
    ckpt.check_trainer_position({"global_step": 9, "dataset": {"epoch": 1, "index": 0}}, tmp_path / "renamed")
