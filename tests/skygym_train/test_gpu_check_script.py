"""``bench/gpu_check.sh``'s plumbing, run on the CPU (``GPU_CHECK_DEVICE=cpu``) with the tiny model: a device call
is too dear to find a broken part there. What it checks is the script (parts, limits, logs, JSON, summary), not the
GPU figures."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skygym_train.config.validation import cuda_available

ROOT = Path(__file__).resolve().parents[2]


def run_check(*parts: str, out: Path, tiny_model: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable, GPU_CHECK_DEVICE="cpu", GPU_CHECK_SYNC_MODEL="tiny",
               SKYRL_GYM_TINY_MODEL=str(tiny_model), TRL_PYTHON=sys.executable,
               CUDA_VISIBLE_DEVICES="")  # on a GPU machine too: the parts would otherwise start the GPU session
    return subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), *parts], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.skipif(cuda_available(), reason="checks the script on the CPU before a device call (minutes of CPU "
                    "work beside the GPU tests); on a GPU machine run bash bench/gpu_check.sh itself")
def test_every_part_runs_and_reports(tmp_path: Path, tiny_chat_model: Path) -> None:
    done = run_check("tests", "sync", "tiny-8", "tiny-8-fsdp", "layouts-tiny-8", "layouts-tiny-8-transformers",
                     "logprobs-tiny-8", "borrow-tiny-64", out=tmp_path, tiny_model=tiny_chat_model)
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert [line.split(" (rc ")[0] for line in summary] == ["tests", "sync", "bench tiny-8", "bench tiny-8-fsdp",
                                                             "layouts-tiny-8", "layouts-tiny-8-transformers",
                                                             "logprobs-tiny-8", "borrow-tiny-64"]
    has_trl = bool(importlib.util.find_spec("trl") and importlib.util.find_spec("datasets"))
    # every part ends well; the bench beside TRL exits 1 where TRL cannot run, once it has timed ours
    assert [line for line in summary if "(rc 0," not in line] == ([] if has_trl else [summary[2]]), summary
    assert has_trl or "(rc 1," in summary[2]
    assert "no CUDA GPU" in summary[0]  # the GPU test session says why it ran nothing here
    assert "inprocess" in summary[1] and "MiB per sync" in summary[1]
    figures = json.loads((tmp_path / "bench_tiny-8.json").read_text())
    ours = figures["skygym_train"]
    assert figures["device"] == "cpu" and ours["steps"] == 1 and ours["step_s"] > 0
    assert ours["generated_tokens"] > 0 and ours["model_tokens"] > 0  # every row trained (no skip in the bench)
    if has_trl:
        assert figures["trl"]["step_s"] > 0 and figures["speedup"] > 0
    else:  # TRL's absence is reported with what to do, and ours is still timed
        assert "No module named" in figures["trl_error"] and "TRL GRPOTrainer failed" in summary[2]
        assert "cannot run TRL" in figures["trl_error"] and "--skip-trl" in figures["trl_error"]
    # -fsdp: ours alone (the FSDP2 wrapper is a GPU setting, left off on the CPU, which the script says)
    alone = json.loads((tmp_path / "bench_tiny-8-fsdp.json").read_text())
    assert "trl" not in alone and "trl_error" not in alone and alone["skygym_train"]["step_s"] > 0
    assert "tiny-8-fsdp: FSDP2 on one GPU needs a GPU" in done.stdout
    # the three layouts, each timed, with its rows x columns
    assert [part.split(" s ")[0].rsplit(" ", 1)[0].strip() for part in summary[4].split(": ", 1)[1].split(";")
            if part.strip()] == ["padded", "shared prefix, whole segments", "shared prefix, as the trainer cuts it"]
    assert summary[4].count("rows x columns") == 3 and summary[4].count("GiB") == 3  # each layout's peak memory
    # -transformers: the same micro-batches with the model as transformers runs it
    assert "attention sdpa " in (tmp_path / "layouts-tiny-8-transformers.log").read_text()
    assert "attention sdpa " not in (tmp_path / "layouts-tiny-8.log").read_text()
    assert summary[5].count("rows x columns") == 3
    # the log-prob step three ways, each with its peak
    assert summary[6].count("from the") == 3 and summary[6].count("GiB above before") == 3
    assert "from the LM head" in summary[6]
    # a training micro-batch reading autocast's casts, then the engine's copy: autocast casts nothing then
    assert "autocast's casts" in summary[7] and "the engine's bf16 copy 0 casts of parameters, 0 MiB" in summary[7]


def test_an_unknown_part_stops_before_any_part_runs(tmp_path: Path) -> None:
    done = run_check("sync", "05b-fast", out=tmp_path / "out", tiny_model=tmp_path)
    assert done.returncode == 2 and "unknown part 05b-fast" in done.stderr
    assert run_check("layouts-05b-512-fsdp", out=tmp_path / "out", tiny_model=tmp_path).returncode == 2
    assert run_check("logprobs-05b", out=tmp_path / "out", tiny_model=tmp_path).returncode == 2
    assert not (tmp_path / "out").exists()
