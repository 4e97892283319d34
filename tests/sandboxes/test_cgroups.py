"""A memory cgroup per local worker: what the kernel holds for a program counts against its memory.

The real tests need write access to a cgroup filesystem with the memory controller (root on cgroup
v1, or the root of a cgroup v2 namespace); elsewhere they skip and say so.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from skygym_sandboxes import Limits, RunRequest
from skygym_sandboxes.cgroups import (
    SUPERVISOR_ALLOWANCE_MB,
    TCP_BUFFERS_MB,
    WorkerCgroup,
    _cgroup_mounts,
    _inside,
    _own_paths,
    find_tree,
)
from skygym_sandboxes.local import LocalSandbox, resolve_isolation
from skygym_sandboxes.types import SandboxUnavailable

LIMITS = Limits(wall_s=20, cpu_s=20, memory_mb=128, processes=32, scratch_mb=16)
# 400,000 empty files: about 400 MiB of kernel memory on a 16 MiB tmpfs, none of it address space
INODE_FLOOD = (
    "n = 0\n"
    "for i in range(400_000):\n"
    "    open(f'/tmp/f{i}', 'w').close()\n"
    "    n += 1\n"
    "print(n)\n"
)


def test_mounts_and_own_cgroups_are_read_from_the_kernels_text():
    mountinfo = (
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    mounts = _cgroup_mounts(mountinfo)
    assert mounts == {"memory": ("/docker/abc", "/sys/fs/cgroup/memory"), "v2": ("/", "/sys/fs/cgroup/unified")}
    own = _own_paths("4:memory:/docker/abc/job\n0::/user.slice\n2:cpu,cpuacct:/\n")
    assert own == {"memory": "/docker/abc/job", "v2": "/user.slice"}
    assert _inside(mounts["memory"], own["memory"]) == Path("/sys/fs/cgroup/memory/job")
    assert _inside(mounts["memory"], "/elsewhere") is None  # not visible through this mount
    assert _inside(("/", "/sys/fs/cgroup"), "/") == Path("/sys/fs/cgroup")


def test_the_limit_is_the_runs_memory_plus_both_tmpfs_plus_the_supervisors_share():
    cgroup = WorkerCgroup(1, Path("/nonexistent"), scratch_mb=16)
    assert cgroup.limit_mb_for(Limits(memory_mb=128)) == 128 + 2 * 16 + SUPERVISOR_ALLOWANCE_MB


def test_without_cgroups_the_sandbox_says_so_and_refuses_when_they_are_required(monkeypatch):
    """A unit-test double for a machine without writable cgroups (the real path is tested below)."""
    import skygym_sandboxes.local as local

    monkeypatch.setattr(local, "find_tree", lambda: (None, "no cgroup filesystem with the memory controller"))
    with pytest.raises(SandboxUnavailable, match="memory_cgroup=True, but no cgroup filesystem"):
        LocalSandbox(limits=LIMITS, isolation="none", warm=False, memory_cgroup=True)
    with pytest.warns(RuntimeWarning):
        box = LocalSandbox(limits=LIMITS, isolation="none", warm=False)
    assert box.memory_accounting.startswith("per process (RLIMIT_AS): no cgroup filesystem")
    box.close()


def _tree_or_skip():
    tree, why_not = find_tree()
    if tree is None:
        pytest.skip(
            f"memory cgroups cannot be made here ({why_not}): run the tests as root on cgroup v1, or as root "
            "at the root of a cgroup v2 namespace (a container)"
        )
    return tree


ISOLATIONS = ["bwrap", "unshare"]


@pytest.fixture(params=ISOLATIONS)
def box(request):
    _tree_or_skip()
    if request.param == "bwrap" and not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    if request.param == "unshare" and os.geteuid() != 0:
        pytest.skip("the unshare fallback needs root")
    sandbox = LocalSandbox(limits=LIMITS, isolation=request.param, pool_size=1, memory_cgroup=True)
    assert sandbox.wait_ready(60)
    yield sandbox
    sandbox.close()


def _isolation_or_skip() -> str:
    try:
        return resolve_isolation("auto")
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))


def _worker_cgroups(tree) -> list:
    return [entry for entry in tree.path.iterdir() if entry.name.startswith(f"{os.getpid()}-")]


def test_kernel_memory_a_program_makes_on_its_tmpfs_counts_against_its_memory(box):
    assert box.memory_accounting.startswith("per worker, by a memory cgroup")
    flood = box.run(RunRequest(code=INODE_FLOOD))
    assert flood.status == "memory", (flood.status, flood.message, flood.stdout[-200:])
    assert "whole sandbox" in flood.message
    after = box.run(RunRequest(code="print(6 * 7)"))
    assert after.ok and after.stdout == "42\n"


def test_the_sum_over_a_programs_processes_is_bounded(box):
    # six children of 100 MiB each, every one within RLIMIT_AS (128 MB); together past the worker's limit
    code = (
        "import os\n"
        "children = []\n"
        "for _ in range(6):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(100 << 20)\n"
        "        import time; time.sleep(2)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "killed = sum(os.waitpid(pid, 0)[1] != 0 for pid in children)\n"
        "print(killed)\n"
    )
    result = box.run(RunRequest(code=code))
    assert result.ok, (result.status, result.message, result.stderr[-300:])
    assert int(result.stdout) >= 3  # at most (128 + 2*16 + 128) MB of the 600 could be held


def test_a_worker_cgroup_is_emptied_with_its_worker_and_kept_for_the_next():
    """A removed memory cgroup lingers in the kernel while pages are charged to it (930 after a day of tests): the
    cgroup of a worker that ended is emptied and reused by the next worker of this process."""
    tree = _tree_or_skip()
    before = set(_worker_cgroups(tree))  # other tests' sandboxes may hold some
    isolation = _isolation_or_skip()
    sandbox = LocalSandbox(limits=LIMITS, isolation=isolation, pool_size=2, memory_cgroup=True)
    try:
        assert sandbox.wait_ready(60)
        assert sandbox.run(RunRequest(code=INODE_FLOOD)).status == "memory"  # its worker may be retired, replaced
        assert sandbox.run(RunRequest(code="print(1)")).ok
    finally:
        sandbox.close()
    after = set(_worker_cgroups(tree))
    mine = after - before
    assert mine and all(not (path / "cgroup.procs").read_text().split() for path in mine)
    again = LocalSandbox(limits=LIMITS, isolation=isolation, pool_size=2, memory_cgroup=True)
    try:
        assert again.wait_ready(60) and again.run(RunRequest(code="print(6 * 7)")).stdout == "42\n"
        assert set(_worker_cgroups(tree)) == after  # the emptied ones, none new
    finally:
        again.close()


def test_memory_cgroup_false_keeps_per_process_limits():
    sandbox = LocalSandbox(limits=LIMITS, isolation=_isolation_or_skip(), pool_size=1, memory_cgroup=False)
    try:
        assert sandbox.memory_accounting == "per process (RLIMIT_AS): memory_cgroup=False"
        assert sandbox.run(RunRequest(code="print(1)")).ok
    finally:
        sandbox.close()


# Unix sockets that carry each other's descriptors: closed, they wait for the kernel's garbage collector, which frees
# them seconds later (an attacker's pass: 238 MB left charged, and the next honest run reported "memory")
SOCKET_CYCLES = r"""
import array, socket
for _ in range(28):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno(), a.fileno()]))])
    a.setblocking(False)
    try:
        while True:
            a.send(b"y" * 65536)
    except BlockingIOError:
        pass
    a.close()
    b.close()
