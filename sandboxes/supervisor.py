"""The supervisor that runs *inside* a sandbox (bubblewrap, unshare, a Docker container).

Standard library only, and self-contained: backends start it as ``python3 -I -c <this source>``, so
it needs no file inside the sandbox. It reads length-prefixed JSON requests on fd 0 and writes one
length-prefixed JSON result per request on fd 1.

For each request it forks a child in a fresh process group, gives it a private scratch folder, a
scrubbed environment, rlimits, stdin from a memfd and pipes for stdout/stderr, and either runs the
Python source in that child (no new interpreter: this is what makes warm workers fast, the modules
given to ``--preload`` are already imported) or ``execve``s a command. It enforces the wall-clock
limit and the output limits itself, then kills every process the run left (the whole PID namespace
when it is PID 1 there, else every process of the run's uid) and wipes the scratch folder and /tmp,
so that the next run sees nothing of this one.

``serve`` mode loops over requests (a warm worker, "zygote"); ``once`` mode answers one and exits.
"""

import base64
import errno
import json
import os
import resource
import select
import shutil
import signal
import stat
import struct
import sys
import time

HEADER = struct.Struct(">I")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")

# ----- the seccomp filter ------------------------------------------------------------------------
# A deny list, not an allow list: programs keep every ordinary system call (threads, fork, exec, files,
# sockets in their empty network namespace) and lose the kernel interfaces that sandbox escapes and
# kernel exploits go through: namespaces, mounts, tracing other processes, keyrings, eBPF, io_uring,
# perf events, userfaultfd, modules. A denied call fails with EPERM (clone3 with ENOSYS, so that libc
# falls back to clone, whose namespace flags the filter can see). System call numbers are per
# architecture; these are x86_64's, and on other machines programs run without the filter.
AUDIT_ARCH_X86_64 = 0xC000003E
DENIED_SYSCALLS_X86_64 = {
    "ptrace": 101, "syslog": 103, "personality": 135, "pivot_root": 155, "chroot": 161, "acct": 163,
    "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170,
    "setdomainname": 171, "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176,
    "quotactl": 179, "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
    "kcmp": 312, "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
}
CLONE_X86_64, CLONE3_X86_64 = 56, 435
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


def seccomp_program():
    """The filter as classic BPF (``struct sock_filter`` records), or None where it does not apply."""
    if os.uname().machine != "x86_64":
        return None
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
    allow, deny, no_sys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    code = []  # (opcode, jump-if-true label or None, jump-if-false label or None, k)
    code.append((ld, None, None, 4))  # seccomp_data.arch
    code.append((jeq, None, "deny", AUDIT_ARCH_X86_64))
    code.append((ld, None, None, 0))  # seccomp_data.nr
    code.append((jge, "deny", None, 0x40000000))  # the x32 ABI's numbers
    for nr in sorted(DENIED_SYSCALLS_X86_64.values()):
        code.append((jeq, "deny", None, nr))
    code.append((jeq, "no_sys", None, CLONE3_X86_64))
    code.append((jeq, None, "allow", CLONE_X86_64))
    code.append((ld, None, None, 16))  # low 32 bits of clone's flags (args[0])
    code.append((jset, "deny", "allow", CLONE_NAMESPACE_FLAGS))
    labels = {"allow": len(code), "deny": len(code) + 1, "no_sys": len(code) + 2}
    code += [(ret, None, None, allow), (ret, None, None, deny), (ret, None, None, no_sys)]
    records = []
    for index, (opcode, if_true, if_false, k) in enumerate(code):
        jt = labels[if_true] - index - 1 if if_true else 0
        jf = labels[if_false] - index - 1 if if_false else 0
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


def read_exact(fd, size):
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(fd):
    header = read_exact(fd, HEADER.size)
    if header is None:
        return None
    body = read_exact(fd, HEADER.unpack(header)[0])
    return None if body is None else json.loads(body.decode("utf-8"))


def write_frame(fd, payload):
    data = json.dumps(payload).encode("utf-8")
    data = HEADER.pack(len(data)) + data
    while data:
        written = os.write(fd, data)
        data = data[written:]


