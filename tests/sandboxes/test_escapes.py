"""Escape attempts, run on every backend the machine can run. Each must be contained, reported
with the right status, and leave no process or file behind."""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
import uuid

import pytest

from skygym_sandboxes import RunRequest, Status
from skygym_sandboxes.supervisor import SYSCALL_NUMBERS
from tests.sandboxes.support import KERNEL_SYSCALLS, SANDBOX_UID, host_tmp_entries, stray_processes

pytestmark = pytest.mark.slow

AS_ROOT = os.geteuid() == 0

SECCOMP_MACHINE = pytest.mark.skipif(
    os.uname().machine not in SYSCALL_NUMBERS,
    reason=f"the seccomp filter knows the system call numbers of {' and '.join(SYSCALL_NUMBERS)}, not of this "
           f"{os.uname().machine} machine: its programs run without it")


def assert_nothing_left(before_tmp: set, sandbox=None) -> None:
    containers = [c.id for c in sandbox.containers()] if hasattr(sandbox, "containers") else []
    # The supervisor kills leftovers before it answers; allow the kernel a moment to finish.
    deadline = time.monotonic() + 3
    while AS_ROOT and stray_processes(containers) and time.monotonic() < deadline:
        time.sleep(0.05)
    if AS_ROOT:
        assert stray_processes(containers) == [], "a run left processes behind"
    new_files = {name for name in host_tmp_entries() - before_tmp if "pytest" not in name}
    assert not {n for n in new_files if n.startswith(("escape", "sandbox"))}, new_files


@pytest.fixture
def tmp_snapshot():
    return host_tmp_entries()


def test_fork_bomb_is_contained(sandbox, tmp_snapshot):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    started = time.monotonic()
    result = sandbox.run(code)
    assert result.status == Status.TIMEOUT, result
    assert time.monotonic() - started < 15
    assert_nothing_left(tmp_snapshot, sandbox)


def test_memory_bomb_reports_memory(sandbox, tmp_snapshot):
    result = sandbox.run("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))\n")
    assert result.status == Status.MEMORY, result
    assert_nothing_left(tmp_snapshot, sandbox)


def test_infinite_loop_times_out(sandbox, tmp_snapshot):
    result = sandbox.run("while True:\n    pass\n")
    assert result.status == Status.TIMEOUT, result
    assert result.wall_time_s < sandbox.limits.wall_s + 2
    assert_nothing_left(tmp_snapshot, sandbox)


def test_sleeping_program_times_out_on_wall_clock(sandbox, tmp_snapshot):
    result = sandbox.run("import time\ntime.sleep(3600)\n")
    assert result.status == Status.TIMEOUT, result
    assert "wall" in result.message or "stopped answering" in result.message, result
    assert_nothing_left(tmp_snapshot, sandbox)


