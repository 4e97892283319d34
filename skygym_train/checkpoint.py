"""Checkpoint folders: ``<ckpt_path>/global_step_<N>/`` plus a ``latest_ckpt_global_step.txt`` pointer.

Each folder holds the policy (and critic) training state (model, optimizer, scheduler), the trainer state
(step, data position, KL coefficient, metric history) and the random states, so a killed run resumed with
``trainer.resume_mode=latest`` continues exactly where it stopped::

    global_step_<N>/
        policy/              torch.distributed.checkpoint (DCP): .metadata plus one __<rank>_0.distcp per rank
        critic/              (with a critic) the same
        trainer_state.pt     plain data and tensors only, written last: a folder with it is complete

Each training rank writes its own shard of the model and optimizer (``save_sharded``); nothing gathers the
full model on one rank, and a resume may load on the same number of ranks or another (DCP reshards).

Loading never runs code from the folder: ``trainer_state.pt`` (and a ``<role>.pt``) load with
``torch.load(weights_only=True)``, DCP's ``.metadata`` goes through an unpickler that only builds DCP's own
metadata classes, and DCP's non-tensor entries (optimizer hyper-parameters, scheduler state) load with
``weights_only=True`` too. A file that asks for anything else fails with ``UnsafeCheckpointError``.

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

import contextlib
import enum
import errno
import functools
import io
import os
import pickle
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Union

import torch

LATEST_FILE = "latest_ckpt_global_step.txt"
TRAINER_STATE_FILE = "trainer_state.pt"  # written last: a folder with it is complete
_TMP_PREFIX = ".tmp_global_step_"
_OLD_PREFIX = ".old_global_step_"
_STEP_NAME = re.compile(r"^global_step_(\d+)$")
_OLD_NAME = re.compile(r"^\.old_global_step_(\d+)$")


def step_dir(root: Path, step: int) -> Path:
    return root / f"global_step_{step}"


class UnsafeCheckpointError(RuntimeError):
    """A checkpoint file holds something other than tensors and plain data (it was not written by this trainer,
    or was tampered with); it is refused without running any of it."""


WorkerState = Union[Dict[str, Any], Callable[[Path], Any]]
"""What ``save_checkpoint`` takes per role: a dict (written as ``<role>.pt``) or a function that writes the
role's shards into the folder it is given (``<role>/``)."""


