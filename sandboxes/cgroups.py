"""Memory cgroups for the local backends: one per worker, so a sandbox's memory is counted whole.

``RLIMIT_AS`` bounds each process's address space, but not what a program holds in the kernel on
its behalf: files and folders on the sandbox's tmpfs (about 1 KiB of kernel memory each, whatever
the tmpfs's size limit), pipe and socket buffers, and the sum over its processes. A memory cgroup
counts all of it. Each warm worker (its launcher, supervisor and every program it forks) lives in a
cgroup of its own whose limit, set before each run, is the run's ``memory_mb`` plus the worker's two
tmpfs (``/sandbox`` and ``/dev/shm``, ``scratch_mb`` each) plus :data:`SUPERVISOR_ALLOWANCE_MB`.
A run that reaches it is killed by the kernel (the program first: see ``supervisor.py``) and its
result says ``memory``.

Cgroups are made under the caller's own cgroup, so whatever limits an operator put on the caller
still hold for its sandboxes. That needs write access to the cgroup filesystem: root with cgroup v1,
or cgroup v2 where the caller sits at the root of its cgroup namespace (a container) or already has
a delegated subtree with the memory controller. Elsewhere :func:`find_tree` says why not, and the
local backends fall back to per-process limits (``LocalSandbox(memory_cgroup=True)`` refuses to).
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import List, Optional, Tuple

from skygym_sandboxes.types import Limits, RunResult, Status
from skygym_sandboxes.workers import pid_alive

# What the worker itself holds beside the program: the launcher, the supervisor with its preloaded
# modules (about 25 MB resident) and page cache of the files runs read.
SUPERVISOR_ALLOWANCE_MB = 128
# Memory a run may leave charged to its worker, beyond what the idle worker held, before the worker is retired: the
# kernel frees some objects only later (sockets that carry each other's descriptors wait for its garbage collector,
# 238 MB of them for seconds), and the next run would find its room taken ("memory" for an honest program). Half the
# supervisor's allowance: an honest run's caches stay under it (200,000 lookups of missing files left 38 MB of
# negative dentries), and the next run still finds its memory_mb and more.
LEFTOVER_MB = 64
LEFTOVER_PATIENCE_S = 0.5
# Socket buffers of TCP and UDP, which cgroup v1 counts apart from memory (memory.kmem.tcp): without a limit of
# their own, 40 loopback connections held 419 MB beside a worker limited to 288 MB.
TCP_BUFFERS_MB = 64
TREE_NAME = "skyrl-sandbox"
logger = logging.getLogger(__name__)
UNLIMITED = "max"


def _cgroup_mounts(mountinfo: str) -> dict:
    """``{"v2": (mount root, mount point), "memory": (...)}`` from /proc/self/mountinfo's text."""
    mounts = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 10:
            continue
        after = line.split(" - ", 1)[1].split()
        fstype, options = after[0], after[2] if len(after) > 2 else ""
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            mounts.setdefault("v2", (root, point))
        elif fstype == "cgroup" and "memory" in options.split(","):
            mounts.setdefault("memory", (root, point))
    return mounts


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _own_paths(proc_cgroup: str) -> dict:
    """``{"v2": path, "memory": path}``: this process's cgroups, from /proc/self/cgroup's text."""
    paths = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            paths["v2"] = path
        elif "memory" in controllers.split(","):
            paths["memory"] = path
    return paths