def test_busy_child_left_running_after_exit_is_killed(sandbox, tmp_snapshot):
    code = (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            pass\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    result = sandbox.run(code)
    assert result.status == Status.OK and result.stdout == "parent done\n", result
    assert_nothing_left(tmp_snapshot, sandbox)


def test_cannot_read_shadow_or_callers_environment(sandbox, tmp_snapshot, monkeypatch):
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("SANDBOX_TEST_SECRET", secret)
    code = (
        "import os, glob\n"
        "try:\n"
        "    print(open('/etc/shadow').read())\n"
        "except OSError as exc:\n"
        "    print('shadow:', type(exc).__name__)\n"
        "print('env:', dict(os.environ))\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        print(path, open(path, 'rb').read())\n"
        "    except OSError:\n"
        "        pass\n"
    )
    result = sandbox.run(code)
    assert result.status == Status.OK, result
    assert "shadow: " in result.stdout and "root:" not in result.stdout
    assert secret not in result.stdout and "SANDBOX_TEST_SECRET" not in result.stdout
    assert_nothing_left(tmp_snapshot, sandbox)


def test_cannot_write_outside_scratch(sandbox, tmp_snapshot, tmp_path):
    marker = f"escape-{uuid.uuid4().hex}"
    # /tmp and /dev/shm are private to the sandbox (writable, never the host's); the rest must refuse.
    private = [f"/tmp/{marker}", f"/dev/shm/{marker}"]
    refused = [f"/usr/{marker}", f"/etc/{marker}", str(tmp_path / marker), f"/{marker}", f"/var/tmp/{marker}"]
    targets = private + refused
    code = (
        "import sys\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, type(exc).__name__)\n"
        "open('inside.txt', 'w').write('fine')\n"
    )
    result = sandbox.run(code)
    assert result.status == Status.OK, result
    for path in refused:
        assert f"refused {path}" in result.stdout, result.stdout
    for path in targets:  # the sandbox's /tmp is private: even a write there never reaches the host
        assert not os.path.exists(path), path
    assert_nothing_left(tmp_snapshot, sandbox)


def test_nothing_a_run_leaves_reaches_the_next_run(sandbox, tmp_snapshot):
    """Files in the scratch folder, /tmp and /dev/shm, and System V IPC objects (which live in the
    sandbox's IPC namespace) are gone before the next run, even on the same warm worker. (Semaphores: the seccomp
    filter refuses System V shared memory and message queues, which held memory no limit counted.)"""
    leave = (
        "import ctypes\n"
        "for path in ('left.txt', '/tmp/left.txt', '/dev/shm/left.txt'):\n"
        "    open(path, 'w').write('secret')\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.semget(4242, 1, 0o1000 | 0o600) >= 0, libc.semget(4243, 2, 0o1000 | 0o600) >= 0)\n"
    )
    look = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "in_tmp = [e for e in os.listdir('/tmp') if os.path.join('/tmp', e) != os.getcwd()]\n"
        "print(sorted(os.listdir('.')), in_tmp, os.listdir('/dev/shm'),"
        " libc.semget(4242, 0, 0), libc.semget(4243, 0, 0))\n"
    )
    for _ in range(3):  # one at a time: the pool hands back the worker that just ran
        left = sandbox.run(leave)
        assert left.status == Status.OK and left.stdout == "True True\n", left
        seen = sandbox.run(look)
        assert seen.stdout == "['main.py'] [] [] -1 -1\n", seen
    assert_nothing_left(tmp_snapshot, sandbox)


def test_fetched_files_never_follow_links_out_of_scratch(sandbox, tmp_snapshot):
    code = (
        "import os\n"
        "open('out.txt', 'w').write('result')\n"
        "os.symlink('/etc/passwd', 'link.txt')\n"
        "os.mkdir('dir')\n"
        "os.symlink('/etc', 'up')\n"
    )
    request = RunRequest(code=code, fetch_files=["out.txt", "link.txt", "dir", "up/passwd", "missing.txt"])
    result = sandbox.run(request)
    assert result.status == Status.OK, result
    assert result.files == {"out.txt": base64.b64encode(b"result").decode()}
    assert_nothing_left(tmp_snapshot, sandbox)


def test_cannot_connect_to_a_server_on_the_host_loopback(sandbox, tmp_snapshot):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    stop = threading.Event()

    def accept_loop():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    try:
        code = (
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hello')\n"
            "print('connected')\n"
        )
        result = sandbox.run(code)
    finally:
        stop.set()
        thread.join()
        server.close()
    assert result.status == Status.ERROR and "connected" not in result.stdout, result
    assert accepted == []
    assert_nothing_left(tmp_snapshot, sandbox)


SOCKET_FAMILY_PROBE = r"""
import json, socket
def make(family, kinds=(socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_RAW)):
    error = None
    for kind in kinds:
        try:
            socket.socket(family, kind).close()
            return "ok"
        except OSError as exc:
            error = exc
    return __import__("errno").errorcode.get(error.errno, str(error.errno))
vsock_port = %d
try:
    held = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    held.bind((socket.VMADDR_CID_ANY, vsock_port))
    vsock_bind = "ok"
except OSError as exc:
    vsock_bind = __import__("errno").errorcode.get(exc.errno, str(exc.errno))
print(json.dumps({
    "vsock_bind": vsock_bind,
    "refused": {name: make(family) for name, family in
                (("AF_VSOCK", 40), ("AF_ALG", 38), ("AF_PACKET", 17), ("AF_BLUETOOTH", 31), ("AF_XDP", 44),
                 ("AF_NETLINK", 16))},
    "kept": {name: make(family, (socket.SOCK_DGRAM,)) for name, family in
             (("AF_UNIX", 1), ("AF_INET", 2), ("AF_INET6", 10))},
}))
"""


