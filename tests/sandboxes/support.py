"""Helpers shared by the sandbox tests: tight limits and leak detectors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Set

from sandboxes import Limits

# Tight limits so that escape attempts end quickly in CI.
TEST_LIMITS = Limits(wall_s=3, cpu_s=2, memory_mb=256, processes=32, output_bytes=64_000, file_size_mb=8,
                     scratch_mb=16)
SANDBOX_UID = 65534


def _innermost_pid(status_text: str) -> str:
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            return line.split()[-1]
    return ""


def stray_processes() -> List[str]:
    """Live processes of the sandbox uid that are neither a bubblewrap launcher nor a supervisor
    (PID 1 of its namespace): what a run left behind. Programs run as this uid on every backend
    when the tests run as root."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != SANDBOX_UID:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            status = (entry / "status").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "?")
        if cmdline.startswith("bwrap ") or _innermost_pid(status) == "1":
            continue
        found.append(f"pid {entry.name} state {state}: {cmdline[:100]}")
    return found


def host_tmp_entries() -> Set[str]:
    return set(os.listdir("/tmp"))


