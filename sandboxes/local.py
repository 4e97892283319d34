"""The ``local`` backend: Linux namespaces and rlimits on this machine.

Isolation modes:

* ``bwrap`` (bubblewrap, the default when installed): new user, PID, network, IPC, UTS and cgroup
  namespaces; the system (``/usr``, a few files of ``/etc``) mounted read-only; a minimal
  read-only ``/dev`` (null, zero, full, random, urandom, tty, pts) with a size-limited tmpfs
  ``/dev/shm``; no home folders, no project files; one size-limited tmpfs (``/sandbox``) holding
  the work folder and ``/tmp``; an empty environment. When the caller is root, bubblewrap is
  started as ``nobody`` (uid 65534) so that the program holds no privilege on the host's files at
  all (``/etc/shadow`` stays unreadable).
* ``unshare`` (fallback, root only): PID, network, mount, IPC, UTS and cgroup namespaces from
  util-linux ``unshare``; the supervisor then builds a minimal root like bubblewrap's (read-only
  binds of ``/usr`` and a few ``/etc`` files, a minimal read-only ``/dev``, a size-limited
  ``/sandbox``) and pivots into it; programs run as an unprivileged uid of the worker's own. No user
  namespace (the supervisor is real root inside its namespaces).
* ``none``: no isolation at all (rlimits and timeouts only). Refused unless asked for by name,
  and it warns.

Where the caller may make memory cgroups (see ``cgroups.py``), each worker lives in one of its own, so
that what the kernel holds for a program (tmpfs files, pipe buffers, the sum over its processes) counts
against ``memory_mb`` too; ``memory_accounting`` says which applies.

In every mode each program also runs under a seccomp filter (x86_64 and aarch64; ``seccomp=False`` turns it off):
namespaces, mounts, ptrace, keyrings, eBPF, io_uring, perf events and the like fail with EPERM (see
``supervisor.py`` for the list).

Runs go to a warm pool of supervisors (``warm=True``, the default): each one sits in its own
sandbox with its imports done and forks a fresh child per program; the supervisor never holds a
run's data in its memory and empties the sandbox after every run (see ``supervisor.py``).
``warm=False`` starts a fresh sandbox per run.

Programs run with the system interpreter, ``/usr/bin/python3`` (see :func:`default_python`), so the
packages they can import are the system's: ``apt-get install python3-numpy python3-sympy`` makes
numpy and sympy importable in every sandbox (they live under ``/usr``, mounted read-only). Another
interpreter: ``python=`` plus ``ro_binds=`` for its folders, which the sandbox user must be able to
read (a virtualenv under ``/root`` is not).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from skygym_sandboxes.cgroups import CgroupTree, WorkerCgroup, find_tree
from skygym_sandboxes.protocol import BaseSandbox
from skygym_sandboxes.types import Limits, RunRequest, RunResult, SandboxUnavailable
from skygym_sandboxes.workers import (
    SUPERVISOR_SOURCE,
    ProcessChannel,
    SupervisorWorker,
    WarmPool,
    folders_of_gone_processes,
)

logger = logging.getLogger(__name__)

NOBODY = (65534, 65534)
PR_SET_PDEATHSIG = 1
# Programs of the unshare fallback (and of docker containers) run in the host's user namespace,
# where RLIMIT_NPROC counts every process of a uid machine-wide. Each worker therefore gets a uid of
# its own from this range: its process limit is its own, and its cleanup kill(-1) reaches only it.
PROGRAM_UID_RANGE = (200_000, 260_000)


def fresh_program_uid() -> Tuple[int, int]:
    uid = PROGRAM_UID_RANGE[0] + secrets.randbelow(PROGRAM_UID_RANGE[1] - PROGRAM_UID_RANGE[0])
    return uid, uid
ISOLATIONS = ("auto", "bwrap", "unshare", "none")
# Imported once by warm supervisors so that programs importing them start instantly.
DEFAULT_PRELOAD = (
    "collections,itertools,functools,heapq,bisect,math,re,string,json,random,operator,copy,typing,"
    "decimal,fractions,statistics,datetime,io,traceback,dataclasses,enum,array,numbers,textwrap"
)
# /etc files a program may legitimately need (dynamic loader, locale, time zone, users, hosts).
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "alternatives",
    "mime.types",
    "ssl/openssl.cnf",
)
SANDBOX_ROOT = "/sandbox"
SCRATCH = "/sandbox/work"
TMP = "/sandbox/tmp"
SHM = "/sandbox/shm"


def default_python() -> str:
    """The interpreter programs run with: the system's ``python3`` (readable by an unprivileged
    sandbox user, unlike a virtualenv under a private home), else the caller's own."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def resolve_isolation(isolation: str) -> str:
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
    if isolation != "auto":
        return isolation
    if shutil.which("bwrap"):
        return "bwrap"
    if shutil.which("unshare") and os.geteuid() == 0:
        return "unshare"
    raise SandboxUnavailable(
        "no isolation tool found: install bubblewrap (`apt-get install bubblewrap`), or run as root with "
        "util-linux `unshare`; pass isolation='none' to run WITHOUT isolation (unsafe for untrusted code)"
    )