@SECCOMP_MACHINE
def test_no_socket_family_outside_the_network_namespace(sandbox, tmp_snapshot):
    """AF_VSOCK is not per network namespace: on a virtual machine a sandboxed program could talk to the
    hypervisor and listen on the machine's vsock ports. The host holds a vsock port where the kernel has
    vsock; the program must get no vsock socket at all (never EADDRINUSE, which says it shares the host's
    ports), and no other family beyond unix, IPv4 and IPv6 (netlink's buffers are counted by no memory cgroup)."""
    import errno
    import json

    held = None
    port = 47000 + os.getpid() % 1000
    try:
        held = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        held.bind((socket.VMADDR_CID_ANY, port))
    except OSError:  # no vsock on this machine: the probe still checks that every family is refused
        if held is not None:
            held.close()
        held = None
    try:
        result = sandbox.run(RunRequest(code=SOCKET_FAMILY_PROBE % port))
    finally:
        if held is not None:
            held.close()
    assert result.status == Status.OK, (result.status, result.stderr)
    report = json.loads(result.stdout)
    refused = errno.errorcode[errno.EAFNOSUPPORT]
    assert report["vsock_bind"] == refused, report
    assert report["refused"] == {name: refused for name in report["refused"]}, report
    assert report["kept"] == {name: "ok" for name in report["kept"]}, report
    assert_nothing_left(tmp_snapshot, sandbox)


def test_100_mb_of_output_is_cut(sandbox, tmp_snapshot):
    code = "import sys\nchunk = 'x' * 2**20\nfor _ in range(100):\n    sys.stdout.write(chunk)\n"
    result = sandbox.run(code)
    assert result.status == Status.OUTPUT_LIMIT, result
    assert result.stdout_truncated and len(result.stdout) <= sandbox.limits.output_bytes
    assert_nothing_left(tmp_snapshot, sandbox)


def test_killing_the_parent_does_not_break_the_sandbox(sandbox, tmp_snapshot):
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\nprint('survived')\n"
    result = sandbox.run(code)
    # kill(-1) takes the program itself down; the supervisor above it is out of its reach.
    assert result.status in (Status.KILLED, Status.ERROR), result
    assert "survived" not in result.stdout
    follow_up = sandbox.run("print('still serving')")
    assert follow_up.status == Status.OK and follow_up.stdout == "still serving\n", follow_up
    assert_nothing_left(tmp_snapshot, sandbox)


def test_filling_the_disk_is_bounded(sandbox, tmp_snapshot):
    code = (
        "i = 0\n"
        "while True:\n"
        "    with open(f'fill-{i}', 'wb') as f:\n"
        "        f.write(b'x' * 2**20)\n"
        "    i += 1\n"
    )
    result = sandbox.run(code)
    assert result.status in (Status.ERROR, Status.OUTPUT_LIMIT), result
    assert "No space left on device" in result.stderr or "File too large" in result.stderr, result.stderr
    follow_up = sandbox.run("import os\nprint(sorted(os.listdir('.')))")
    assert follow_up.stdout == "['main.py']\n", follow_up  # the next run starts from an empty scratch folder
    assert_nothing_left(tmp_snapshot, sandbox)


def test_a_bad_program_never_blocks_the_rest_of_a_batch(sandbox, tmp_snapshot):
    requests = [
        RunRequest(code="while True:\n    pass"),
        RunRequest(code="import sys\nwhile True:\n    sys.stdout.write('y' * 65536)"),
        RunRequest(code="import ctypes\nctypes.string_at(0)"),
        RunRequest(code="print(sum(range(10)))"),
        RunRequest(code="raise SystemExit(3)"),
    ]
    results = sandbox.run_batch(requests, concurrency=2)
    assert [r.status for r in results] == [
        Status.TIMEOUT,
        Status.OUTPUT_LIMIT,
        Status.KILLED,
        Status.OK,
        Status.ERROR,
    ]
    assert results[3].stdout == "45\n" and results[4].exit_code == 3
    assert_nothing_left(tmp_snapshot, sandbox)