def _inside(mount: Tuple[str, str], own: str) -> Optional[Path]:
    """The folder of cgroup ``own`` under a mount of the hierarchy (None: not visible there)."""
    root, point = mount
    root = root.rstrip("/") or "/"
    if own != root and not own.startswith(root.rstrip("/") + "/"):
        return None
    return Path(point) / os.path.relpath(own, root)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class CgroupTree:
    """The folder (``skyrl-sandbox`` under this process's own cgroup) that holds workers' cgroups."""

    def __init__(self, version: int, path: Path) -> None:
        self.version = version
        self.path = path
        self.tcp_limit_refused = False  # said once
        # cgroups of this process's workers that ended, empty, for the next workers: a removed memory cgroup lingers
        # in the kernel while pages are charged to it (930 of them after a day of tests), a kept one does not
        self._free: List[Path] = []
        self._free_lock = threading.Lock()

    def keep_for_reuse(self, path: Path) -> None:
        with self._free_lock:
            self._free.append(path)

    def describe(self) -> str:
        return f"per worker, by a memory cgroup (cgroup v{self.version}, under {self.path})"

    def new_worker(self, scratch_mb: int) -> "WorkerCgroup":
        """A cgroup for a worker whose two tmpfs hold ``scratch_mb`` each."""
        with self._free_lock:
            while self._free:
                path = self._free.pop()
                if path.is_dir() and not _read(str(path / "cgroup.procs")).split():
                    return WorkerCgroup(self.version, path, scratch_mb, tree=self)
        path = self.path / f"{os.getpid()}-{secrets.token_hex(4)}"
        for attempt in range(3):
            try:
                path.mkdir(mode=0o755)
                break
            except FileNotFoundError:  # another process sharing the tree removed it, empty, as it exited
                if attempt == 2:
                    raise
                self.path.mkdir(mode=0o755, exist_ok=True)
                if self.version == 2:
                    _write(self.path / "cgroup.subtree_control", "+memory")
        cgroup = WorkerCgroup(self.version, path, scratch_mb, tree=self)
        tcp = path / "memory.kmem.tcp.limit_in_bytes"
        if self.version == 1 and tcp.exists():
            try:
                _write(tcp, str(TCP_BUFFERS_MB << 20))
            except OSError as exc:  # a kernel that keeps the file but refuses the limit: the worker still starts
                if not self.tcp_limit_refused:
                    self.tcp_limit_refused = True
                    logger.warning("cannot limit the sandbox workers' TCP buffers (%s): they are not counted", exc)
        return cgroup

    def remove_own(self) -> None:
        """At exit: remove this process's worker cgroups (killing what is left in them), then the tree
        itself if no other process uses it, so that nothing is left under the caller's cgroup."""
        prefix = f"{os.getpid()}-"
        try:
            entries = [entry for entry in self.path.iterdir() if entry.name.startswith(prefix)]
        except OSError:
            return
        for entry in entries:
            if entry.is_dir():
                WorkerCgroup(self.version, entry).remove()
        try:
            self.path.rmdir()
        except OSError:
            pass  # another process's workers are in it

    def sweep(self) -> None:
        """Remove the empty cgroups of processes that ended without removing theirs."""
        try:
            entries = list(self.path.iterdir())
        except OSError:
            return
        for entry in entries:
            owner = entry.name.split("-", 1)[0]
            if not entry.is_dir() or not owner.isdigit() or pid_alive(int(owner)):
                continue
            # a worker whose owner was killed (an unshare worker may run on until its run's wall limit) goes too
            WorkerCgroup(self.version, entry).remove(patience_s=0.5)


_tree_lock = threading.Lock()
_tree: Optional[Tuple[Optional[CgroupTree], str]] = None


def find_tree() -> Tuple[Optional[CgroupTree], str]:
    """This process's tree of worker cgroups, made on first use, or ``(None, why not)``."""
    global _tree
    with _tree_lock:
        if _tree is None or (_tree[0] is not None and not _tree[0].path.is_dir()):
            _tree = _make_tree()
            if _tree[0] is not None:
                _tree[0].sweep()
                atexit.register(_tree[0].remove_own)
        return _tree


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _make_tree() -> Tuple[Optional[CgroupTree], str]:
    mounts = _cgroup_mounts(_read("/proc/self/mountinfo"))
    own = _own_paths(_read("/proc/self/cgroup"))
    if "memory" in mounts and "memory" in own:
        base = _inside(mounts["memory"], own["memory"])
        if base is None:
            return None, "this process's memory cgroup is not visible under the mounted cgroup v1 hierarchy"
        return _tree_at(1, base)
    if "v2" in mounts and "v2" in own:
        base = _inside(mounts["v2"], own["v2"])
        if base is None:
            return None, "this process's cgroup is not visible under the mounted cgroup v2 hierarchy"
        if "memory" not in _read(str(base / "cgroup.controllers")).split():
            return None, f"the memory controller is not available in {base} (cgroup v2)"
        return _tree_at(2, base)
    return None, "no cgroup filesystem with the memory controller is mounted"


def _tree_at(version: int, base: Path) -> Tuple[Optional[CgroupTree], str]:
    path = base / TREE_NAME
    try:
        path.mkdir(mode=0o755, exist_ok=True)
        if version == 2:
            # A child of ``path`` gets memory.max only when ``path`` hands the controller down; cgroup v2
            # allows that for a cgroup without processes of its own, which ``path`` is.
            if "memory" not in _read(str(path / "cgroup.controllers")).split():
                return None, (
                    f"{base} does not hand the memory controller to its children (cgroup v2 lets a cgroup "
                    "that holds processes do so only at the root of a cgroup namespace)"
                )
            if "memory" not in _read(str(path / "cgroup.subtree_control")).split():
                _write(path / "cgroup.subtree_control", "+memory")
        probe = WorkerCgroup(version, path / f"{os.getpid()}-probe-{secrets.token_hex(4)}")
        probe.path.mkdir(mode=0o755)
        try:
            probe.set_limit_bytes(64 << 20)
        finally:
            probe.path.rmdir()
    except OSError as exc:
        return None, f"cannot make memory cgroups under {base}: {exc.strerror or exc}"
    return CgroupTree(version, path), ""