class Supervisor:
    def __init__(self, scratch, wipe_dirs, run_as, pid1, seccomp=None):
        self.seccomp = seccomp_installer(seccomp) if seccomp is not None else None  # for every program
        self.scratch = scratch
        self.wipe_dirs = [scratch] + [d for d in wipe_dirs if d != scratch]
        self.run_as = run_as  # (uid, gid) the program runs as, or None for our own
        self.pid1 = pid1  # True when we are PID 1 of a private PID namespace

    # ----- one run ---------------------------------------------------------------------------
    def run(self, request):
        limits = request.get("limits") or {}
        self._fetch_list = list(request.get("fetch_files") or [])
        started = time.monotonic()
        try:
            self._write_files(request)
            stdin_fd = self._stdin_fd(request)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
        except OSError as exc:
            return {"status": "sandbox_error", "message": "could not prepare the run: %s" % exc}
        pid = os.fork()
        if pid == 0:  # the child never returns
            self._child(request, limits, stdin_fd, out_w, err_w, (out_r, err_r))
        os.close(out_w)
        os.close(err_w)
        os.close(stdin_fd)
        try:
            result = self._watch(pid, limits, out_r, err_r, started)
        finally:
            os.close(out_r)
            os.close(err_r)
        return result

    def _write_files(self, request):
        files = dict(request.get("files") or {})
        if request.get("code") is not None:
            files.setdefault("main.py", base64.b64encode(request["code"].encode("utf-8")).decode("ascii"))
        for name, content_b64 in files.items():
            path = os.path.normpath(os.path.join(self.scratch, name))
            if not path.startswith(self.scratch + os.sep):
                raise OSError("file %r would land outside the scratch folder" % name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(base64.b64decode(content_b64))
        if self.run_as is not None:  # the program must be able to write its own scratch folder
            for root, dirs, names in os.walk(self.scratch):
                for entry in [root] + [os.path.join(root, n) for n in dirs + names]:
                    os.chown(entry, self.run_as[0], self.run_as[1])

    def _stdin_fd(self, request):
        data = base64.b64decode(request.get("stdin_b64") or "")
        fd = os.memfd_create("stdin", 0) if hasattr(os, "memfd_create") else None
        if fd is None:  # very old kernels: a pipe that holds at most 64 KiB before it would block
            read_fd, write_fd = os.pipe()
            os.write(write_fd, data[:65536])
            os.close(write_fd)
            return read_fd
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def _child(self, request, limits, stdin_fd, out_w, err_w, parent_fds):
        try:
            os.setsid()
            for fd in parent_fds:
                os.close(fd)
            os.dup2(stdin_fd, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, 65536)
            for sig in (
                signal.SIGINT,
                signal.SIGTERM,
                signal.SIGPIPE,
                signal.SIGXCPU,
                signal.SIGXFSZ,
                signal.SIGCHLD,
            ):
                signal.signal(sig, signal.SIG_DFL)
            if self.run_as is not None:
                os.setgroups([])
                os.setgid(self.run_as[1])
                os.setuid(self.run_as[0])
            set_rlimits(limits)
            if self.seccomp is not None:
                self.seccomp()
            os.chdir(self.scratch)
            env = {
                "PATH": DEFAULT_PATH,
                "HOME": self.scratch,
                "TMPDIR": "/tmp",
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONIOENCODING": "utf-8",
            }
            env.update(request.get("env") or {})
            if request.get("command") is not None:
                command = request["command"]
                try:
                    os.execvpe(command[0], command, env)
                except OSError as exc:
                    os.write(2, ("cannot run %r: %s\n" % (command[0], exc.strerror)).encode())
                    os._exit(127)
            os._exit(run_python_in_child(request, env, self.scratch))
        except BaseException as exc:  # nothing may escape a forked child
            try:
                os.write(2, ("sandbox child failed: %r\n" % (exc,)).encode())
            finally:
                os._exit(126)

    def _watch(self, pid, limits, out_r, err_r, started):
        wall = limits.get("wall_s")
        deadline = started + wall if wall else None
        cap = limits.get("output_bytes")
        streams = {out_r: bytearray(), err_r: bytearray()}
        truncated = {out_r: False, err_r: False}
        open_fds = [out_r, err_r]
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        reason = None
        waited = None
        while True:
            if waited is None:
                done_pid, status, usage = os.wait4(pid, os.WNOHANG)
                if done_pid == pid:
                    waited = (status, usage)
            if waited is not None:
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                reason = "timeout"
                break
            timeout = None if deadline is None else max(0.0, deadline - now)
            if pidfd is None:  # no pidfd to wake us when the child exits: poll
                timeout = 0.01 if timeout is None else min(timeout, 0.01)
            watch = open_fds + ([pidfd] if pidfd is not None else [])
            try:
                readable, _, _ = select.select(watch, [], [], timeout)
            except InterruptedError:
                continue
            for fd in readable:
                if fd == pidfd:
                    continue
                if not self._read_into(fd, streams, truncated, cap, open_fds):
                    continue
            if cap is not None and (truncated[out_r] or truncated[err_r]):
                reason = "output_limit"
                break
        if waited is None:  # still running: a limit was hit
            kill_group(pid)
            _, status, usage = os.wait4(pid, 0)
            waited = (status, usage)
        wall_time = time.monotonic() - started
        self._kill_leftovers(pid)
        # Drain what is still buffered; every writer is dead now, so EOF comes at once.
        drain_deadline = time.monotonic() + 1.0
        while open_fds and time.monotonic() < drain_deadline:
            readable, _, _ = select.select(open_fds, [], [], 0.1)
            for fd in readable:
                self._read_into(fd, streams, truncated, cap, open_fds)
        if pidfd is not None:
            os.close(pidfd)
        status, usage = waited
        stdout = bytes(streams[out_r])
        stderr = bytes(streams[err_r])
        result = {
            "stdout": stdout.decode("utf-8", "replace"),
            "stderr": stderr.decode("utf-8", "replace"),
            "stdout_truncated": truncated[out_r],
            "stderr_truncated": truncated[err_r],
            "wall_time_s": round(wall_time, 6),
            "cpu_time_s": round(usage.ru_utime + usage.ru_stime, 6),
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        }
        result["status"], result["message"] = classify(result, reason, limits, stderr)
        if self._fetch_list:
            result["files"] = self._fetch(self._fetch_list, cap)
        self._wipe()
        return result

    def _fetch(self, names, cap):
        """Read back the requested files from the scratch folder, never following a link out of it."""

        def read_all():
            found = {}
            for name in names:
                path = os.path.normpath(os.path.join(self.scratch, name))
                if not path.startswith(self.scratch + os.sep) or os.path.realpath(path) != path:
                    continue
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        data = os.read(fd, cap if cap else 1 << 30)
                        found[name] = base64.b64encode(data).decode("ascii")
                finally:
                    os.close(fd)
            return found

        if self.run_as is None:
            return read_all()
        # Read as the program's uid, through a pipe from a helper, so root's rights are never used.
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            try:
                os.setgroups([])
                os.setgid(self.run_as[1])
                os.setuid(self.run_as[0])
                data = json.dumps(read_all()).encode()
                while data:
                    data = data[os.write(write_fd, data) :]
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
            return json.loads(b"".join(chunks) or b"{}")
        except ValueError:
            return {}

    @staticmethod
    def _read_into(fd, streams, truncated, cap, open_fds):
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            open_fds.remove(fd)
            return False
        buffer = streams[fd]
        if cap is None or len(buffer) < cap:
            room = len(chunk) if cap is None else cap - len(buffer)
            buffer.extend(chunk[:room])
            if cap is not None and len(chunk) > room:
                truncated[fd] = True
        else:
            truncated[fd] = True
        return True

    # ----- cleaning up -----------------------------------------------------------------------
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
                self._as_run_user(lambda: os.kill(-1, signal.SIGKILL), ignore=(ProcessLookupError,))
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

    def _wipe(self):
        def wipe():
            for directory in self.wipe_dirs:
                if not os.path.isdir(directory):
                    continue
                for entry in os.listdir(directory):
                    path = os.path.join(directory, entry)
                    if path != self.scratch:  # the scratch folder may sit inside another wiped folder
                        remove_tree(path)

        def wipe_all():
            wipe()
            remove_sysv_ipc()

        if self.run_as is not None:
            self._as_run_user(wipe_all)
        else:
            wipe_all()

    def _as_run_user(self, action, ignore=()):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(self.run_as[1])
                os.setuid(self.run_as[0])
                action()
            except ignore:
                pass
            except BaseException:
                os._exit(1)
            os._exit(0)
        os.waitpid(pid, 0)


def set_rlimits(limits):
    def setlimit(which, value):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass

    if limits.get("cpu_s"):
        cpu = max(1, int(-(-limits["cpu_s"] // 1)))
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


def run_python_in_child(request, env, scratch):
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
    path = os.path.join(scratch, "main.py")
    sys.argv = [path] + list(request.get("argv") or [])
    sys.path.insert(0, scratch)
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
    exit_code = 0
    try:
        code = compile(request["code"], path, "exec")
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


def classify(result, reason, limits, stderr):
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
    tail = stderr[-4096:].decode("utf-8", "replace")
    if result["exit_code"] == 0:
        return "ok", ""
    if any(marker in tail for marker in MEMORY_MARKERS):
        return "memory", "memory limit of %s MB reached" % limits.get("memory_mb")
    if sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return "killed", "killed by signal %s" % name
    if "File too large" in tail:
        return "output_limit", "a written file went past %s MB" % limits.get("file_size_mb")
    return "error", "exited with code %s" % result["exit_code"]


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


def remove_sysv_ipc():
    """Remove the System V shared memory segments, message queues and semaphores a run created:
    they live in the sandbox's IPC namespace, which outlives one run in a warm worker."""
    tables = (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl"))
    pending = []
    for table, _ in tables:
        try:
            with open("/proc/sysvipc/" + table) as handle:
                pending.append([line.split()[1] for line in handle.readlines()[1:] if line.strip()])
        except (OSError, IndexError):
            pending.append([])
    if not any(pending):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for (_, function), ids in zip(tables, pending):
        for ipc_id in ids:
            if function == "semctl":
                libc.semctl(int(ipc_id), 0, 0)  # IPC_RMID = 0
            else:
                getattr(libc, function)(int(ipc_id), 0, None)


def remove_tree(path):
    def make_writable_and_retry(function, failed_path, _exc_info):
        try:
            parent = os.path.dirname(failed_path)
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(failed_path) and not os.path.islink(failed_path):
                os.chmod(failed_path, stat.S_IRWXU)
            function(failed_path)
        except OSError:
            pass

    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            shutil.rmtree(path, onerror=make_writable_and_retry)
        else:
            os.unlink(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            pass


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(prog="sandbox-supervisor")
    parser.add_argument("mode", choices=["serve", "once"])
    parser.add_argument("--scratch", default="/scratch")
    parser.add_argument("--wipe", action="append", default=[], help="more folders to empty after each run")
    parser.add_argument("--run-as", default=None, help="UID:GID the program runs as")
    parser.add_argument("--preload", default="", help="comma-separated modules to import once, up front")
    parser.add_argument("--no-seccomp", action="store_true", help="run programs without the seccomp filter")
    args = parser.parse_args(argv)
    # Nobody may ptrace us or read our memory, not even a program running with our uid.
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass
    if os.getpid() != 1:
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
    run_as = tuple(int(part) for part in args.run_as.split(":")) if args.run_as else None
    os.makedirs(args.scratch, exist_ok=True)
    seccomp = None if args.no_seccomp else seccomp_program()
    supervisor = Supervisor(os.path.abspath(args.scratch), args.wipe, run_as, os.getpid() == 1, seccomp)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if args.mode == "serve":
        write_frame(1, {"ready": True, "pid": os.getpid(), "seccomp": seccomp is not None})
    while True:
        request = read_frame(0)
        if request is None:
            return 0
        try:
            result = supervisor.run(request)
        except Exception as exc:  # report, keep serving
            result = {"status": "sandbox_error", "message": "supervisor failed: %r" % (exc,)}
        write_frame(1, result)
        if args.mode == "once":
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