def test_programs_run_as_an_unprivileged_user(sandbox):
    if not AS_ROOT:
        pytest.skip("the uid check applies when the caller is root")
    result = sandbox.run("import os\nprint(os.getuid(), os.geteuid())")
    assert result.stdout.split() != ["0", "0"], result


@pytest.mark.skipif(
    not AS_ROOT, reason="the leak detector looks for processes of the sandbox uid, which needs root"
)
def test_the_leak_detector_sees_a_leftover_process():
    import subprocess

    def become_sandbox_user():
        os.setgid(SANDBOX_UID)
        os.setuid(SANDBOX_UID)

    leftover = subprocess.Popen(["sleep", "30"], preexec_fn=become_sandbox_user)
    try:
        time.sleep(0.1)
        assert any(f"pid {leftover.pid} " in line for line in stray_processes())
    finally:
        leftover.kill()
        leftover.wait()
    assert not any(f"pid {leftover.pid} " in line for line in stray_processes())


SECCOMP_PROBE = r"""
import ctypes, errno, json, os, subprocess, threading
NR = json.loads('__NUMBERS__')  # this machine's system call numbers, from the kernel's headers
libc = ctypes.CDLL(None, use_errno=True)
NAME, PARAM = ctypes.create_string_buffer(b"probe"), ctypes.c_int(0)
LIMIT = (ctypes.c_uint64 * 2)(*__import__("resource").getrlimit(7))  # RLIMIT_NOFILE as it is: set to itself
CPUS = (ctypes.c_ulong * 16)()
libc.syscall(ctypes.c_long(NR["sched_getaffinity"]), 0, ctypes.sizeof(CPUS), ctypes.addressof(CPUS))  # ours

class Fprog(ctypes.Structure):  # struct sock_fprog: one instruction, "accept everything"
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
ACCEPT = ctypes.create_string_buffer(__import__("struct").pack("=HBBI", 0x06, 0, 0, 0x7FFF0000), 8)
FPROG = Fprog(1, ctypes.cast(ACCEPT, ctypes.c_void_p))
SOCK = __import__("socket").socket(__import__("socket").AF_UNIX, __import__("socket").SOCK_DGRAM)
ACTION = ctypes.c_uint32(0x7FFF0000)

def call(nr, *args):
    # in a child of its own, so a call that gets through (a new namespace, being traced) changes nothing here
    pid = os.fork()
    if pid == 0:
        result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
        os._exit(255 if result >= 0 else ctypes.get_errno())  # in a successful clone's child too: 255
    code = os.waitpid(pid, 0)[1] >> 8
    return "ok" if code == 255 else errno.errorcode.get(code, str(code))

probes = {
    "unshare(CLONE_NEWUSER)": call(NR["unshare"], 0x10000000),
    "clone(CLONE_NEWUSER)": call(NR["clone"], 0x10000000 | 17, 0, 0, 0, 0),
    "ptrace(PTRACE_TRACEME)": call(NR["ptrace"], 0, 0, 0, 0),
    "keyctl(GET_KEYRING_ID)": call(NR["keyctl"], 0, -3, 0),
    "io_uring_setup": call(NR["io_uring_setup"], 1, 0),
    "userfaultfd": call(NR["userfaultfd"], 0),
    "perf_event_open": call(NR["perf_event_open"], 0, 0, -1, -1, 0),
    "memfd_create": call(NR["memfd_create"], ctypes.addressof(NAME), 0),
    "shmget(IPC_PRIVATE)": call(NR["shmget"], 0, 4096, 0o600),
    "msgget(IPC_PRIVATE)": call(NR["msgget"], 0, 0o600),
    # classic BPF is JIT-compiled into one host-wide budget no cgroup counts: a program that spent it on socket
    # filters made every other run's seccomp install fail
    "setsockopt(SO_ATTACH_FILTER)": call(NR["setsockopt"], SOCK.fileno(), 1, 26, ctypes.addressof(FPROG),
                                         ctypes.sizeof(FPROG)),
    "setsockopt(SO_ATTACH_REUSEPORT_CBPF)": call(NR["setsockopt"], SOCK.fileno(), 1, 51, ctypes.addressof(FPROG),
                                                 ctypes.sizeof(FPROG)),
    "prctl(PR_SET_SECCOMP)": call(NR["prctl"], 22, 2, ctypes.addressof(FPROG), 0, 0),
    "seccomp(GET_ACTION_AVAIL)": call(NR["seccomp"], 2, 0, ctypes.addressof(ACTION)),
    # on another process (the probe's own, from the child call() forks): reads or sets only what it already has
    "prlimit64(another)": call(NR["prlimit64"], os.getpid(), 7, ctypes.addressof(LIMIT), 0),
    "sched_setaffinity(another)": call(NR["sched_setaffinity"], os.getpid(), ctypes.sizeof(CPUS),
                                       ctypes.addressof(CPUS)),
    "sched_setscheduler(another)": call(NR["sched_setscheduler"], os.getpid(), 0, ctypes.addressof(PARAM)),
    "setpriority(PRIO_PROCESS, another)": call(NR["setpriority"], 0, os.getpid(), os.getpriority(os.PRIO_PROCESS, 0)),
    "setpriority(PRIO_USER)": call(NR["setpriority"], 2, 0, os.getpriority(os.PRIO_PROCESS, 0)),
    "ioprio_set(another)": call(NR["ioprio_set"], 1, os.getpid(), libc.syscall(NR["ioprio_get"], 1, 0)),
}
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
pid = os.fork()
if pid == 0:
    os._exit(7)
ordinary = {
    "read another's limits": call(NR["prlimit64"], os.getpid(), 7, 0, ctypes.addressof(LIMIT)) == "ok",  # forks
    "thread": True,
    "fork": os.waitpid(pid, 0)[1] >> 8,
    "subprocess": subprocess.run(["/bin/echo", "hi"], capture_output=True, text=True).stdout.strip(),
    "other socket options": call(NR["setsockopt"], SOCK.fileno(), 1, 7, ctypes.addressof(ctypes.c_int(1 << 16)),
                                 4) == "ok",  # SO_SNDBUF
    "other prctl": call(NR["prctl"], 15, ctypes.addressof(NAME), 0, 0, 0) == "ok",  # PR_SET_NAME
}
print(json.dumps({"probes": probes, "ordinary": ordinary}))
"""


