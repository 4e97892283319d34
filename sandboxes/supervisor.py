"""The supervisor that runs *inside* a sandbox (bubblewrap, unshare, a Docker container).

Standard library only, and self-contained: backends start it as ``python3 -I -c <this source>``, so
it needs no file inside the sandbox.

Protocol (fd 0 in, fd 1 out). A request is a length-prefixed JSON *control* object (``id``,
``limits``, ``fetch_count``, ``payload_bytes``) followed by ``payload_bytes`` opaque bytes: the
program's code or command, stdin, files, argv and the names of the files to fetch, as JSON. A reply
is a length-prefixed JSON object that echoes the request's ``id`` and gives the byte counts of the
raw stdout, stderr and fetched files (by their index in the request) that follow it. Any framing
error ends the supervisor: the host then replaces the worker.

Every run starts clean:

* The supervisor never holds a run's data in its own memory, so a program forked from it cannot
  find an earlier run's code, stdin, output, file names or file contents there. The payload is
  copied, through one buffer that is zeroed after each use, from fd 0 into a memfd that only the
  run's child reads; the child's stdout and stderr go, through the same buffer, into memfds that are
  copied to fd 1 the same way. The request's files are written by the run's child and fetched files
  read by a helper process forked for it, which exits.
* The child writes the request's files itself, as the program's user, into a work folder that was
  created empty for this run.
* After the run every process of it is killed, then the whole writable area (the sandbox root
  holding the work folder and /tmp, plus /dev/shm) is emptied by an iterative walk that follows no
  link, cannot recurse out of its stack, works on any depth of tree, and reads directory entries
  into the scrubbed buffer with getdents64 (names are handed back to unlinkat by address, never
  copied into an object); the work folder is then made anew. A tree that cannot be emptied within its budget retires the worker (the reply says
  ``retire``; the supervisor exits after it).
* The supervisor ignores every signal a program could send it (it is PID 1 of the namespace, or
  another uid), and it is not dumpable, so a program cannot ptrace it or read its memory. A program
  of its uid (bubblewrap's) could still set its resource limits and scheduling, which every later
  run, a fork of it, would inherit: the seccomp filter lets a program set these on itself only, and
  after each run the supervisor compares its own with what it started with and retires on a change.

``serve`` mode loops over requests (a warm worker); ``once`` mode answers one and exits. With
``--setup-root`` (the unshare fallback, started as root in fresh mount/PID/network namespaces) the
supervisor first builds a minimal read-only root of its own and pivots into it.
"""

import errno
import fcntl
import json
import math
import os
import resource
import select
import signal
import stat
import struct
import sys
import time

HEADER = struct.Struct(">I")
MAX_CONTROL_BYTES = 1 << 20
MAX_PAYLOAD_BYTES = 1 << 30
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# Ceilings the supervisor applies whatever it is sent (the host validates limits first).
HARD_LIMITS = {
    "wall_s": 3600.0,
    "cpu_s": 3600.0,
    "memory_mb": 65536,
    "processes": 4096,
    "output_bytes": 64 * 1024 * 1024,
    "file_size_mb": 4096,
    "open_files": 65536,
}
DEFAULT_LIMITS = {"wall_s": 10.0, "output_bytes": 1000000}
MAX_FETCH_FILES = 64
FETCH_TOTAL_FACTOR = 4
WIPE_BUDGET_S = 5.0
WIPE_BUDGET_ENTRIES = 500000
READY = b"R"

# The one buffer every run's bytes pass through in the supervisor; zeroed after each use.
BUFFER_SIZE = 1 << 16
BUFFER = bytearray(BUFFER_SIZE)
ZEROS = bytes(BUFFER_SIZE)


def scrub():
    BUFFER[:] = ZEROS


class ProtocolError(Exception):
    """The stream from the host is not a well-formed request: the supervisor must stop."""


# ----- the seccomp filter ------------------------------------------------------------------------
# A deny list, not an allow list: programs keep every ordinary system call (threads, fork, exec, files,
# sockets in their empty network namespace) and lose the kernel interfaces that sandbox escapes and
# kernel exploits go through: namespaces, mounts, tracing other processes, keyrings, eBPF, io_uring,
# perf events, userfaultfd, modules. A denied call fails with EPERM (clone3 with ENOSYS, so that libc
# falls back to clone, whose namespace flags the filter can see). Sockets are limited to the families
# that the empty network namespace contains (unix, IPv4, IPv6; not netlink): the others fail with
# EAFNOSUPPORT. AF_VSOCK is not per network namespace: on a virtual machine a sandboxed program could
# otherwise talk to the hypervisor and listen on the machine's vsock ports (found on a Firecracker VM).
DENIED_SYSCALLS = (
    "ptrace", "syslog", "personality", "pivot_root", "chroot", "acct", "mount", "umount2", "swapon", "swapoff",
    "reboot", "sethostname", "setdomainname", "iopl", "ioperm", "init_module", "delete_module", "quotactl",
    "lookup_dcookie", "kexec_load", "add_key", "request_key", "keyctl", "unshare", "perf_event_open",
    "name_to_handle_at", "open_by_handle_at", "setns", "process_vm_readv", "process_vm_writev", "kcmp",
    "finit_module", "kexec_file_load", "bpf", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # memory in a memfd is neither address space (RLIMIT_AS) nor on the sandbox's sized tmpfs: one program
    # limited to 128 MB held 2 GiB of the host's memory in memfds (an attacker's pass)
    "memfd_create", "memfd_secret",
    # System V shared memory outlives the mapping that RLIMIT_AS counts (a program held 1 GiB under memory_mb=128),
    # and message queues hold up to msgmni x msgmnb more; semaphores hold next to nothing and stay allowed
    "shmget", "msgget",
    # classic BPF filters are JIT-compiled into one host-wide budget (net.core.bpf_jit_limit) that no memory cgroup
    # counts: a program that filled it with socket filters made every other run's seccomp install fail (an
    # attacker's pass); a program's own seccomp filters draw on it too (prctl(PR_SET_SECCOMP) is refused below)
    "seccomp",
)
# Calls that act on the process their first argument names (0: the caller). A program of the supervisor's uid
# (bubblewrap's) lowered the supervisor's hard limits and set it SCHED_IDLE, nice 19 and one CPU with them, and
# every later run of that worker, a fork of it, inherited that (an attacker's pass): these may name the caller only.
SELF_ONLY_SYSCALLS = ("sched_setparam", "sched_setscheduler", "sched_setaffinity", "migrate_pages", "move_pages",
                      "sched_setattr")
