"""Helpers shared by the sandbox tests: tight limits and leak detectors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, List, Set

from skygym_sandboxes import Limits

# Tight limits so that escape attempts end quickly in CI.
TEST_LIMITS = Limits(
    wall_s=3, cpu_s=2, memory_mb=256, processes=32, output_bytes=64_000, file_size_mb=8, scratch_mb=16
)
SANDBOX_UID = 65534


def _innermost_pid(status_text: str) -> str:
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            return line.split()[-1]
    return ""


def _parent_map() -> Dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    return parents


def _descends_from(pid: int, ancestor: int, parents: Dict[int, int]) -> bool:
    seen = set()
    while pid and pid not in seen:
        if pid == ancestor:
            return True
        seen.add(pid)
        pid = parents.get(pid, 0)
    return False


def stray_processes(container_ids: Iterable[str] = ()) -> List[str]:
    """Live sandbox processes that are neither a bubblewrap launcher nor a supervisor (PID 1 of its
    namespace, or root in a container): what a run left behind.

    Programs never run as root (when the tests run as root, bubblewrap skygym-sandboxes run as uid 65534,
    unshare and docker programs as a uid of their worker's own), so a stray is a non-root process of
    *this* test session: a descendant of this process, or inside one of ``container_ids``. Sandboxes
    other people run on the same machine do not count.
    """
    parents = _parent_map()
    me = os.getpid()
    containers = [cid for cid in container_ids if cid]
    found = []
    for pid in parents:
        entry = Path("/proc") / str(pid)
        try:
            if entry.stat().st_uid == 0:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            status = (entry / "status").read_text()
            cgroup = (entry / "cgroup").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if cmdline.startswith("bwrap ") or _innermost_pid(status) == "1":
            continue
        if not (_descends_from(pid, me, parents) or any(cid in cgroup for cid in containers)):
            continue
        state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "?")
        found.append(f"pid {pid} state {state}: {cmdline[:100]}")
    return found


def host_tmp_entries() -> Set[str]:
    return set(os.listdir("/tmp"))