print("left")
"""
HONEST = "block = bytearray(48 << 20)\nprint(6 * 7)"


def test_memory_a_run_leaves_charged_to_its_worker_never_reaches_the_next_run(box):
    for _ in range(3):
        box.run(RunRequest(code=SOCKET_CYCLES))
        honest = box.run(RunRequest(code=HONEST))
        assert honest.ok and honest.stdout == "42\n", (honest.status, honest.message)
    # a hostile run under a larger limit of its own: the honest run's lower limit must still be set
    box.run(RunRequest(code=SOCKET_CYCLES, limits=Limits(memory_mb=512, wall_s=20, cpu_s=20, processes=32)))
    honest = box.run(RunRequest(code=HONEST))
    assert honest.ok and honest.stdout == "42\n", (honest.status, honest.message)


def test_the_program_not_its_supervisor_is_the_kernels_first_pick(box):
    result = box.run(RunRequest(code="print(open('/proc/self/oom_score_adj').read().strip())"))
    assert result.ok and result.stdout == "1000\n", (result.status, result.stdout, result.stderr[-300:])


def test_tcp_buffers_count_against_a_limit_of_their_own():
    tree = _tree_or_skip()
    if tree.version != 1:
        pytest.skip("cgroup v2 counts socket buffers in memory.current: there is no separate TCP limit to check")
    cgroup = tree.new_worker(scratch_mb=16)
    try:
        limit = int((cgroup.path / "memory.kmem.tcp.limit_in_bytes").read_text())
        assert limit == TCP_BUFFERS_MB << 20
    finally:
        cgroup.remove()


def test_a_tree_another_process_removed_is_made_again():
    """Processes of one cgroup share the tree; one that exits removes it when empty, and the others' next workers
    must still start (two test workers of one CI job do exactly this)."""
    from skygym_sandboxes.cgroups import CgroupTree

    shared = _tree_or_skip()
    tree = CgroupTree(shared.version, shared.path.parent / f"skyrl-sandbox-test-{os.getpid()}")
    tree.path.mkdir()
    tree.path.rmdir()  # as another process did, on its way out
    cgroup = tree.new_worker(scratch_mb=16)
    try:
        assert cgroup.path.is_dir() and cgroup.path.parent == tree.path
    finally:
        cgroup.path.rmdir()
        tree.path.rmdir()