def capture_rng_state() -> Dict[str, Any]:
    """The random states as plain lists, ints and tensors, so the trainer state loads with ``weights_only=True``."""
    import numpy as np

    version, internal, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state: Dict[str, Any] = {
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
        "numpy": {"kind": str(kind), "keys": [int(k) for k in keys], "pos": int(pos), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(cached_gaussian)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Dict[str, Any]) -> None:
    import numpy as np

    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
    npy = state["numpy"]
    keys = np.asarray(npy["keys"], dtype=np.uint32)
    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _plain(value: Any, where: str) -> Any:
    """``value`` with numpy scalars and arrays turned into Python numbers and lists; anything the safe loader
    would refuse raises here, at save time, naming where it is."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # numpy scalars (np.float64 is a float) and arrays
        return value.tolist()
    if isinstance(value, enum.Enum):  # a member would pickle its class: keep its value
        return _plain(value.value, where)
    if value is None or isinstance(value, (bool, torch.Tensor)):
        return value
    for plain in (int, float, str, bytes):  # a subclass would pickle its class: the base type's value
        if isinstance(value, plain):
            return value if type(value) is plain else plain(value)
    if isinstance(value, dict):
        return {k: _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    raise TypeError(f"checkpoint value {where} is a {type(value).__qualname__}; only tensors and plain data "
                    "(dict, list, tuple, str, int, float, bool, None) can be saved")


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


def _fsync_tree(folder: Path) -> None:
    """fsync every file and folder under ``folder`` (shard writers may leave some unsynced), deepest first."""
    for dirpath, _, filenames in os.walk(folder, topdown=False):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


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
    worker_states: Dict[str, WorkerState],
    trainer_state: Dict[str, Any],
    max_to_keep: int = -1,
) -> Path:
    """Write ``global_step_<step>`` atomically, point ``LATEST_FILE`` at it, then prune (see module doc).

    ``worker_states`` maps a role to its state dict (saved as ``<role>.pt``) or to a function that writes the
    role's shards into the folder it is given (``<role>/`` inside the temporary folder; the trainer passes one
    that has every rank call ``save_sharded``). ``trainer_state`` must be plain data and tensors."""
    root.mkdir(parents=True, exist_ok=True)
    recover_interrupted_saves(root)
    final = step_dir(root, step)
    tmp = root / f"{_TMP_PREFIX}{step}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for role, state in worker_states.items():
        if callable(state):
            (tmp / role).mkdir()
            state(tmp / role)
        else:
            _save_durably(state, tmp / f"{role}.pt")
    _fsync_tree(tmp)  # every shard on disk before the trainer state marks the folder complete
    _save_durably(_plain({**trainer_state, "rng": capture_rng_state()}, "trainer_state"), tmp / TRAINER_STATE_FILE)
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


def resume_folder(resume_mode: Optional[str], resume_path: Optional[str], ckpt_path: str) -> Optional[Path]:
    """The checkpoint a run goes on from (``trainer.resume_mode``: ``none``, ``latest`` of ``ckpt_path``, or
    ``from_path``: ``resume_path``), or None when it starts at step 0. Only reads, as ``latest_checkpoint``
    does."""
    if resume_mode in (None, "none"):
        return None
    if resume_mode == "from_path":
        return Path(str(resume_path)).expanduser()
    return latest_checkpoint(Path(ckpt_path).expanduser())


def resume_path_problem(resume_path: str) -> Optional[str]:
    """What is wrong with ``trainer.resume_path`` as a checkpoint to go on from, or None. The root of a run's
    checkpoints, given for one of its folders, gets the latest complete one named."""
    folder = Path(resume_path).expanduser()
    if _is_complete(folder):
        return None
    if not folder.is_dir():
        return f"trainer.resume_path={resume_path}: no such folder"
    complete = sorted(step for step in _saved_steps(folder) if _is_complete(step_dir(folder, step)))
    if complete:
        return (f"trainer.resume_path={resume_path}: the folder of a run's checkpoints, not one checkpoint; did you "
                f"mean {step_dir(folder, complete[-1])} (its latest), or trainer.resume_mode=latest with "
                f"trainer.ckpt_path={resume_path}?")
    return f"trainer.resume_path={resume_path}: not a complete checkpoint (it holds no {TRAINER_STATE_FILE})"


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


DEEPSPEED_TAG = "deepspeed"
"""The sub-folder DeepSpeed workers write their ZeRO partitions into (``engine.save_checkpoint(tag=...)``)."""


def _load_safely(path: Path) -> Any:
    """``torch.load(weights_only=True)``: tensors and plain data only; anything else is refused, not run."""
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpointError(
            f"refusing to load {path}: it holds objects other than tensors and plain data, and loading them could "
            f"run code from the file. Only load checkpoints you trust; this one was not written by this trainer "
            f"or was changed since. ({_refusal_reason(exc)})"
        ) from exc


def _refusal_reason(exc: Exception) -> str:
    """The line of torch's weights-only error that says what the file asked for."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = next((line for line in lines if line.startswith("WeightsUnpickler error")), lines[0] if lines else "")
    return reason.split(". Please use")[0]  # torch goes on to suggest allowlisting it, which is the risk


def load_worker_state(folder: Path, role: str) -> Optional[Dict[str, Any]]:
    """A role's state saved as a dict (``<role>.pt``), or None when there is none."""
    path = folder / f"{role}.pt"
    return _load_safely(path) if path.exists() else None