class WorkerCgroup:
    """One worker's memory cgroup: join it, set its limit, count its OOM kills, remove it."""

    def __init__(self, version: int, path: Path, scratch_mb: int = 0, tree: Optional[CgroupTree] = None) -> None:
        self.version = version
        self.path = path
        self.scratch_mb = scratch_mb
        self.tree = tree  # where an emptied cgroup goes for the next worker (None: removed)
        self._procs = str(path / "cgroup.procs")
        self._limit_bytes: Optional[int] = None
        self._oom_kills = 0
        self._final_oom_kills: Optional[int] = None  # read just before the cgroup was removed
        self._idle_bytes: Optional[int] = None  # what the ready worker held, page cache aside

    def join(self) -> None:
        """Move the calling process in (for ``preexec_fn``: before the launcher execs or drops root)."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def set_limit_bytes(self, limit: Optional[int]) -> None:
        if limit == self._limit_bytes:
            return
        if self.version == 2:
            _write(self.path / "memory.max", UNLIMITED if limit is None else str(limit))
            if (self.path / "memory.swap.max").exists():
                _write(self.path / "memory.swap.max", "0")
        else:
            value = "-1" if limit is None else str(limit)
            memory, swap = self.path / "memory.limit_in_bytes", self.path / "memory.memsw.limit_in_bytes"
            old = self._limit_bytes
            if not swap.exists():
                _write(memory, value)
            elif old is None:  # unknown (a cgroup an earlier worker used): lift memory + swap, then set both
                _write(swap, "-1")
                _write(memory, value)
                _write(swap, value)
            elif limit is None or limit > old:  # memory + swap may never be below memory alone: raise it first
                _write(swap, value)
                _write(memory, value)
            else:
                _write(memory, value)
                _write(swap, value)
        self._limit_bytes = limit

    def limit_mb_for(self, limits: Limits) -> Optional[int]:
        if limits.memory_mb is None:
            return None
        return int(limits.memory_mb) + 2 * int(self.scratch_mb) + SUPERVISOR_ALLOWANCE_MB

    def _usage_bytes(self) -> int:
        text = _read(str(self.path / ("memory.current" if self.version == 2 else "memory.usage_in_bytes")))
        return int(text) if text.strip().isdigit() else 0

    def held_bytes(self) -> int:
        """What the cgroup holds, less the page cache of files, which the kernel takes back when it needs to."""
        usage = self._usage_bytes()
        names = ("active_file", "inactive_file") if self.version == 2 else ("total_active_file", "total_inactive_file")
        cache = 0
        for line in _read(str(self.path / "memory.stat")).splitlines():
            key, _, value = line.partition(" ")
            if key in names and value.strip().isdigit():
                cache += int(value)
        return max(0, usage - cache)

    def mark_idle(self) -> None:
        """Note what the ready worker holds: the bar a run's leftovers are measured against."""
        self._idle_bytes = self.held_bytes()

    def left_room(self, patience_s: float = LEFTOVER_PATIENCE_S) -> bool:
        """Whether the worker, after a run, holds at most :data:`LEFTOVER_MB` more than when it was idle (waiting up
        to ``patience_s`` for the kernel to free what it frees late); False: retire it."""
        if self._idle_bytes is None:
            return True
        bar = self._idle_bytes + (LEFTOVER_MB << 20)
        if self._usage_bytes() <= bar:  # the common case: one read, no memory.stat
            return True
        deadline = time.monotonic() + patience_s
        while self.held_bytes() > bar:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def oom_kills(self) -> int:
        """Processes the kernel killed here for want of memory, so far."""
        if self._final_oom_kills is not None:
            return self._final_oom_kills
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in _read(str(self.path / name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def before_run(self, limits: Limits) -> None:
        megabytes = self.limit_mb_for(limits)
        self.set_limit_bytes(None if megabytes is None else megabytes << 20)
        self._oom_kills = self.oom_kills()

    def judge(self, result: RunResult, limits: Limits) -> RunResult:
        """A run that ended badly while the kernel killed for memory here ran out of memory."""
        if result.status in (Status.OK, Status.MEMORY) or self.oom_kills() <= self._oom_kills:
            return result
        result.status = Status.MEMORY
        result.message = (
            f"memory limit of {limits.memory_mb} MB reached (counted for the whole sandbox: its processes, "
            "the files in its scratch space and the kernel's buffers)"
        )
        return result

    def remove(self, patience_s: float = 2.0) -> None:
        """Kill what is left in the cgroup, then give it to its tree for the next worker, or remove it (kept, for a
        later sweep, if that fails)."""
        deadline = time.monotonic() + patience_s
        while True:
            left = _read(self._procs).split()
            if not left:
                self._final_oom_kills = self.oom_kills()
                if self.tree is not None and self.path.is_dir():
                    self.tree.keep_for_reuse(self.path)
                    return
                try:
                    self.path.rmdir()
                    return
                except FileNotFoundError:
                    return
                except OSError as exc:
                    if exc.errno != errno.EBUSY:  # EBUSY: a process on its way out is still counted
                        return
            if time.monotonic() > deadline:
                return
            for pid in left:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            time.sleep(0.01)
