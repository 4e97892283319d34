"""Checkpoint folders: ``<ckpt_path>/global_step_<N>/`` plus a ``latest_ckpt_global_step.txt`` pointer.

Each folder holds the policy (and critic) training state (model, optimizer, scheduler), the trainer state
(step, data position, KL coefficient, metric history) and the random states, so a killed run resumed with
``trainer.resume_mode=latest`` continues exactly where it stopped.

A save survives ``kill -9`` (or a power cut) at any point:

1. every file is written into ``.tmp_global_step_<N>.<pid>`` beside the final folder and fsynced, the
   trainer state last;
2. the complete folder is renamed into place. Re-saving step N first renames the existing folder to
   ``.old_global_step_<N>``, so the good copy exists under one of the two names at every moment;
3. the pointer is written last, to a temporary file that is fsynced and then ``os.replace``d;
4. only then are the replaced copy and old checkpoints removed. Pruning (``max_to_keep``) removes the
   least recently saved folders and never the one just saved or the one the pointer names.

``latest_checkpoint`` only reads: it ignores temporary folders, and when a save was killed between moving
the old copy of the pointed-to step aside and renaming the new one in, it returns the moved-aside copy.
``recover_interrupted_saves`` (run by the writer: at the start of ``save_checkpoint`` and when the trainer
starts) finishes what a killed save left: a moved-aside copy whose replacement never arrived is renamed
back, and every other temporary folder is removed.
"""

from __future__ import annotations

import errno
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import torch

LATEST_FILE = "latest_ckpt_global_step.txt"
TRAINER_STATE_FILE = "trainer_state.pt"  # written last: a folder with it is complete
_TMP_PREFIX = ".tmp_global_step_"
_OLD_PREFIX = ".old_global_step_"
_STEP_NAME = re.compile(r"^global_step_(\d+)$")
_OLD_NAME = re.compile(r"^\.old_global_step_(\d+)$")


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


# ------------------------------------------------------------------------------------------ durable writes


