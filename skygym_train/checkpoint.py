"""Checkpoint folders: ``<ckpt_path>/global_step_<N>/`` plus a ``latest_ckpt_global_step.txt`` pointer.

Each folder holds the policy (and critic) training state (model, optimizer, scheduler), the trainer state
(step, data position, KL coefficient, metric history) and the random states, so a killed run resumed with
``trainer.resume_mode=latest`` continues exactly where it stopped. The pointer is written last, so a
crash mid-save leaves the previous checkpoint as the latest.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import torch

LATEST_FILE = "latest_ckpt_global_step.txt"


def step_dir(root: Path, step: int) -> Path:
    return root / f"global_step_{step}"


def capture_rng_state() -> Dict[str, Any]:
    import numpy as np

    state: Dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Dict[str, Any]) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    root: Path,
    step: int,
    worker_states: Dict[str, Dict[str, Any]],
    trainer_state: Dict[str, Any],
    max_to_keep: int = -1,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(root, step)
    tmp = root / f".tmp_global_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for role, state in worker_states.items():
        torch.save(state, tmp / f"{role}.pt")
    torch.save({**trainer_state, "rng": capture_rng_state()}, tmp / "trainer_state.pt")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer_tmp = root / (LATEST_FILE + ".tmp")
    pointer_tmp.write_text(str(step))
    os.replace(pointer_tmp, root / LATEST_FILE)
    if max_to_keep and max_to_keep > 0:
        _prune(root, max_to_keep)
    return final


def _prune(root: Path, keep: int) -> None:
    steps = sorted(int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*") if p.is_dir())
    for old in steps[:-keep]:
        shutil.rmtree(step_dir(root, old), ignore_errors=True)


def latest_checkpoint(root: Path) -> Optional[Path]:
    pointer = root / LATEST_FILE
    if not pointer.exists():
        return None
    folder = step_dir(root, int(pointer.read_text().strip()))
    if not (folder / "trainer_state.pt").exists():
        raise FileNotFoundError(f"{pointer} names step folder {folder}, which is missing or incomplete")
    return folder


def load_worker_state(folder: Path, role: str) -> Optional[Dict[str, Any]]:
    path = folder / f"{role}.pt"
    return torch.load(path, weights_only=False) if path.exists() else None


def load_trainer_state(folder: Path) -> Dict[str, Any]:
    return torch.load(folder / "trainer_state.pt", weights_only=False)