def worker_state_dir(folder: Path, role: str) -> Optional[Path]:
    """The folder of a role's sharded training state (DCP's, or DeepSpeed's under ``deepspeed/``), or None when the
    checkpoint has none."""
    path = folder / role
    return path if (path / ".metadata").is_file() or (path / DEEPSPEED_TAG).is_dir() else None


def load_trainer_state(folder: Path) -> Dict[str, Any]:
    return _load_safely(folder / TRAINER_STATE_FILE)


def check_trainer_position(state: Mapping[str, Any], folder: Path) -> None:
    """The step and data position a trainer resumes from ``folder``'s state: whole numbers >= 0, and the step the
    folder's name says. A checkpoint from elsewhere is input like any other: a negative step trained past the
    run's end, into checkpoints named ``global_step_-N`` that were never pruned."""
    where = folder / TRAINER_STATE_FILE

    def whole(value: Any, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}: {what} is {str(value)[:80]!r}, not a whole number >= 0 (a damaged or "
                             "edited checkpoint)")
        return value

    step = whole(state.get("global_step"), "global_step")
    named = _STEP_NAME.match(folder.name)
    if named and int(named.group(1)) != step:
        raise ValueError(f"{where}: global_step is {step}, but the folder is {folder.name} (a damaged or edited "
                         "checkpoint)")
    position = state.get("dataset")
    for key in ("epoch", "index"):
        whole(position.get(key) if isinstance(position, Mapping) else None, f"dataset.{key}")


# ------------------------------------------------------------------------------------------ sharded state (DCP)


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def save_sharded(state: Dict[str, Any], folder: Path) -> None:
    """Write ``state`` with ``torch.distributed.checkpoint``: every rank calls this with its own shards (DTensors
    under FSDP2) and writes only those; rank 0 also writes ``.metadata``. Works without a process group
    (one process writes everything). Files are fsynced before this returns."""
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(str(folder), sync_files=True, overwrite=True)
    with _single_process_is_intended():
        dcp.save(state, storage_writer=writer, no_dist=not _distributed())


def load_sharded(state: Dict[str, Any], folder: Path) -> None:
    """Fill ``state`` (the layout ``save_sharded`` got, this rank's shards) in place from ``folder``, which may
    have been written by a different number of ranks. Nothing in the folder is unpickled beyond DCP's metadata
    classes and plain data (see ``UnsafeCheckpointError``)."""
    import torch.distributed.checkpoint as dcp

    metadata = folder / ".metadata"
    if not metadata.is_file():
        raise FileNotFoundError(f"{folder} is not a sharded checkpoint (no .metadata)")
    with open(metadata, "rb") as handle:  # checked here too: inside dcp.load a refusal surfaces wrapped and retried
        loaded = _MetadataUnpickler(handle, str(metadata)).load()
    _check_storage_files(loaded, folder)
    reader, planner = _safe_dcp_classes()
    with _single_process_is_intended():
        dcp.load(state, storage_reader=reader(str(folder)), planner=planner(), no_dist=not _distributed())


def _check_storage_files(metadata: Any, folder: Path) -> None:
    """Every tensor's file is one in ``folder``: DCP joins each ``relative_path`` to the folder as it is, so a
    checkpoint's metadata naming ``../other_run/__0_0.distcp`` or an absolute path read tensors from elsewhere."""
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        name = str(getattr(info, "relative_path", ""))
        if not name or name in (".", "..") or "/" in name or "\\" in name or not (folder / name).is_file():
            raise UnsafeCheckpointError(f"refusing to load {folder}: its .metadata reads tensors from {name[:200]!r}, "
                                        "which is not a file in the checkpoint's folder")