# System call numbers are per architecture: x86_64's (asm/unistd_64.h) and aarch64's (the kernel's generic table,
# asm-generic/unistd.h; it has no iopl or ioperm). On other machines programs run without the filter. The filter
# also refuses every call made under another architecture's numbers (a 32-bit program, x86_64's x32 ABI).
SYSCALL_NUMBERS = {
    "x86_64": {
        "ptrace": 101, "syslog": 103, "personality": 135, "pivot_root": 155, "chroot": 161, "acct": 163,
        "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170,
        "setdomainname": 171, "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176,
        "quotactl": 179, "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248, "request_key": 249,
        "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304,
        "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
        "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "memfd_create": 319, "memfd_secret": 447,
        "shmget": 29, "msgget": 68, "seccomp": 317, "sched_setparam": 142, "sched_setscheduler": 144,
        "sched_setaffinity": 203, "migrate_pages": 256, "move_pages": 279, "sched_setattr": 314,
        "prlimit64": 302, "prctl": 157, "setsockopt": 54, "setpriority": 141, "ioprio_set": 251, "ioprio_get": 252,
        "clone": 56, "clone3": 435, "socket": 41, "socketpair": 53, "getdents64": 217,
    },
    "aarch64": {
        "ptrace": 117, "syslog": 116, "personality": 92, "pivot_root": 41, "chroot": 51, "acct": 89, "mount": 40,
        "umount2": 39, "swapon": 224, "swapoff": 225, "reboot": 142, "sethostname": 161, "setdomainname": 162,
        "init_module": 105, "delete_module": 106, "quotactl": 60, "lookup_dcookie": 18, "kexec_load": 104,
        "add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97, "perf_event_open": 241,
        "name_to_handle_at": 264, "open_by_handle_at": 265, "setns": 268, "process_vm_readv": 270,
        "process_vm_writev": 271, "kcmp": 272, "finit_module": 273, "kexec_file_load": 294, "bpf": 280,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "memfd_create": 279, "memfd_secret": 447, "shmget": 194, "msgget": 186,
        "seccomp": 277, "sched_setparam": 118, "sched_setscheduler": 119, "sched_setaffinity": 122,
        "migrate_pages": 238, "move_pages": 239, "sched_setattr": 274, "prlimit64": 261, "prctl": 167,
        "setsockopt": 208, "setpriority": 140, "ioprio_set": 30, "ioprio_get": 31, "clone": 220, "clone3": 435,
        "socket": 198, "socketpair": 199, "getdents64": 61,
    },
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # EM_X86_64 / EM_AARCH64, 64-bit, little-endian
X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 ABI: its calls carry this bit
PR_SET_SECCOMP, SOL_SOCKET = 22, 1
# SO_ATTACH_FILTER, SO_ATTACH_BPF, SO_ATTACH_REUSEPORT_CBPF, SO_ATTACH_REUSEPORT_EBPF: a BPF program on a socket
BPF_SOCKET_OPTIONS = (26, 50, 51, 52)
# AF_UNIX, AF_INET, AF_INET6: what programs use. Not AF_NETLINK: its buffers are counted by no memory cgroup (40
# sockets held 319 MB beside a worker limited to 288 MB), and a sandbox has no interfaces to ask it about (glibc's
# getaddrinfo goes on without it)
ALLOWED_SOCKET_FAMILIES = (1, 2, 10)
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


def seccomp_program(machine=None):
    """The filter as classic BPF (``struct sock_filter`` records) for ``machine`` (this one's by default), or None
    where it does not apply (an architecture whose system call numbers are not in :data:`SYSCALL_NUMBERS`)."""
    machine = machine or os.uname().machine
    nr = SYSCALL_NUMBERS.get(machine)
    if nr is None:
        return None
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
    allow, deny, no_sys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    no_family = 0x00050000 | errno.EAFNOSUPPORT
    # (opcode, jump-if-true label or None, jump-if-false label or None, k), or a label's name where it stands
    code = []
    code.append((ld, None, None, 4))  # seccomp_data.arch
    code.append((jeq, None, "deny", AUDIT_ARCH[machine]))
    code.append((ld, None, None, 0))  # seccomp_data.nr
    if machine == "x86_64":
        code.append((jge, "deny", None, X32_SYSCALL_BIT))
    for number in sorted(nr[name] for name in DENIED_SYSCALLS if name in nr):  # aarch64 has no iopl, ioperm
        code.append((jeq, "deny", None, number))
    code.append((jeq, "prlimit", None, nr["prlimit64"]))
    for number in sorted(nr[name] for name in SELF_ONLY_SYSCALLS):
        code.append((jeq, "self", None, number))
    code.append((jeq, "priority", None, nr["setpriority"]))
    code.append((jeq, "io_priority", None, nr["ioprio_set"]))
    code.append((jeq, "no_sys", None, nr["clone3"]))
    code.append((jeq, "family", None, nr["socket"]))
    code.append((jeq, "family", None, nr["socketpair"]))
    code.append((jeq, "sockopt", None, nr["setsockopt"]))
    code.append((jeq, "prctl", None, nr["prctl"]))
    code.append((jeq, None, "allow", nr["clone"]))
    code.append((ld, None, None, 16))  # low 32 bits of clone's flags (args[0])
    code.append((jset, "deny", "allow", CLONE_NAMESPACE_FLAGS))
    code.append("family")
    code.append((ld, None, None, 16))  # the socket's family (args[0], an int)
    for family in ALLOWED_SOCKET_FAMILIES:
        code.append((jeq, "allow", None, family))
    code.append((ret, None, None, no_family))
    # args[n] starts at offset 16 + 8n; these arguments are ints, so their low 32 bits are what the kernel reads
    code += ["self", (ld, None, None, 16), (jeq, "allow", "deny", 0)]
    # prlimit64(pid, resource, new_limit, old_limit): any pid to read (new_limit NULL, both halves), the caller's own
    # to set (psutil and resource.prlimit(os.getpid()) read limits by pid)
    code += ["prlimit", (ld, None, None, 16), (jeq, "allow", None, 0), (ld, None, None, 32), (jeq, None, "deny", 0),
             (ld, None, None, 36), (jeq, "allow", "deny", 0)]
    # setpriority(which, who, prio): PRIO_PROCESS (0) of the caller (0) only, never a group or a user
    code += ["priority", (ld, None, None, 16), (jeq, None, "deny", 0), (ld, None, None, 24), (jeq, "allow", "deny", 0)]
    # ioprio_set(which, who, ioprio): IOPRIO_WHO_PROCESS (1) of the caller (0) only
    code += ["io_priority", (ld, None, None, 16), (jeq, None, "deny", 1), (ld, None, None, 24),
             (jeq, "allow", "deny", 0)]
    # setsockopt(fd, level, optname, ...): no BPF program on a socket (level SOL_SOCKET, one of those options)
    code += ["sockopt", (ld, None, None, 24), (jeq, None, "allow", SOL_SOCKET), (ld, None, None, 32)]
    code += [(jeq, "deny", None, option) for option in BPF_SOCKET_OPTIONS] + [(ret, None, None, allow)]
    code += ["prctl", (ld, None, None, 16), (jeq, "deny", "allow", PR_SET_SECCOMP)]
    code += ["allow", (ret, None, None, allow), "deny", (ret, None, None, deny)]
    code += ["no_sys", (ret, None, None, no_sys)]
    labels, instructions = {}, []
    for entry in code:
        if isinstance(entry, str):
            labels[entry] = len(instructions)
        else:
            instructions.append(entry)
    records = []
    for index, (opcode, if_true, if_false, k) in enumerate(instructions):
        jt = labels[if_true] - index - 1 if if_true else 0
        jf = labels[if_false] - index - 1 if if_false else 0
        if not (0 <= jt <= 255 and 0 <= jf <= 255):  # a jump is one byte: a longer list needs a trampoline
            raise ValueError("seccomp filter: jump %d/%d at instruction %d is past 255" % (jt, jf, index))
        records.append(struct.pack("=HBBI", opcode, jt, jf, k))
    return b"".join(records)


def seccomp_installer(program):
    """A function that applies the filter to the calling process and all it starts; everything it needs
    is built here, once, so that a forked child only makes the two ``prctl`` calls."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    pointer = ctypes.byref(fprog)
    libc = ctypes.CDLL(None, use_errno=True)

    def install():
        _keep = buffer  # noqa: F841  (the filter's memory lives as long as this function)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, which the kernel requires first
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.prctl(22, 2, pointer, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")

    return install


def parent_death_tie():
    """A function for a forked program: it gets SIGKILL when the supervisor that forked it dies. A supervisor without
    a namespace of its own (isolation "none") took nothing with it when its caller was killed, and its programs ran
    on with no wall limit. libc is found here, once: a forked child only calls it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def tie(parent):
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the supervisor died before the tie: nobody would stop this program
            os._exit(1)

    return tie


# ----- framing ------------------------------------------------------------------------------------
def read_exact(fd, size):
    """Small reads (headers, control objects): returns None on EOF."""
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_control(fd):
    header = read_exact(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_CONTROL_BYTES:
        raise ProtocolError("control object of %d bytes" % size)
    body = read_exact(fd, size)
    if body is None:
        raise ProtocolError("end of input inside a control object")
    control = json.loads(body.decode("utf-8"))
    if not isinstance(control, dict) or not isinstance(control.get("id"), str):
        raise ProtocolError("a control object without an id")
    return control


def write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def copy_fd(source, target, size):
    """Copy ``size`` bytes from ``source`` to ``target`` through the scrubbed buffer; the count copied."""
    copied = 0
    try:
        while copied < size:
            want = min(BUFFER_SIZE, size - copied)
            got = os.readv(source, [memoryview(BUFFER)[:want]])
            if got == 0:
                break
            write_all(target, memoryview(BUFFER)[:got])
            copied += got
    finally:
        scrub()
    return copied


def new_memfd(name):
    return os.memfd_create(name, os.MFD_CLOEXEC)


def send_reply(fd, reply, blobs):
    """The reply object, then each (memfd, size) blob's bytes; one write when it all fits the buffer."""
    data = json.dumps(reply).encode("utf-8")
    head = HEADER.pack(len(data)) + data
    total = len(head) + sum(size for _, size in blobs)
    if total <= BUFFER_SIZE:
        try:
            BUFFER[: len(head)] = head
            at = len(head)
            for blob_fd, size in blobs:
                end = at + size
                os.lseek(blob_fd, 0, os.SEEK_SET)
                while at < end:
                    got = os.readv(blob_fd, [memoryview(BUFFER)[at:end]])
                    if got == 0:
                        raise ProtocolError("a reply blob was shorter than announced")
                    at += got
            write_all(fd, memoryview(BUFFER)[:total])
        finally:
            scrub()
        return
    write_all(fd, head)
    for blob_fd, size in blobs:
        os.lseek(blob_fd, 0, os.SEEK_SET)
        if copy_fd(blob_fd, fd, size) != size:
            raise ProtocolError("a reply blob was shorter than announced")


# ----- limits -------------------------------------------------------------------------------------
def clean_limits(raw):
    """Finite positive numbers under the hard ceilings; anything else falls back to a default or None."""
    limits = {}
    raw = raw if isinstance(raw, dict) else {}
    for name, ceiling in HARD_LIMITS.items():
        value = raw.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            value = DEFAULT_LIMITS.get(name)
        if value is not None:
            value = min(value, ceiling)
            if not name.endswith("_s"):
                value = max(1, int(math.ceil(value)))
        limits[name] = value
    return limits


def set_rlimits(limits):
    def setlimit(which, value):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass

    if limits.get("cpu_s"):
        cpu = max(1, int(math.ceil(limits["cpu_s"])))
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        except (ValueError, OSError):
            pass
    if limits.get("memory_mb"):
        setlimit(resource.RLIMIT_AS, int(limits["memory_mb"]) * 1024 * 1024)
    if limits.get("processes"):
        setlimit(resource.RLIMIT_NPROC, int(limits["processes"]))
    if limits.get("file_size_mb"):
        setlimit(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * 1024 * 1024)
    if limits.get("open_files"):
        setlimit(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    setlimit(resource.RLIMIT_CORE, 0)
    # POSIX message queues cannot be listed (and so not cleaned) from inside: allow none.
    setlimit(resource.RLIMIT_MSGQUEUE, 0)


# Settings of the worker's PID and IPC namespaces, which outlive every run. bubblewrap mounts /proc/sys read-only
# (the program's uid owns these namespaces: a run set pid_max to 301, and every later run of the worker could start
# no process, an attacker's pass); the supervisor also compares them after each run.
NAMESPACE_SYSCTLS = (
    "kernel/pid_max", "kernel/shmmax", "kernel/shmall", "kernel/shmmni", "kernel/shm_rmid_forced", "kernel/msgmax",
    "kernel/msgmnb", "kernel/msgmni", "kernel/sem", "fs/mqueue/queues_max", "fs/mqueue/msg_max",
    "fs/mqueue/msgsize_max", "fs/mqueue/msg_default", "fs/mqueue/msgsize_default",
)


_SYSCTL_FDS = {}  # the namespace sysctls own_settings reads: name -> an open fd


def own_settings():
    """What of the worker a run must not change, as ``{name: value}``: the supervisor's resource limits,
    scheduling policy and priority, nice, CPUs and (on x86_64 and aarch64) I/O priority, which each later run (a fork of it)
    inherits, and the sysctls of the namespaces every run shares (:data:`NAMESPACE_SYSCTLS`)."""
    import ctypes

    def sysctl(name):
        fd = _SYSCTL_FDS.get(name)
        if fd is None:  # kept open (close-on-exec, and closed in every run's child): a read is one pread
            fd = _SYSCTL_FDS[name] = os.open("/proc/sys/" + name, os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(fd, 256, 0)

    readers = [(name, lambda which=getattr(resource, name): resource.getrlimit(which))
               for name in sorted(dir(resource)) if name.startswith("RLIMIT_")]
    readers += [
        ("scheduling policy", lambda: os.sched_getscheduler(0)),
        ("scheduling priority", lambda: os.sched_getparam(0).sched_priority),
        ("nice", lambda: os.getpriority(os.PRIO_PROCESS, 0)),
        ("CPUs", lambda: sorted(os.sched_getaffinity(0))),
    ]
    ioprio_get = SYSCALL_NUMBERS.get(os.uname().machine, {}).get("ioprio_get")
    if ioprio_get is not None:
        readers.append(("I/O priority", lambda: ctypes.CDLL(None, use_errno=True).syscall(ioprio_get, 1, 0)))
    readers += [(name, lambda name=name: sysctl(name)) for name in NAMESPACE_SYSCTLS]
    found = {}
    for name, read in readers:
        try:
            found[name] = read()
        except (OSError, ValueError):
            pass
    return found


def sockets_left():
    """The TCP, UDP and raw sockets left in the worker's network namespace, one line each. ``/proc/net/sockstat``
    counts this namespace's sockets at once; the tables, which walk the host's whole TCP hash (7 ms a run), are read
    only when it counts some. Every one counts, a TIME_WAIT on a port the kernel might have chosen too: a run that
    closed first on each of the 28,232 ports of the ephemeral range left the next runs no TCP connection for a
    minute (an attacker's pass)."""
    counts = []
    for name in ("sockstat", "sockstat6"):
        try:
            with open("/proc/net/" + name) as handle:
                for line in handle:
                    words = line.split()
                    counts += [int(words[i + 1]) for i, word in enumerate(words[:-1]) if word in ("inuse", "tw")]
        except (OSError, ValueError):
            counts.append(1)  # cannot tell: look at the tables
    if not any(counts):
        return
    for name in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        try:
            with open("/proc/net/" + name) as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            yield name + ": " + line.strip()


def changed_settings(before):
    """The names of :func:`own_settings` that differ from ``before``."""
    now = own_settings()
    return sorted(name for name in set(before) | set(now) if before.get(name) != now.get(name))


# ----- paths that follow no link --------------------------------------------------------------------
def path_parts(name):
    """The components of a relative path inside the work folder, or None if it is not one."""
    if not isinstance(name, str) or not name or "\0" in name or name.startswith("/"):
        return None
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return parts


def open_beneath(root_fd, parts, flags, mode=0o600, make_dirs=False):
    """Open ``parts`` below the directory ``root_fd`` without following any link on the way."""
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            if make_dirs:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = child
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


class WipeFailed(Exception):
    pass


AT_REMOVEDIR = 0x200
DT_DIR, DT_UNKNOWN = 4, 0
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
DIRENT = struct.Struct("=QqHB")  # d_ino, d_off, d_reclen, d_type; d_name follows, NUL-terminated


class _Raw:
    """libc's *at calls on names that stay in the scrubbed buffer: directory entries are read with
    getdents64 into BUFFER and passed back to the kernel by address, so no file name of a run ever
    becomes an object in our memory."""

    instance = None

    def __init__(self):
        import ctypes

        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.view = (ctypes.c_char * BUFFER_SIZE).from_buffer(BUFFER)
        self.base = ctypes.addressof(self.view)
        getdents = getattr(self.libc, "getdents64", None)
        if getdents is not None:
            self.getdents = lambda fd: getdents(fd, ctypes.c_void_p(self.base), BUFFER_SIZE)
        else:
            nr = SYSCALL_NUMBERS[os.uname().machine]["getdents64"]
            self.getdents = lambda fd: self.libc.syscall(nr, fd, ctypes.c_void_p(self.base), BUFFER_SIZE)

    @classmethod
    def get(cls):
        if cls.instance is None:
            cls.instance = cls()
        return cls.instance

    def errno(self):
        return self.ctypes.get_errno()


def empty_directory(path, deadline, budget):
    """Remove everything inside ``path`` (not ``path`` itself), iteratively: one directory fd at a time,
    going down by name and back up by "..", never following a link, so no depth of tree can exhaust
    a stack, a path length or the open-file limit; names stay in the scrubbed buffer. Raises
    WipeFailed if it cannot finish within ``deadline`` and ``budget`` operations."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        raise WipeFailed("%s is not a directory" % path)
    if info.st_mode & 0o700 != 0o700:
        os.chmod(path, stat.S_IMODE(info.st_mode) | 0o700)
    raw = _Raw.get()
    libc, c_void_p = raw.libc, raw.ctypes.c_void_p
    fd = os.open(path, DIRECTORY_FLAGS)
    depth = 0
    operations = 0
    try:
        while True:
            operations += 1
            if operations > budget or time.monotonic() > deadline:
                raise WipeFailed("more than the cleanup budget under %s" % path)
            os.lseek(fd, 0, os.SEEK_SET)
            size = raw.getdents(fd)
            if size < 0:
                raise WipeFailed("cannot list a folder under %s: %s" % (path, os.strerror(raw.errno())))
            progress = descended = False
            offset = 0
            while offset < size:
                _, _, length, kind = DIRENT.unpack_from(BUFFER, offset)
                at = offset + DIRENT.size
                offset += length
                if BUFFER[at] == 46 and (BUFFER[at + 1] == 0 or (BUFFER[at + 1] == 46 and BUFFER[at + 2] == 0)):
                    continue  # "." and ".."
                operations += 1
                name = c_void_p(raw.base + at)
                if kind != DT_DIR:
                    if libc.unlinkat(fd, name, 0) == 0:
                        progress = True
                        continue
                    code = raw.errno()
                    if code == errno.ENOENT:
                        continue
                    if code != errno.EISDIR:
                        raise WipeFailed("cannot remove an entry under %s: %s" % (path, os.strerror(code)))
                if libc.unlinkat(fd, name, AT_REMOVEDIR) == 0:
                    progress = True
                    continue
                code = raw.errno()
                if code not in (errno.ENOTEMPTY, errno.EEXIST, errno.EACCES, errno.EPERM):
                    raise WipeFailed("cannot remove a folder under %s: %s" % (path, os.strerror(code)))
                # Not empty (or not ours to list yet): make it ours to list, go down into it. It is a
                # directory (d_type, or EISDIR just now) and nothing runs any more: no link to follow.
                libc.fchmodat(fd, name, 0o700, 0)
                child = libc.openat(fd, name, DIRECTORY_FLAGS, 0)
                if child < 0:
                    raise WipeFailed("cannot open a folder under %s: %s" % (path, os.strerror(raw.errno())))
                os.close(fd)
                fd = child
                depth += 1
                descended = True
                break
            if descended or progress:
                continue
            if offset < size or size == BUFFER_SIZE:  # pragma: no cover - entries left that we could not touch
                raise WipeFailed("entries under %s could not be removed" % path)
            if depth == 0:
                return
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = parent
            depth -= 1
    except OSError as exc:
        raise WipeFailed("cannot empty %s: %s" % (path, exc.strerror))
    finally:
        os.close(fd)
        scrub()


FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602  # chattr's flags (an int; the ioctl names a long)


def inode_flags(path, value=None):
    """The ``chattr`` flags of the folder ``path`` (set to ``value`` first when given), or None where the file
    system has none."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if value is not None:
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", value))
        return struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(4)))[0]
    except OSError as exc:
        if exc.errno in (errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL) and value is None:
            return None
        raise
    finally:
        os.close(fd)


def root_states(paths):
    """``{path: (mode, atime_ns, mtime_ns, flags)}`` of the roots of the sandbox's writable area (tmpfs mount
    points)."""
    states = {}
    for path in paths:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        states[path] = (stat.S_IMODE(info.st_mode), info.st_atime_ns, info.st_mtime_ns, inode_flags(path))
    return states


# What the owner of a folder may set on it, and so a program on the roots it owns: its own attributes and ACLs (a
# default ACL would be inherited by the next work folder). security.* (SELinux labels) is the system's, and only a
# process with CAP_SYS_ADMIN could remove it: it is left alone.
PROGRAM_XATTRS = ("user.", "system.posix_acl_access", "system.posix_acl_default")


def restore_root(path, mode, flags=None):
    """Give an emptied root of the sandbox's writable area (which the program may own) its first ``mode`` and
    ``chattr`` flags, and none of the attributes a program can set: a run had left data in a ``user.*`` attribute,
    and a setgid bit and a no-atime flag that every new work folder inherited, for the next run to meet. Raises
    OSError where it cannot (the worker retires)."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise WipeFailed("%s is not a directory" % path)
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)
    if flags is not None and inode_flags(path) != flags:
        inode_flags(path, flags)
    for name in os.listxattr(path, follow_symlinks=False):
        if name.startswith(PROGRAM_XATTRS):
            os.removexattr(path, name, follow_symlinks=False)


def sysv_ipc_objects():
    """The ids of the System V shared memory segments, message queues and semaphores that exist."""
    found = []
    for table in ("shm", "msg", "sem"):
        try:
            with open("/proc/sysvipc/" + table) as handle:
                found.append([line.split()[1] for line in handle.readlines()[1:] if line.strip()])
        except (OSError, IndexError):
            found.append([])
    return found


def remove_sysv_ipc():
    """Remove the System V shared memory segments, message queues and semaphores a run created:
    they live in the sandbox's IPC namespace, which outlives one run in a warm worker."""
    pending = sysv_ipc_objects()
    if not any(pending):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for function, ids in zip(("shmctl", "msgctl", "semctl"), pending):
        for ipc_id in ids:
            if function == "semctl":
                libc.semctl(int(ipc_id), 0, 0)  # IPC_RMID = 0
            else:
                getattr(libc, function)(int(ipc_id), 0, None)


# ----- the supervisor -------------------------------------------------------------------------------
class Supervisor:
    def __init__(self, root, work, make_dirs, wipe_dirs, run_as, pid1, seccomp=None):
        self.seccomp = seccomp_installer(seccomp) if seccomp is not None else None  # for every program
        self.tie_to_us = parent_death_tie()
        self.root = root  # the writable sandbox area, emptied after every run
        self.work = work  # the program's working folder, inside root, made anew for every run
        self.make_dirs = make_dirs  # more folders inside root made anew for every run (/tmp's target)
        self.wipe_dirs = [d for d in wipe_dirs if d != root]  # more folders emptied (/dev/shm)
        self.run_as = run_as  # (uid, gid) the program runs as, or None for our own
        self.pid1 = pid1  # True when we are PID 1 of a private PID namespace
        self.settings = own_settings()  # every run starts with these: a run that changes them retires us
        # the network namespace is the worker's own, so a socket left in it is the run's (not on isolation "none")
        self.own_network = pid1 or run_as is not None
        self.root_states = root_states([self.root] + self.wipe_dirs)  # restored after every run

    # ----- one run ---------------------------------------------------------------------------
    def run(self, control):
        """Read the payload, run it; (reply, blobs, retire). Blobs are memfds the caller closes."""
        limits = clean_limits(control.get("limits"))
        size = control.get("payload_bytes")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_PAYLOAD_BYTES:
            raise ProtocolError("payload_bytes must be a byte count, got %r" % (size,))
        payload_fd = new_memfd("payload")
        try:
            if copy_fd(0, payload_fd, size) != size:
                raise ProtocolError("end of input inside a payload")
            os.lseek(payload_fd, 0, os.SEEK_SET)
            return self._run(control, limits, payload_fd)
        finally:
            os.close(payload_fd)

    def _run(self, control, limits, payload_fd):
        started = time.monotonic()
        fetch_count = control.get("fetch_count") or 0
        out_mem, err_mem, files_mem = new_memfd("stdout"), new_memfd("stderr"), new_memfd("files")
        fetch_mem = new_memfd("fetch")
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child never returns
            self._child(limits, payload_fd, out_w, err_w, ready_w, fetch_mem, supervisor)
        for fd in (out_w, err_w, ready_w):
            os.close(fd)
        try:
            reply, sizes = self._watch(pid, limits, out_r, err_r, ready_r, out_mem, err_mem, started)
        finally:
            for fd in (out_r, err_r, ready_r):
                os.close(fd)
        try:
            found, clean, why = self._after_run(fetch_count, limits["output_bytes"], files_mem, fetch_mem)
        finally:
            os.close(fetch_mem)
        reply["id"] = control["id"]
        reply["stdout_bytes"], reply["stderr_bytes"] = sizes
        reply["files"] = found
        if clean:
            why = self._left_in_the_worker()
            clean = not why
        retire = not clean
        if retire:
            reply["retire"] = True
            reply["retire_reason"] = why
        return reply, [(out_mem, sizes[0]), (err_mem, sizes[1]), (files_mem, sum(n for _, n in found))], retire

    def _child(self, limits, payload_fd, out_w, err_w, ready_w, fetch_mem, supervisor):
        try:
            os.setsid()
            for sig in signal.valid_signals():
                if sig not in (signal.SIGKILL, signal.SIGSTOP):
                    try:
                        signal.signal(sig, signal.SIG_DFL)
                    except (OSError, ValueError):
                        pass
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            prefer_as_oom_victim()
            if self.run_as is not None:
                os.setgroups([])
                os.setgid(self.run_as[1])
                os.setuid(self.run_as[0])
            self.tie_to_us(supervisor)  # after the uid change, which clears the tie
            os.chdir(self.work)
            chunks = []
            while True:
                chunk = os.read(payload_fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            payload = json.loads(b"".join(chunks).decode("utf-8"))
            del chunks
            write_payload_files(self.work, payload)
            # The names to fetch after the run, for the helper that fetches them (never for us).
            write_all(fetch_mem, json.dumps(payload.get("fetch_files") or []).encode("utf-8"))
            stdin_fd = os.memfd_create("stdin", os.MFD_ALLOW_SEALING)
            write_all(stdin_fd, decode_b64(payload.get("stdin_b64") or ""))
            # sealed: a program could otherwise store up to file_size_mb in it, outside RLIMIT_AS
            fcntl.fcntl(stdin_fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SEAL | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK)
            os.lseek(stdin_fd, 0, os.SEEK_SET)
            os.dup2(stdin_fd, 0)
            set_rlimits(limits)
            if self.seccomp is not None:
                # before READY: a filter the kernel refused (its BPF budget spent) fails the run as the sandbox's
                # error, never as the program's
                self.seccomp()
            os.write(ready_w, READY)
            os.closerange(3, 1 << 16)
            env = {
                "PATH": DEFAULT_PATH,
                "HOME": self.work,
                "TMPDIR": "/tmp",
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONIOENCODING": "utf-8",
            }
            if payload.get("command") is not None:
                command = [str(part) for part in payload["command"]]
                try:
                    os.execvpe(command[0], command, env)
                except OSError as exc:
                    os.write(2, ("cannot run %r: %s\n" % (command[0], exc.strerror)).encode())
                    os._exit(127)
            os._exit(run_python_in_child(payload, env, self.work))
        except BaseException as exc:  # nothing may escape a forked child
            try:
                os.write(2, ("sandbox child failed: %s\n" % (exc,)).encode("utf-8", "replace"))
            finally:
                os._exit(126)

    def _watch(self, pid, limits, out_r, err_r, ready_r, out_mem, err_mem, started):
        deadline = started + limits["wall_s"]
        cap = limits["output_bytes"]
        sinks = {out_r: out_mem, err_r: err_mem}
        sizes = {out_r: 0, err_r: 0}
        truncated = {out_r: False, err_r: False}
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        poller = select.poll()
        for fd in (out_r, err_r, ready_r) + ((pidfd,) if pidfd is not None else ()):
            poller.register(fd, select.POLLIN)
        open_fds = {out_r, err_r}
        prepared = False
        reason = None
        waited = None
        while True:
            done_pid, status, usage = os.wait4(pid, os.WNOHANG)
            if done_pid == pid:
                waited = (status, usage)
                break
            now = time.monotonic()
            if now >= deadline:
                reason = "timeout"
                break
            timeout_ms = int(math.ceil((deadline - now) * 1000))
            if pidfd is None:  # nothing wakes us when the child exits: poll
                timeout_ms = min(timeout_ms, 10)
            try:
                events = poller.poll(timeout_ms)
            except InterruptedError:
                continue
            for fd, _ in events:
                if fd == ready_r:
                    if os.read(ready_r, 1) == READY:
                        prepared = True
                    poller.unregister(ready_r)
                elif fd in open_fds:
                    if not self._pump(fd, sinks, sizes, truncated, cap):
                        open_fds.discard(fd)
                        poller.unregister(fd)
            if truncated[out_r] or truncated[err_r]:
                reason = "output_limit"
                break
        if waited is None:  # still running: a limit was hit
            kill_group(pid)
            _, status, usage = os.wait4(pid, 0)
            waited = (status, usage)
        wall_time = time.monotonic() - started
        if not prepared:  # the ready byte may still sit in the pipe
            try:
                prepared = os.read(ready_r, 1) == READY
            except OSError:
                pass
        self._kill_leftovers(pid)
        # Drain what is still buffered; every writer is dead now, so EOF comes at once.
        drain_deadline = time.monotonic() + 1.0
        while open_fds and time.monotonic() < drain_deadline:
            for fd, _ in poller.poll(100):
                if fd in open_fds and not self._pump(fd, sinks, sizes, truncated, cap):
                    open_fds.discard(fd)
                    poller.unregister(fd)
        if pidfd is not None:
            os.close(pidfd)
        if reason is None and (truncated[out_r] or truncated[err_r]):
            # The program ended before its pipe was read, and the cap was only met while draining it.
            reason = "output_limit"
        status, usage = waited
        reply = {
            "stdout_truncated": truncated[out_r],
            "stderr_truncated": truncated[err_r],
            "wall_time_s": round(wall_time, 6),
            "cpu_time_s": round(usage.ru_utime + usage.ru_stime, 6),
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        }
        if not prepared and reason != "timeout":
            reply["status"], reply["message"] = "sandbox_error", "could not prepare the run"
        else:
            reply["status"], reply["message"] = classify(reply, reason, limits)
        return reply, (sizes[out_r], sizes[err_r])

    @staticmethod
    def _pump(fd, sinks, sizes, truncated, cap):
        """Move what ``fd`` has into its memfd (up to the cap); False at EOF."""
        try:
            got = os.readv(fd, [BUFFER])
        except OSError:
            got = 0
        try:
            if not got:
                return False
            room = cap - sizes[fd]
            keep = min(got, max(0, room))
            if keep:
                write_all(sinks[fd], memoryview(BUFFER)[:keep])
                sizes[fd] += keep
            if got > keep:
                truncated[fd] = True
            return True
        finally:
            scrub()

    # ----- after a run ---------------------------------------------------------------------------
    def _after_run(self, fetch_count, cap, files_mem, fetch_mem):
        """Read back the fetched files (in a helper process, as the program's user where there is
        one, so that no name or content of them enters our memory and root's rights are never used
        on them), then empty the sandbox and make the work folder anew.
        Returns (found [(index, size)], clean, why)."""
        found = []
        if fetch_count and fetch_mem is not None:
            found = self._fetch_in_helper(cap, files_mem, fetch_mem)
        try:
            self.reset()
            return found, True, ""
        except (WipeFailed, OSError) as exc:
            return found, False, str(exc)

    def _fetch_in_helper(self, cap, files_mem, fetch_mem):
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            try:
                if self.run_as is not None:
                    os.setgroups([])
                    os.setgid(self.run_as[1])
                    os.setuid(self.run_as[0])
                os.lseek(fetch_mem, 0, os.SEEK_SET)
                chunks = []
                while True:
                    chunk = os.read(fetch_mem, 1 << 16)
                    if not chunk:
                        break
                    chunks.append(chunk)
                names = json.loads(b"".join(chunks) or b"[]")
                write_all(write_fd, json.dumps(self._fetch(names[:MAX_FETCH_FILES], cap, files_mem)).encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        chunks = []
        while True:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(read_fd)
        os.waitpid(pid, 0)
        try:
            return [(int(index), int(size)) for index, size in json.loads(b"".join(chunks) or b"[]")]
        except (ValueError, TypeError):
            return []

    def _fetch(self, names, cap, files_mem):
        """Copy the requested regular files of the work folder into ``files_mem``; no link is followed.
        Returns [(index in names, size)]."""
        found = []
        budget = cap * FETCH_TOTAL_FACTOR
        try:
            root_fd = os.open(self.work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return found
        try:
            for index, name in enumerate(names):
                parts = path_parts(name)
                if budget <= 0 or parts is None:
                    continue
                try:
                    fd = open_beneath(root_fd, parts, os.O_RDONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        size = copy_fd(fd, files_mem, min(cap, budget))
                        budget -= size
                        found.append((index, size))
                finally:
                    os.close(fd)
        finally:
            os.close(root_fd)
        return found

    def reset(self):
        """Empty the sandbox's writable area and make the work folder (and make_dirs) anew, owned by
        the program's user. Runs in the supervisor itself: nothing it does follows a link, and no
        name of the run's files becomes an object in its memory (see ``empty_directory``)."""
        deadline = time.monotonic() + WIPE_BUDGET_S
        for directory in [self.root] + self.wipe_dirs:
            empty_directory(directory, deadline, WIPE_BUDGET_ENTRIES)
            if directory in self.root_states:
                mode, _, _, flags = self.root_states[directory]
                restore_root(directory, mode, flags)
        for directory in [self.work] + self.make_dirs:
            os.mkdir(directory, 0o700)
            if self.run_as is not None and os.geteuid() != self.run_as[0]:
                os.chown(directory, self.run_as[0], self.run_as[1], follow_symlinks=False)
        for directory, (_, atime_ns, mtime_ns, _) in self.root_states.items():
            # last, after the folders made in them: a run set a root's atime to carry 64 bits to the next run
            os.utime(directory, ns=(atime_ns, mtime_ns), follow_symlinks=False)
        if any(sysv_ipc_objects()):
            # Only their owner may remove them where we lack CAP_SYS_ADMIN (docker).
            if self.run_as is not None and os.geteuid() != self.run_as[0]:
                self._as_run_user(remove_sysv_ipc)
            remove_sysv_ipc()
            if any(sysv_ipc_objects()):
                raise WipeFailed("System V IPC objects of the run could not be removed")

    def _left_in_the_worker(self):
        """Why the next run could not start as this one did, or "": what the run changed of the worker's settings
        (every later run, a fork of us, would inherit them; the seccomp filter keeps programs from it), processes
        that outlived the killing, or sockets left in the worker's network namespace (a port in TIME_WAIT refused
        a later run's bind for a minute)."""
        changed = changed_settings(self.settings)
        if changed:
            return "the run changed the worker's " + ", ".join(changed)
        if self._leftovers():
            return "processes of the run outlived it"
        if self.own_network and any(sockets_left()):
            return "the run left sockets in the worker's network namespace"
        return ""

    def _kill_leftovers(self, pid):
        """Kill every process the run started, also those that left its process group, and do not
        answer before they are all gone (and reaped)."""
        kill_group(pid)
        give_up = time.monotonic() + 10.0
        while True:
            if self.pid1 and self.run_as is None:
                # PID 1 of a private namespace: kill(-1) reaches everything in it except ourselves.
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
            elif self.run_as is not None:
                # The program ran as its own uid: a helper with that uid kills all its processes.
                self._as_run_user(lambda: os.kill(-1, signal.SIGKILL))
            else:
                # No namespace of our own (isolation "none"): we are a child subreaper, so whatever
                # the run daemonised was re-parented to us; kill our children until none is left.
                kill_children()
            reap_all(patience_s=0.5)
            if not self._leftovers() or time.monotonic() > give_up:
                return
            time.sleep(0.005)

    def _leftovers(self):
        """Processes of the run still present (zombies included), where we can tell."""
        if self.pid1 and self.run_as is None:
            me = str(os.getpid())
            return [name for name in os.listdir("/proc") if name.isdigit() and name != me]
        if self.run_as is not None:
            found = []
            for name in os.listdir("/proc"):
                if name.isdigit():
                    try:
                        if os.stat("/proc/" + name).st_uid == self.run_as[0]:
                            found.append(name)
                    except OSError:
                        pass
            return found
        return []

    def _as_run_user(self, action):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(self.run_as[1])
                os.setuid(self.run_as[0])
                action()
            except BaseException:
                os._exit(1)
            os._exit(0)
        os.waitpid(pid, 0)


def decode_b64(text):
    import base64

    return base64.b64decode(text)


def write_payload_files(work, payload):
    """In the child, as the program's user: the request's files (and main.py) into the fresh work folder."""
    files = dict(payload.get("files") or {})
    if payload.get("code") is not None:
        files.setdefault("main.py", None)
    root_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name, content_b64 in files.items():
            parts = path_parts(name)
            if parts is None:
                raise OSError(errno.EINVAL, "file %r would land outside the work folder" % (name,))
            data = payload["code"].encode("utf-8") if content_b64 is None else decode_b64(content_b64)
            fd = open_beneath(root_fd, parts, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, make_dirs=True)
            try:
                write_all(fd, data)
            except OSError as exc:
                raise OSError(exc.errno, "writing %r: %s" % (name, exc.strerror))
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)


def run_python_in_child(payload, env, work):
    """Run the request's Python source in this (forked) process as if it were ``python main.py``."""
    import atexit
    import io
    import random
    import types

    atexit._clear()  # the supervisor's own exit handlers are not the program's
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets them at start-up
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    random.seed()  # a forked child would otherwise repeat the supervisor's random sequence
    path = os.path.join(work, "main.py")
    sys.argv = [path] + [str(arg) for arg in payload.get("argv") or []]
    sys.path.insert(0, work)
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.stdin = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8", errors="replace"
    )
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8", errors="backslashreplace"
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    source = payload["code"]
    payload.clear()
    exit_code = 0
    try:
        code = compile(source, path, "exec")
        del source
        exec(code, module.__dict__)
    except SystemExit as exc:
        exit_code = exit_code_of(exc)
    except BaseException as exc:
        import traceback

        try:  # leave out our own frame: the traceback starts in the program, as under `python main.py`
            tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
            traceback.print_exception(type(exc), exc, tb)
        except BaseException:
            pass
        exit_code = 1
    try:
        import threading

        threading._shutdown()  # wait for non-daemon threads, as the interpreter does at exit
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            exit_code = exit_code or 120
    return exit_code


def exit_code_of(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        sys.stderr.write(str(exc.code) + "\n")
    except BaseException:
        pass
    return 1


def classify(result, reason, limits):
    """Status from how the run ended; the host refines ``error`` from stderr (memory, file size)."""
    if reason == "timeout":
        return "timeout", "wall-clock limit of %ss reached" % limits.get("wall_s")
    if reason == "output_limit":
        return "output_limit", "output went past %s bytes" % limits.get("output_bytes")
    sig = result["signal"]
    cpu_limit = limits.get("cpu_s")
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_limit and result["cpu_time_s"] >= cpu_limit):
        return "timeout", "CPU-time limit of %ss reached" % cpu_limit
    if sig == signal.SIGXFSZ:
        return "output_limit", "a written file went past %s MB" % limits.get("file_size_mb")
    if result["exit_code"] == 0:
        return "ok", ""
    if sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return "killed", "killed by signal %s" % name
    return "error", "exited with code %s" % result["exit_code"]


def prefer_as_oom_victim():
    """The kernel's first pick when the worker's memory cgroup is full: the program, not its supervisor (raising one's
    own score needs no privilege). Under bubblewrap the process is not dumpable, which makes /proc/self root's: it is
    made dumpable for the write and not dumpable again (nothing else runs in the worker meanwhile)."""

    def write():
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"1000")
        finally:
            os.close(fd)

    try:
        write()
    except PermissionError:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        if prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0 and prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0:
            try:
                write()
            except OSError:
                pass
            finally:
                prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except OSError:
        pass


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def kill_children(rounds=20):
    me = str(os.getpid())
    for _ in range(rounds):
        children = []
        try:
            for task in os.listdir("/proc/%s/task" % me):
                with open("/proc/%s/task/%s/children" % (me, task)) as handle:
                    children += [int(pid) for pid in handle.read().split()]
        except OSError:
            return
        if not children:
            return
        for pid in children:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        reap_all(patience_s=0.5)


def reap_all(patience_s=2.0):
    give_up = time.monotonic() + patience_s
    while time.monotonic() < give_up:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            # Children still exiting (SIGKILL was sent): wait briefly, they cannot resist it.
            time.sleep(0.001)
            continue


SYNCHRONOUS_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGSYS", "SIGTRAP")


def ignore_signals():
    """A program may signal us (same uid under bubblewrap): every asynchronous signal is ignored, so
    nothing it sends (SIGINT, SIGTERM, SIGHUP, SIGUSR1, ...) can stop or confuse the supervisor.
    SIGCHLD keeps its default so that children can be waited for; the signals of a fault keep
    theirs (as PID 1 of the namespace, or under another uid, no program can send them to us)."""
    keep = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}
    keep |= {getattr(signal, name) for name in SYNCHRONOUS_SIGNALS if hasattr(signal, name)}
    for sig in signal.valid_signals():
        if sig in keep:
            continue
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError):
            pass


# ----- the unshare fallback's root ------------------------------------------------------------------
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MNT_DETACH = 2


def unescape_mount_path(field):
    """A mount point as /proc/self/mountinfo writes it: space, tab, newline and backslash are
    octal escapes (``\\040`` ...)."""
    out = bytearray()
    index = 0
    while index < len(field):
        if field[index : index + 1] == b"\\" and len(field) >= index + 4 and field[index + 1 : index + 4].isdigit():
            out.append(int(field[index + 1 : index + 4], 8) & 0xFF)
            index += 4
        else:
            out += field[index : index + 1]
            index += 1
    return os.fsdecode(bytes(out))


def mount_points():
    with open("/proc/self/mountinfo", "rb") as handle:
        return [unescape_mount_path(line.split(b" ")[4]) for line in handle.read().splitlines() if line]


class RootBuilder:
    """Builds a minimal root (as bubblewrap does) in the unshare fallback's private mount namespace:
    a tmpfs holding read-only binds of /usr and the /bin, /lib links, a few /etc files, a minimal
    read-only /dev, a fresh /proc, and a size-limited tmpfs /sandbox owned by the program's user
    (/tmp and /dev/shm point into it); then pivots into it. Nothing else of the host, and so no host
    unix socket file, is reachable; abstract sockets stay behind in the host's network namespace."""

    def __init__(self, spec):
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)
        self.ctypes = ctypes
        self.spec = spec
        self.new = spec.get("mount_at", "/tmp")

    def mount(self, source, target, fstype, flags, data=None):
        encode = lambda text: None if text is None else os.fsencode(text)  # noqa: E731
        if self.libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
            code = self.ctypes.get_errno()
            raise OSError(code, "mount %s on %s: %s" % (source or fstype, target, os.strerror(code)))

    def read_only(self, target, recursive=True, nodev=True):
        """Make ``target`` (and every mount below it) read-only and nosuid; check each one."""
        prefix = target.rstrip("/") + "/"
        points = [p for p in mount_points() if p == target or (recursive and p.startswith(prefix))]
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | (MS_NODEV if nodev else 0)
        for point in points:
            self.mount(None, point, None, flags)
        for point in points:
            try:
                if not os.statvfs(point).f_flag & os.ST_RDONLY:
                    raise OSError(errno.EROFS, "%s stayed writable" % point)
            except FileNotFoundError:  # hidden below a later mount: not reachable
                pass

    def bind(self, source, target, recursive=True):
        if os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.exists(target):
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        self.mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
        self.read_only(target)

    def build(self):
        spec, new = self.spec, self.new
        uid, gid = spec["run_as"]
        self.mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=755")
        for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = "/" + top
            if os.path.islink(host):
                os.symlink(os.readlink(host), new + host)
            elif os.path.isdir(host):
                self.bind(host, new + host)
        os.mkdir(new + "/etc", 0o755)
        for name in spec.get("etc_files", []):
            host = "/etc/" + name
            if os.path.exists(host):
                self.bind(host, new + host, recursive=False)
        for extra in spec.get("ro_binds", []):
            if os.path.exists(extra):
                self.bind(extra, new + extra)
        os.mkdir(new + "/proc", 0o555)
        self.mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        os.mkdir(new + "/dev", 0o755)
        self.mount("tmpfs", new + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
        for device in ("null", "zero", "full", "random", "urandom"):
            if os.path.exists("/dev/" + device):
                os.close(os.open(new + "/dev/" + device, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666))
                self.mount("/dev/" + device, new + "/dev/" + device, None, MS_BIND)
        for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2"), ("shm", "/sandbox/shm")):
            os.symlink(target, new + "/dev/" + link)
        self.read_only(new + "/dev", nodev=False)
        os.mkdir(new + "/sandbox", 0o755)
        self.mount(
            "tmpfs", new + "/sandbox", "tmpfs", MS_NOSUID | MS_NODEV,
            "size=%dm,mode=700,uid=%d,gid=%d" % (int(spec["size_mb"]), uid, gid),
        )
        os.symlink("/sandbox/tmp", new + "/tmp")
        os.mkdir(new + "/.old-root", 0o700)
        nr = SYSCALL_NUMBERS.get(os.uname().machine, {}).get("pivot_root")
        if nr is None:
            raise OSError(errno.ENOSYS, "pivot_root: unknown system call number on %s" % os.uname().machine)
        if self.libc.syscall(nr, os.fsencode(new), os.fsencode(new + "/.old-root")) != 0:
            code = self.ctypes.get_errno()
            raise OSError(code, "pivot_root: %s" % os.strerror(code))
        os.chdir("/")
        if self.libc.umount2(b"/.old-root", MNT_DETACH) != 0:
            code = self.ctypes.get_errno()
            raise OSError(code, "umount of the old root: %s" % os.strerror(code))
        os.rmdir("/.old-root")
        self.read_only("/", recursive=False)  # the mounts below it were made read-only one by one


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(prog="sandbox-supervisor")
    parser.add_argument("mode", choices=["serve", "once"])
    parser.add_argument("--root", required=True, help="the writable sandbox area, emptied after each run")
    parser.add_argument("--work", required=True, help="the program's working folder, inside --root")
    parser.add_argument("--dir", action="append", default=[], help="more folders inside --root, made anew per run")
    parser.add_argument("--wipe", action="append", default=[], help="more folders to empty after each run")
    parser.add_argument("--run-as", default=None, help="UID:GID the program runs as")
    parser.add_argument("--preload", default="", help="comma-separated modules to import once, up front")
    parser.add_argument("--no-seccomp", action="store_true", help="run programs without the seccomp filter")
    parser.add_argument("--setup-root", default=None, help="JSON: build a minimal root first (unshare fallback)")
    args = parser.parse_args(argv)
    pid1 = os.getpid() == 1
    ignore_signals()
    run_as = tuple(int(part) for part in args.run_as.split(":")) if args.run_as else None
    if args.setup_root:
        spec = json.loads(args.setup_root)
        spec["run_as"] = run_as
        RootBuilder(spec).build()
    # Nobody may ptrace us or read our memory, not even a program running with our uid.
    import ctypes

    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass
    if not pid1:
        try:  # orphans of a run come back to us (PR_SET_CHILD_SUBREAPER = 36), so we can kill them
            ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
        except Exception:
            pass
    for name in filter(None, args.preload.split(",")):
        try:
            __import__(name)
        except Exception:
            pass
    # Forked children would otherwise have the collector walk (and so copy) every preloaded object.
    import gc

    gc.collect()
    gc.freeze()
    seccomp = None if args.no_seccomp else seccomp_program()
    supervisor = Supervisor(
        os.path.abspath(args.root), os.path.abspath(args.work), [os.path.abspath(d) for d in args.dir],
        [os.path.abspath(d) for d in args.wipe], run_as, pid1, seccomp,
    )

    # The sandbox folders, made as the program's user (a failure here ends us: the host reports it).
    found, clean, why = supervisor._after_run(0, 1, None, None)
    if not clean:
        raise WipeFailed("could not prepare the sandbox folders: %s" % why)
    if args.mode == "serve":
        ready = json.dumps({"ready": True, "pid": os.getpid(), "seccomp": seccomp is not None}).encode()
        write_all(1, HEADER.pack(len(ready)) + ready)
    while True:
        control = read_control(0)  # a ProtocolError ends us: the host replaces the worker
        if control is None:
            return 0
        blobs = []
        try:
            reply, blobs, retire = supervisor.run(control)
        except ProtocolError:
            raise
        except Exception as exc:  # report, then stop: our state is no longer known to be clean
            reply, retire = {"status": "sandbox_error", "message": "supervisor failed: %r" % (exc,)}, True
            reply.update({"id": control["id"], "retire": True, "stdout_bytes": 0, "stderr_bytes": 0, "files": []})
            blobs = []
        try:
            send_reply(1, reply, blobs)
        finally:
            for fd, _ in blobs:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if retire or args.mode == "once":
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