def _fsync_dir(path: Path) -> None:
    """Make a folder's entries (a new file, a rename) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems cannot fsync a folder; their renames are as durable as they get
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _save_durably(obj: Any, path: Path) -> None:
    with open(path, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())


def _write_pointer(root: Path, step: int) -> None:
    """The pointer file, replaced atomically: readers see the old step or the new one, never a torn file."""
    tmp = root / f"{LATEST_FILE}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        handle.write(str(step))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, root / LATEST_FILE)
    _fsync_dir(root)


def _is_complete(folder: Path) -> bool:
    return (folder / TRAINER_STATE_FILE).is_file()


# ------------------------------------------------------------------------------------------ saving


def save_checkpoint(
    root: Path,
    step: int,
    worker_states: Dict[str, Dict[str, Any]],
    trainer_state: Dict[str, Any],
    max_to_keep: int = -1,
) -> Path:
    """Write ``global_step_<step>`` atomically, point ``LATEST_FILE`` at it, then prune (see module doc)."""
    root.mkdir(parents=True, exist_ok=True)
    recover_interrupted_saves(root)
    final = step_dir(root, step)
    tmp = root / f"{_TMP_PREFIX}{step}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for role, state in worker_states.items():
        _save_durably(state, tmp / f"{role}.pt")
    _save_durably({**trainer_state, "rng": capture_rng_state()}, tmp / TRAINER_STATE_FILE)
    _fsync_dir(tmp)
    _move_into_place(root, tmp, final, step)
    _write_pointer(root, step)
    shutil.rmtree(root / f"{_OLD_PREFIX}{step}", ignore_errors=True)
    if max_to_keep and max_to_keep > 0:
        prune_checkpoints(root, max_to_keep, protect=[step])
    return final


def _move_into_place(root: Path, tmp: Path, final: Path, step: int) -> None:
    """Rename the complete ``tmp`` to ``final``; an existing ``final`` is moved aside first, not deleted."""
    if final.exists():
        old = root / f"{_OLD_PREFIX}{step}"
        shutil.rmtree(old, ignore_errors=True)  # recovery already restored any copy that was still needed
        os.rename(final, old)
        _fsync_dir(root)
    os.rename(tmp, final)
    _fsync_dir(root)


def _saved_steps(root: Path) -> List[int]:
    steps = []
    for path in root.iterdir() if root.is_dir() else []:
        match = _STEP_NAME.match(path.name)
        if match and path.is_dir():
            steps.append(int(match.group(1)))
    return steps


def prune_checkpoints(root: Path, keep: int, protect: Iterable[int] = ()) -> List[int]:
    """Remove all but the ``keep`` most recently saved complete checkpoints; return the removed steps.

    Never removes a step in ``protect`` or the step the pointer names, so the newest save and the one a
    resume would load always stay, even when a run resumed from an earlier step saves lower step numbers.
    """
    protected = set(protect)
    pointed = _read_pointer(root)
    if pointed is not None:
        protected.add(pointed)

    def saved_at(step: int) -> int:
        state = step_dir(root, step) / TRAINER_STATE_FILE
        return state.stat().st_mtime_ns if state.is_file() else -1

    by_recency = sorted(_saved_steps(root), key=lambda s: (saved_at(s), s), reverse=True)
    removable = [s for s in by_recency if s not in protected]
    slots = max(0, keep - len([s for s in by_recency if s in protected]))
    removed = removable[slots:]
    for step in removed:
        # renamed first, so a kill halfway through the removal leaves a temporary folder, not a torn checkpoint
        doomed = root / f"{_TMP_PREFIX}{step}.pruned"
        shutil.rmtree(doomed, ignore_errors=True)
        os.rename(step_dir(root, step), doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return removed


# ------------------------------------------------------------------------------------------ loading


def recover_interrupted_saves(root: Path) -> None:
    """Finish what a killed save left behind: restore a moved-aside copy whose replacement never
    arrived, and remove temporary folders and pointer files."""
    if not root.is_dir():
        return
    for path in root.iterdir():
        old = _OLD_NAME.match(path.name)
        if old:
            final = step_dir(root, int(old.group(1)))
            if not final.exists() and _is_complete(path):
                os.rename(path, final)  # killed between moving the old copy aside and renaming the new one in
                _fsync_dir(root)
            else:
                shutil.rmtree(path, ignore_errors=True)
        elif path.name.startswith(_TMP_PREFIX):
            shutil.rmtree(path, ignore_errors=True)
        elif path.name.startswith(LATEST_FILE + ".") and path.name.endswith(".tmp"):
            path.unlink(missing_ok=True)


def _read_pointer(root: Path) -> Optional[int]:
    pointer = root / LATEST_FILE
    if not pointer.exists():
        return None
    text = pointer.read_text().strip()
    if not text.isdigit():
        raise ValueError(f"{pointer} should hold a step number, found {text[:40]!r}")
    return int(text)


def latest_checkpoint(root: Path) -> Optional[Path]:
    """The complete folder the pointer names, or None when there is no pointer. Changes nothing on disk,
    so another process may call it while the trainer saves."""
    step = _read_pointer(root)
    if step is None:
        return None
    folder = step_dir(root, step)
    if _is_complete(folder):
        return folder
    moved_aside = root / f"{_OLD_PREFIX}{step}"
    if not folder.exists() and _is_complete(moved_aside):  # a re-save of this step was killed mid-swap
        return moved_aside
    raise FileNotFoundError(f"{root / LATEST_FILE} names step folder {folder}, which is missing or incomplete")


def load_worker_state(folder: Path, role: str) -> Optional[Dict[str, Any]]:
    path = folder / f"{role}.pt"
    return torch.load(path, weights_only=False) if path.exists() else None


def load_trainer_state(folder: Path) -> Dict[str, Any]:
    return torch.load(folder / TRAINER_STATE_FILE, weights_only=False)
