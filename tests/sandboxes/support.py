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


# The kernel's system call numbers, written out from its headers (asm/unistd_64.h for x86_64, the generic
# asm-generic/unistd.h that aarch64 uses) apart from the seccomp filter's own table: the probes call these, and
# test_seccomp_program compares the filter's table with them, so a number typed wrong in one is caught by the other.
KERNEL_SYSCALLS = {
    "x86_64": {
        "acct": 163, "add_key": 248, "bpf": 321, "chroot": 161, "clone": 56, "clone3": 435, "delete_module": 176,
        "execve": 59, "finit_module": 313, "fsconfig": 431, "fsmount": 432, "fsopen": 430, "fspick": 433,
        "getdents64": 217, "getpid": 39, "init_module": 175, "io_uring_enter": 426, "io_uring_register": 427,
        "io_uring_setup": 425, "ioperm": 173, "iopl": 172, "ioprio_get": 252, "ioprio_set": 251, "kcmp": 312,
        "kexec_file_load": 320, "kexec_load": 246, "keyctl": 250, "lookup_dcookie": 212, "memfd_create": 319,
        "memfd_secret": 447, "migrate_pages": 256, "mmap": 9, "mount": 165, "mount_setattr": 442, "move_mount": 429,
        "move_pages": 279, "msgget": 68, "name_to_handle_at": 303, "open_by_handle_at": 304, "open_tree": 428,
        "openat": 257, "perf_event_open": 298, "personality": 135, "pivot_root": 155, "prctl": 157, "prlimit64": 302,
        "process_vm_readv": 310, "process_vm_writev": 311, "ptrace": 101, "quotactl": 179, "read": 0, "reboot": 169,
        "request_key": 249, "sched_getaffinity": 204, "sched_setaffinity": 203, "sched_setattr": 314,
        "sched_setparam": 142, "sched_setscheduler": 144, "seccomp": 317, "setdomainname": 171, "sethostname": 170,
        "setns": 308, "setpriority": 141, "setsockopt": 54, "shmget": 29, "socket": 41, "socketpair": 53,
        "swapoff": 168, "swapon": 167, "syslog": 103, "umount2": 166, "unshare": 272, "userfaultfd": 323,
    },
    "aarch64": {
        "acct": 89, "add_key": 217, "bpf": 280, "chroot": 51, "clone": 220, "clone3": 435, "delete_module": 106,
        "execve": 221, "finit_module": 273, "fsconfig": 431, "fsmount": 432, "fsopen": 430, "fspick": 433,
        "getdents64": 61, "getpid": 172, "init_module": 105, "io_uring_enter": 426, "io_uring_register": 427,
        "io_uring_setup": 425, "ioprio_get": 31, "ioprio_set": 30, "kcmp": 272, "kexec_file_load": 294,
        "kexec_load": 104, "keyctl": 219, "lookup_dcookie": 18, "memfd_create": 279, "memfd_secret": 447,
        "migrate_pages": 238, "mmap": 222, "mount": 40, "mount_setattr": 442, "move_mount": 429, "move_pages": 239,
        "msgget": 186, "name_to_handle_at": 264, "open_by_handle_at": 265, "open_tree": 428, "openat": 56,
        "perf_event_open": 241, "personality": 92, "pivot_root": 41, "prctl": 167, "prlimit64": 261,
        "process_vm_readv": 270, "process_vm_writev": 271, "ptrace": 117, "quotactl": 60, "read": 63, "reboot": 142,
        "request_key": 218, "sched_getaffinity": 123, "sched_setaffinity": 122, "sched_setattr": 274,
        "sched_setparam": 118, "sched_setscheduler": 119, "seccomp": 277, "setdomainname": 162, "sethostname": 161,
        "setns": 268, "setpriority": 140, "setsockopt": 208, "shmget": 194, "socket": 198, "socketpair": 199,
        "swapoff": 225, "swapon": 224, "syslog": 116, "umount2": 39, "unshare": 97, "userfaultfd": 282,
    },
}


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