@contextlib.contextmanager
def _single_process_is_intended() -> Iterator[None]:
    """DCP warns on every call without a process group; one process is a supported set-up here, not a mistake."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _is_safe_global(module: str, name: str) -> bool:
    if (module, name) in _METADATA_GLOBALS:
        return True
    # dtypes, layouts and memory formats: plain enumerations that torch pickles by name
    return module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format))


_METADATA_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                 "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),
    ("torch", "Size"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata classes and nothing else (DCP's own reader uses a plain ``pickle.load``)."""

    def __init__(self, file: Any, path: str):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if _is_safe_global(module, name):
            return super().find_class(module, name)
        raise UnsafeCheckpointError(
            f"refusing to load {self.path}: it asks for {module}.{name}, which is not part of a checkpoint's "
            "metadata, and loading it could run code from the file. Only load checkpoints you trust."
        )


@functools.lru_cache(maxsize=None)
def _safe_dcp_classes() -> tuple:
    """DCP's file reader and load planner, each with its one unpickling step made safe. Built on first use:
    importing ``torch.distributed.checkpoint`` takes seconds, and only a save or a resume needs it."""
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            path = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(path, "rb") as handle:
                metadata = _MetadataUnpickler(handle, str(path)).load()
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class SafeLoadPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            fqn = read_item.dest_index.fqn
            try:
                loaded = torch.load(value, weights_only=True)
            except pickle.UnpicklingError as exc:
                raise UnsafeCheckpointError(
                    f"refusing to load entry {fqn!r} of a sharded checkpoint: it holds objects other than tensors "
                    f"and plain data. Only load checkpoints you trust. ({_refusal_reason(exc)})"
                ) from exc
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[fqn], loaded)
            else:
                self.state_dict[fqn] = loaded

    return SafeReader, SafeLoadPlanner


# ---------------------------------------------------------------------------------- reward fingerprints


def env_fingerprints(rows: Iterable[Mapping[str, Any]]) -> Dict[str, str]:
    """``{env_class: reward fingerprint}`` of the envs the rows use (:mod:`skyrl_gym.fingerprint`): what a
    checkpoint and a model card record, so that a reward that changed between runs is seen."""
    from skyrl_gym.registration import fingerprints_of

    found = fingerprints_of([str(row.get("env_class")) for row in rows if row.get("env_class")])
    return {env_id: value for env_id, value in found.items() if value is not None}


def fingerprint_changes(saved: Optional[Mapping[str, str]], current: Mapping[str, str]) -> List[str]:
    """One line per env whose fingerprint differs between a checkpoint (``saved``) and this run
    (``current``)."""
    if not saved:
        return []
    return [f"env {env_id!r}: reward fingerprint {saved[env_id]} in the checkpoint, {current[env_id]} now"
            for env_id in sorted(set(saved) & set(current)) if saved[env_id] != current[env_id]]


def warn_on_fingerprint_change(saved: Optional[Mapping[str, str]], current: Mapping[str, str]) -> List[str]:
    """Warn when resuming a run whose envs' verifiers (or reward settings, or data builders) changed since the
    save: the rewards before and after the resume may not mean the same thing."""
    changes = fingerprint_changes(saved, current)
    if changes:
        warnings.warn("resuming with a changed reward: " + "; ".join(changes)
                      + " (see `skyrl-gym fingerprint ID --explain`)", UserWarning, stacklevel=2)
    return changes


MODEL_CARD_FILE = "README.md"


def write_model_card(folder: Path, fingerprints: Mapping[str, str], step: Optional[int] = None) -> Path:
    """Add the reward fingerprints of the envs the model was trained on to the exported model's card
    (``README.md``; appended when the export wrote one)."""
    card = Path(folder) / MODEL_CARD_FILE
    lines = ["", "## Rewards", "", "Trained with skyrl-gym" + (f" to step {step}" if step is not None else "")
             + " on these environments (reward fingerprints: `skyrl-gym fingerprint ID`):", "",
             "| env | reward fingerprint |", "|---|---|"]
    lines += [f"| {env_id} | `{value}` |" for env_id, value in sorted(fingerprints.items())]
    existing = card.read_text(encoding="utf-8") if card.exists() else "# Model trained with skyrl-gym\n"
    card.write_text(existing.rstrip("\n") + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return card