def _joining(cgroup: WorkerCgroup, then: Optional[Callable[[], None]]) -> Callable[[], None]:
    """A ``preexec_fn`` that moves the launcher into ``cgroup`` (while it is still root), then ``then``."""

    def preexec() -> None:
        cgroup.join()
        if then is not None:
            then()

    return preexec


def _both(first: Optional[Callable[[], None]], second: Callable[[], None]) -> Callable[[], None]:
    def cleanup() -> None:
        if first is not None:
            first()
        second()

    return cleanup


def _dying_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for the unshare launcher and the unisolated supervisor: killed with the thread that started
    it (bubblewrap has ``--die-with-parent``; without it a killed caller left a worker running until its run's wall
    limit).
    The libc function is found here, in the parent: a forked child of a threaded process loads nothing."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the caller died before the tie: nobody would stop this worker
            os._exit(1)

    return preexec


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY[1])
    os.setuid(NOBODY[0])


class LocalSandbox(BaseSandbox):
    """Runs programs on this machine inside Linux namespaces (see the module docstring).

    ``pool_size`` warm workers run that many programs at once; ``python`` is the interpreter used
    for ``code`` requests (its installation must be under ``/usr`` or listed in ``ro_binds``);
    ``ro_binds`` are extra host paths made visible read-only at the same place; ``preload`` the
    modules warm workers import up front; ``memory_cgroup`` whether each worker gets a memory cgroup
    (None: where the machine allows; True: refuse to start without; False: never).
    """

    name = "local"

    def __init__(
        self,
        limits: Optional[Union[Limits, dict]] = None,
        isolation: str = "auto",
        warm: bool = True,
        pool_size: int = 2,
        python: Optional[str] = None,
        ro_binds: Sequence[str] = (),
        preload: Union[str, Sequence[str]] = DEFAULT_PRELOAD,
        max_runs_per_worker: Optional[int] = 1000,
        seccomp: bool = True,
        memory_cgroup: Optional[bool] = None,
    ) -> None:
        super().__init__(limits)
        self.isolation = resolve_isolation(isolation)
        self.seccomp = seccomp
        self._cgroups, self.memory_accounting = self._memory_cgroups(memory_cgroup)
        if self.isolation == "none":
            warnings.warn(
                "LocalSandbox(isolation='none') runs untrusted code WITHOUT any isolation: only rlimits "
                "and timeouts apply",
                RuntimeWarning,
                stacklevel=2,
            )
        self.python = python or default_python()
        self.ro_binds = [str(Path(path)) for path in ro_binds]
        self.preload = preload if isinstance(preload, str) else ",".join(preload)
        self.warm = warm
        self.name = f"local-{self.isolation}" + ("-warm" if warm else "")
        self.default_concurrency = pool_size if warm else 2
        self._pool: Optional[WarmPool] = None
        if warm:
            self._pool = WarmPool(
                lambda: self._start_worker("serve"),
                size=pool_size,
                max_runs_per_worker=max_runs_per_worker,
                name=self.name,
            )

    @staticmethod
    def _memory_cgroups(wanted: Optional[bool]) -> Tuple[Optional[CgroupTree], str]:
        """Where workers' memory cgroups go (None: per-process limits only), and a line saying which."""
        if wanted is False:
            return None, "per process (RLIMIT_AS): memory_cgroup=False"
        tree, why_not = find_tree()
        if tree is not None:
            return tree, tree.describe()
        if wanted:
            raise SandboxUnavailable(f"memory_cgroup=True, but {why_not}")
        logger.info("sandbox memory is limited per process only: %s", why_not)
        return None, f"per process (RLIMIT_AS): {why_not}"

    # -- launching --------------------------------------------------------------------------------
    def _supervisor_args(
        self,
        mode: str,
        root: str,
        dirs: Sequence[str],
        wipe: Sequence[str],
        run_as: Optional[Tuple[int, int]],
    ) -> List[str]:
        args = [self.python, "-I", "-c", SUPERVISOR_SOURCE, mode, "--root", root, "--work", f"{root}/work"]
        for folder in dirs:
            args += ["--dir", folder]
        for folder in wipe:
            args += ["--wipe", folder]
        if run_as is not None:
            args += ["--run-as", f"{run_as[0]}:{run_as[1]}"]
        if mode == "serve" and self.preload:
            args += ["--preload", self.preload]
        if not self.seccomp:
            args.append("--no-seccomp")
        return args

    def _scratch_mb(self) -> int:
        return int(self.limits.scratch_mb or 128)

    def _bwrap_argv(self, mode: str) -> Tuple[List[str], Optional[Callable[[], None]]]:
        scratch_bytes = self._scratch_mb() * 1024 * 1024
        argv = [
            "bwrap",
            "--unshare-all",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--as-pid-1",
            "--new-session",
            "--clearenv",
            "--hostname",
            "sandbox",
        ]
        for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/") / top
            if path.is_symlink():
                argv += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                argv += ["--ro-bind", str(path), str(path)]
        for name in ETC_FILES:
            path = Path("/etc") / name
            if path.exists():
                argv += ["--ro-bind", str(path), str(path)]
        for extra in [*self.ro_binds, *self._python_binds()]:
            argv += ["--ro-bind", extra, extra]
        argv += [
            "--proc",
            "/proc",
            # read-only: the program's uid owns the worker's PID and IPC namespaces, and a run that set their
            # pid_max or IPC limits changed them for every later run of the worker
            "--ro-bind",
            "/proc/sys",
            "/proc/sys",
            "--dev",
            "/dev",
            # /dev/shm (POSIX shared memory, multiprocessing): a size-limited tmpfs of its own,
            # emptied after every run. The rest of /dev (the usual device nodes) is read-only, so a
            # program can park nothing there.
            "--size",
            str(scratch_bytes),
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            # The one writable area: a size-limited tmpfs holding the work folder and /tmp, emptied
            # after every run (the supervisor makes the work folder anew).
            "--size",
            str(scratch_bytes),
            "--tmpfs",
            SANDBOX_ROOT,
            "--symlink",
            TMP,
            "/tmp",
            # bubblewrap's own root (holding /etc, the mount points) is writable unless made read-only:
            # a warm worker's program could otherwise leave files there for the next program.
            "--remount-ro",
            "/",
            "--chdir",
            SANDBOX_ROOT,
        ]
        argv += self._supervisor_args(mode, SANDBOX_ROOT, [TMP], ["/dev/shm"], run_as=None)
        preexec = _drop_to_nobody if os.geteuid() == 0 else None
        return argv, preexec

    def _python_binds(self) -> List[str]:
        """Folders outside /usr that the interpreter needs (a /opt or /usr/local build)."""
        real = Path(os.path.realpath(self.python))
        if str(real).startswith("/usr/"):
            return []
        prefix = real.parent.parent
        return [str(prefix)] if prefix != Path("/") else [str(real.parent)]

    def _unshare_argv(self, mode: str) -> Tuple[List[str], Optional[Callable[[], None]]]:
        if os.geteuid() != 0:
            raise SandboxUnavailable(
                "the unshare fallback needs root; install bubblewrap for unprivileged sandboxes"
            )
        program_user = fresh_program_uid()
        # The supervisor starts as root in new PID, network, mount, IPC, UTS and cgroup namespaces,
        # builds a minimal root there (read-only /usr and a few /etc files, a minimal read-only
        # /dev, a size-limited /sandbox owned by the program's user; see RootBuilder in
        # supervisor.py), pivots into it, and runs programs as the worker's own unprivileged uid.
        setup = {
            "size_mb": self._scratch_mb(),
            "etc_files": list(ETC_FILES),
            "ro_binds": [*self.ro_binds, *self._python_binds()],
        }
        args = self._supervisor_args(mode, SANDBOX_ROOT, [TMP, SHM], [], run_as=program_user)
        args += ["--setup-root", json.dumps(setup)]
        argv = [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--net",
            "--mount",
            "--propagation",
            "private",
            "--ipc",
            "--uts",
            "--cgroup",
            *args,
        ]
        return argv, _dying_with_parent()

    def _none_argv(self, mode: str) -> Tuple[List[str], str]:
        # named by this process: a folder whose process is gone (killed, so its workers' cleanup never ran) is
        # removed by the next process to start a worker
        for stale in folders_of_gone_processes(tempfile.gettempdir(), "sandbox-none-"):
            shutil.rmtree(stale, ignore_errors=True)
        base = tempfile.mkdtemp(prefix=f"sandbox-none-{os.getpid()}-")
        return self._supervisor_args(mode, base, [], [], run_as=None), base

    def _start_worker(self, mode: str) -> SupervisorWorker:
        env: Dict[str, str] = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        cleanup: Optional[Callable[[], None]] = None
        if self.isolation == "bwrap":
            argv, preexec = self._bwrap_argv(mode)
        elif self.isolation == "unshare":
            argv, preexec = self._unshare_argv(mode)
        else:
            argv, base = self._none_argv(mode)
            preexec = _dying_with_parent()  # as bwrap's --die-with-parent (its programs, unconfined, run on)
            cleanup = lambda: shutil.rmtree(base, ignore_errors=True)  # noqa: E731
        cgroup = self._cgroups.new_worker(self._scratch_mb()) if self._cgroups is not None else None
        if cgroup is not None:
            preexec = _joining(cgroup, preexec)
            cleanup = _both(cleanup, cgroup.remove)
        try:
            channel = ProcessChannel(argv, env=env, preexec_fn=preexec, cwd="/", on_kill=cleanup)
        except BaseException:
            if cleanup is not None:
                cleanup()
            raise
        try:
            return SupervisorWorker(channel, expect_ready=(mode == "serve"), cgroup=cgroup)
        except Exception:
            channel.kill()
            raise

    # -- running ----------------------------------------------------------------------------------
    def _run(
        self, request: RunRequest, limits: Limits, cancel: Optional[threading.Event] = None
    ) -> RunResult:
        if self._pool is not None:
            return self._pool.run(request, limits, cancel=cancel)
        worker = self._start_worker("once")
        try:
            return worker.run(request, limits, cancel)
        finally:
            worker.kill(grace_s=2.0)

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        return self._pool.wait_ready(timeout_s) if self._pool is not None else True

    def close(self) -> None:
        super().close()
        if self._pool is not None:
            self._pool.close()