def seccomp_probe() -> str:
    """:data:`SECCOMP_PROBE` with this machine's system call numbers, from the kernel's headers (not the filter's)."""
    import json

    return SECCOMP_PROBE.replace("__NUMBERS__", json.dumps(KERNEL_SYSCALLS[os.uname().machine]))


@SECCOMP_MACHINE
def test_kernel_interfaces_are_denied_by_seccomp(sandbox):
    import json

    result = sandbox.run(RunRequest(code=seccomp_probe()))
    assert result.status == Status.OK, (result.status, result.stderr)
    report = json.loads(result.stdout)
    assert report["probes"] == {name: "EPERM" for name in report["probes"]}, report["probes"]
    assert report["ordinary"] == {"thread": True, "fork": 7, "subprocess": "hi", "read another's limits": True,
                                  "other socket options": True, "other prctl": True}


@SECCOMP_MACHINE
def test_without_seccomp_the_probes_get_through(tmp_snapshot):
    """The probe can tell: with the filter off, bubblewrap alone lets a program trace itself and make a user namespace."""
    import json
    import shutil

    from skygym_sandboxes.local import LocalSandbox
    from tests.sandboxes.support import TEST_LIMITS

    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed")
    with LocalSandbox(limits=TEST_LIMITS, isolation="bwrap", warm=False, seccomp=False) as box:
        result = box.run(RunRequest(code=seccomp_probe()))
    assert result.status == Status.OK, (result.status, result.stderr)
    probes = json.loads(result.stdout)["probes"]
    assert probes["ptrace(PTRACE_TRACEME)"] == "ok"
    assert probes["unshare(CLONE_NEWUSER)"] == "ok"
    # the program has the supervisor's uid under bubblewrap: without the filter it may set another's limits
    assert probes["memfd_create"] == probes["prlimit64(another)"] == probes["setpriority(PRIO_USER)"] == "ok"
    assert probes["setsockopt(SO_ATTACH_FILTER)"] == probes["seccomp(GET_ACTION_AVAIL)"] == "ok"
