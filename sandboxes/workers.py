"""Host side of the supervisor protocol: a supervisor process behind pipes, and a warm pool of them.

A *worker* is one supervisor (``sandboxes/supervisor.py``) running inside its own isolation
(a bubblewrap sandbox, an ``unshare`` namespace set, a Docker container). The pool keeps ``size``
of them started and ready; each runs one program at a time, so concurrent runs never share a
sandbox. A worker that fails, hangs or is torn down by its program is killed and replaced in the
background.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import secrets
import select
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Union

from skygym_sandboxes.turns import Turns
from skygym_sandboxes.types import Limits, RunRequest, RunResult, Status

HEADER = struct.Struct(">I")
SUPERVISOR_SOURCE = (Path(__file__).with_name("supervisor.py")).read_text(encoding="utf-8")
# Time the host allows beyond the program's own wall limit (for writing files, killing leftovers
# and cleaning up) before it declares the worker hung and tears it down.
BACKSTOP_S = 20.0
# A reply larger than this is not one the supervisor can have meant: the worker is torn down.
MAX_REPLY_JSON_BYTES = 1 << 20
MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


CANCEL_POLL_S = 0.05
# A worker that fails to start is retried this many times before a caller is told.
SPAWN_RETRIES = 2
# How long a run waits for its turn at the pool, and again for a worker once it has it.
ACQUIRE_TIMEOUT_S = 120.0
# A pool tries a run on this many workers while the request reaches none (a warm worker that died while idle, one
# whose memory limit could not be set): the program never ran, so running it elsewhere changes nothing it did.
RUN_TRIES = 2


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (one this process may not signal runs too)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no pid is past a C int: a name that says one names nobody
        return False
    except PermissionError:
        return True
    return True


def folders_of_gone_processes(parent: Union[str, "os.PathLike[str]"], prefix: str) -> List[str]:
    """The folders in ``parent`` named ``<prefix><pid>-...`` by a process of this user that is gone: what a
    process killed before its cleanup left, for the next one to remove. Another user's folder (in a shared /tmp)
    is never one, whatever its name says."""
    found = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return found
    for entry in entries:
        owner = entry.name[len(prefix):].split("-", 1)[0] if entry.name.startswith(prefix) else ""
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if mine and owner.isascii() and owner.isdigit() and not pid_alive(int(owner)):
            found.append(entry.path)
    return found


class WorkerDied(RuntimeError):
    """The worker's channel closed or broke in the middle of a run."""


class Cancelled(RuntimeError):
    """The caller gave up on the run (a client that went away); the worker is torn down."""


class ProtocolViolation(RuntimeError):
    """The worker's reply is not the answer to the request just sent (wrong id, bad framing)."""


def _b64(data: Any) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return base64.b64encode(raw).decode("ascii")


def encode_request(request: RunRequest, limits: Limits, request_id: str) -> bytes:
    """One request on the wire: a control object (id, limits, the payload's size) the supervisor
    reads, then the payload (code or command, stdin, files, argv, names to fetch) that only the run's
    own child (and the helper that fetches files) reads."""
    payload: Dict[str, Any] = {
        "stdin_b64": _b64(request.stdin),
        "files": {name: _b64(content) for name, content in request.files.items()},
        "argv": list(request.argv),
        "fetch_files": list(request.fetch_files),
    }
    if request.code is not None:
        payload["code"] = request.code
    else:
        payload["command"] = list(request.command or [])
    body = json.dumps(payload).encode("utf-8")
    control = {
        "id": request_id,
        "limits": limits.to_dict(),
        "fetch_count": len(request.fetch_files),
        "payload_bytes": len(body),
    }
    return frame(control) + body


def frame(payload: Dict[str, Any]) -> bytes:
    data = json.dumps(payload).encode("utf-8")
    return HEADER.pack(len(data)) + data


def refine_status(result: RunResult, limits: Limits) -> RunResult:
    """The supervisor classifies without reading a program's output; the host looks at stderr."""
    tail = result.stderr[-4096:]
    if result.status == Status.ERROR:
        if any(marker in tail for marker in MEMORY_MARKERS):
            result.status, result.message = Status.MEMORY, f"memory limit of {limits.memory_mb} MB reached"
        elif "File too large" in tail:
            result.status = Status.OUTPUT_LIMIT
            result.message = f"a written file went past {limits.file_size_mb} MB"
    elif result.status == Status.SANDBOX_ERROR and tail.strip():
        result.message = f"{result.message}: {tail.strip()[-500:]}"
    return result


class Channel(Protocol):
    """A duplex byte stream to a supervisor."""

    def send(self, data: bytes) -> None: ...

    def recv_exact(
        self, size: int, deadline: Optional[float], cancel: Optional[threading.Event] = None
    ) -> bytes: ...

    def kill(self, grace_s: float = 0.0) -> None: ...

    def alive(self) -> bool: ...


class ProcessChannel:
    """A supervisor started as a local process (through ``bwrap``/``unshare``) talking over pipes.

    It is started in a new session, so killing its process group takes the launcher and, through
    ``--die-with-parent`` / ``--kill-child``, the whole namespace with it.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Dict[str, str],
        preexec_fn: Optional[Callable[[], None]] = None,
        cwd: Optional[str] = None,
        on_kill: Optional[Callable[[], None]] = None,
    ) -> None:
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=preexec_fn,
            start_new_session=True,
            cwd=cwd,
            close_fds=True,
            bufsize=0,
        )
        self._stdout_fd = self.process.stdout.fileno()  # type: ignore[union-attr]
        self._pending = bytearray()  # read from the worker, not yet asked for
        self._on_kill = on_kill
        self._killed = False

    def send(self, data: bytes) -> None:
        try:
            self.process.stdin.write(data)  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise WorkerDied(f"could not send to the sandbox worker: {exc}; {self.stderr_tail()}") from None

    def recv_exact(
        self, size: int, deadline: Optional[float], cancel: Optional[threading.Event] = None
    ) -> bytes:
        pending = self._pending
        while len(pending) < size:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise TimeoutError("the sandbox worker did not answer in time")
            if cancel is not None:
                if cancel.is_set():
                    raise Cancelled("the run was cancelled")
                timeout = CANCEL_POLL_S if timeout is None else min(timeout, CANCEL_POLL_S)
            readable, _, _ = select.select([self._stdout_fd], [], [], timeout)
            if not readable:
                continue
            chunk = os.read(self._stdout_fd, max(1 << 16, size - len(pending)))
            if not chunk:
                raise WorkerDied(
                    f"the sandbox worker exited (code {self.process.poll()}); {self.stderr_tail()}"
                )
            pending += chunk
        data = bytes(pending[:size])
        del pending[:size]
        return data

    def stderr_tail(self) -> str:
        """What the launcher said on stderr, once it has exited (never blocks on a live one)."""
        try:
            self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "launcher still running"
        try:
            data = self.process.stderr.read() or b""  # type: ignore[union-attr]
        except (OSError, ValueError):
            data = b""
        text = data.decode("utf-8", "replace").strip()
        return f"launcher stderr: {text[-1000:]}" if text else "launcher printed nothing"

    def alive(self) -> bool:
        return not self._killed and self.process.poll() is None

    def kill(self, grace_s: float = 0.0) -> None:
        """Stop the worker. With ``grace_s``, first close its input and let it exit by itself (the
        launcher then reaps the supervisor, leaving no zombie), then kill whatever remains."""
        if self._killed:
            return
        self._killed = True
        if grace_s > 0:
            try:
                self.process.stdin.close()  # type: ignore[union-attr]
                self.process.wait(timeout=grace_s)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                stream.close()  # type: ignore[union-attr]
            except (OSError, ValueError):
                pass
        if self._on_kill is not None:
            self._on_kill()


class WorkerMemory(Protocol):
    """A worker's whole memory, where a backend counts it (``cgroups.WorkerCgroup``): set per run, read after."""

    def mark_idle(self) -> None: ...

    def before_run(self, limits: Limits) -> None: ...

    def left_room(self) -> bool: ...

    def judge(self, result: RunResult, limits: Limits) -> RunResult: ...


class SupervisorWorker:
    """One supervisor behind a channel: send a request, read *its* result, under a host-side deadline.

    Every request carries a fresh id that the reply must echo. A worker whose protocol state is
    uncertain (no answer in time, a broken or malformed reply, a wrong id, a cancelled run, a
    supervisor that says it could not clean up) is killed at once and never used again.
    """

    def __init__(
        self,
        channel: Channel,
        startup_timeout_s: float = 30.0,
        expect_ready: bool = True,
        cgroup: Optional[WorkerMemory] = None,
    ) -> None:
        self.channel = channel
        self.cgroup = cgroup
        self.runs = 0
        self.broken = False
        self.reached = False  # whether the last run's request reached the supervisor (the program may have run)
        if expect_ready:
            hello = self._recv_json(time.monotonic() + startup_timeout_s, None)
            if not hello.get("ready"):
                raise WorkerDied(f"the sandbox worker sent {hello!r} instead of its ready message")
            if cgroup is not None:
                cgroup.mark_idle()

    def _recv_json(self, deadline: Optional[float], cancel: Optional[threading.Event]) -> Dict[str, Any]:
        (size,) = HEADER.unpack(self.channel.recv_exact(HEADER.size, deadline, cancel))
        if size > MAX_REPLY_JSON_BYTES:
            raise ProtocolViolation(f"a reply header announced {size} bytes")
        try:
            data = json.loads(self.channel.recv_exact(size, deadline, cancel).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolViolation(f"a reply that is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ProtocolViolation("a reply that is not a JSON object")
        return data

    def _read_reply(
        self,
        request_id: str,
        limits: Limits,
        fetch_names: List[str],
        deadline: Optional[float],
        cancel: Optional[threading.Event],
    ) -> RunResult:
        reply = self._recv_json(deadline, cancel)
        if reply.get("id") != request_id:
            raise ProtocolViolation(
                f"the reply answers request {reply.get('id')!r}, not {request_id!r}"
            )
        ceiling = (limits.output_bytes or 0) + 1
        sizes = [reply.get("stdout_bytes"), reply.get("stderr_bytes")]
        files = reply.get("files") or []
        try:
            files = [(fetch_names[int(index)], int(size)) for index, size in files]
        except (TypeError, ValueError, IndexError):
            raise ProtocolViolation("a reply with a malformed file list") from None
        for size in sizes + [size for _, size in files]:
            if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= ceiling:
                raise ProtocolViolation(f"a reply announcing {size!r} bytes of output")
        stdout = self.channel.recv_exact(sizes[0], deadline, cancel) if sizes[0] else b""
        stderr = self.channel.recv_exact(sizes[1], deadline, cancel) if sizes[1] else b""
        fetched = {}
        for name, size in files:
            fetched[name] = base64.b64encode(self.channel.recv_exact(size, deadline, cancel) if size else b"")
        known = {"status", "exit_code", "stdout_truncated", "stderr_truncated", "wall_time_s",
                 "cpu_time_s", "signal", "message"}
        values = {key: reply[key] for key in known if key in reply}
        try:
            result = RunResult.from_dict(values)
        except (TypeError, ValueError) as exc:
            raise ProtocolViolation(f"a reply with bad fields: {exc}") from None
        result.stdout = stdout.decode("utf-8", "replace")
        result.stderr = stderr.decode("utf-8", "replace")
        result.files = {name: data.decode("ascii") for name, data in fetched.items()}
        if reply.get("retire"):
            self.broken = True  # the supervisor could not clean up: it has exited, retire the worker
        return refine_status(result, limits)

    def run(
        self, request: RunRequest, limits: Limits, cancel: Optional[threading.Event] = None
    ) -> RunResult:
        if self.broken:
            return RunResult.sandbox_error("this sandbox worker was retired")
        started = time.monotonic()
        deadline = started + (limits.wall_s or 10.0) + BACKSTOP_S
        request_id = secrets.token_hex(12)
        self.runs += 1
        self.reached = False
        failure: Optional[RunResult] = None
        if self.cgroup is not None:
            try:
                self.cgroup.before_run(limits)
            except OSError as exc:
                self.kill()
                return RunResult.sandbox_error(f"could not set the sandbox's memory limit: {exc}; it was torn down")
        try:
            self.channel.send(encode_request(request, limits, request_id))
            self.reached = True
            result = self._read_reply(request_id, limits, list(request.fetch_files), deadline, cancel)
        except TimeoutError:
            failure = RunResult(
                status=Status.TIMEOUT,
                wall_time_s=time.monotonic() - started,
                message="the sandbox stopped answering; it was torn down",
            )
        except WorkerDied as exc:
            failure = RunResult(
                status=Status.KILLED,
                wall_time_s=time.monotonic() - started,
                message=f"the sandbox was torn down during the run: {exc}",
            ) if self.reached else RunResult.sandbox_error(f"the sandbox worker had stopped before the run: {exc}")
        except Cancelled:
            failure = RunResult.sandbox_error(
                "the run was cancelled; its sandbox was torn down", wall_time_s=time.monotonic() - started
            )
        except BaseException as exc:  # ProtocolViolation, or anything else: the stream is in an unknown state
            failure = RunResult.sandbox_error(
                f"the sandbox worker broke the protocol ({type(exc).__name__}: {exc}); it was torn down",
                wall_time_s=time.monotonic() - started,
            )
            if not isinstance(exc, Exception):
                self.broken = True
                self.channel.kill()
                raise
        if failure is not None:
            self.broken = True
            self.channel.kill()
            result = failure
        elif self.cgroup is not None and not self.cgroup.left_room():
            self.broken = True  # the run left memory charged to the worker: the next run would not find its room
        if self.broken and failure is None:
            self.channel.kill(grace_s=1.0)
        return result if self.cgroup is None else self.cgroup.judge(result, limits)

    def alive(self) -> bool:
        return not self.broken and self.channel.alive()

    def kill(self, grace_s: float = 0.0) -> None:
        self.broken = True
        self.channel.kill(grace_s)


class _Spawner:
    """One long-lived thread that starts every worker process.

    Launchers use ``--die-with-parent`` (PR_SET_PDEATHSIG), which fires when the *thread* that
    forked them exits; starting workers from short-lived threads would kill them at once.
    """

    _lock = threading.Lock()
    _queue: Optional["queue.Queue[Callable[[], None]]"] = None

    @classmethod
    def submit(cls, job: Callable[[], None]) -> None:
        with cls._lock:
            if cls._queue is None:
                cls._queue = queue.Queue()
                threading.Thread(
                    target=cls._loop, args=(cls._queue,), name="sandbox-spawner", daemon=True
                ).start()
            cls._queue.put(job)

    @staticmethod
    def _loop(jobs: "queue.Queue[Callable[[], None]]") -> None:
        while True:
            job = jobs.get()
            try:
                job()
            except Exception:  # a job reports its own errors; the spawner must survive
                pass


class WarmPool:
    """``size`` ready workers; ``run`` borrows one, gives it back, and replaces it if it died.

    ``start_worker`` builds a ready :class:`SupervisorWorker` (it may take a while: it is called in
    background threads). ``max_runs_per_worker`` recycles workers now and then as a second line of
    defence against state that a run might leave in its sandbox. Runs waiting for a worker take turns by
    whose work they are (:mod:`skygym_sandboxes.turns`: serve-env's clients), not in arrival order.
    """

    def __init__(
        self,
        start_worker: Callable[[], SupervisorWorker],
        size: int = 2,
        max_runs_per_worker: Optional[int] = 1000,
        name: str = "pool",
    ) -> None:
        if size < 1:
            raise ValueError(f"pool size must be at least 1, got {size}")
        self._start_worker = start_worker
        self.size = size
        self.max_runs_per_worker = max_runs_per_worker
        self.name = name
        self._idle: List[SupervisorWorker] = []
        self._all: List[SupervisorWorker] = []
        self._starting = 0
        self._last_error: Optional[str] = None
        self._failures_in_row = 0
        self._cond = threading.Condition()
        self._closed = False
        self.turns = Turns(size)  # at most ``size`` runs past it: ``_acquire`` waits only for workers starting
        for _ in range(size):
            self._spawn_async()

    def _spawn_async(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._starting += 1
        _Spawner.submit(self._spawn)

    def _spawn(self) -> None:
        worker: Optional[SupervisorWorker] = None
        error: Optional[str] = None
        try:
            worker = self._start_worker()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        retry = False
        with self._cond:
            if worker is not None and self._closed:
                worker.kill()
            elif worker is not None:
                self._all.append(worker)
                self._idle.append(worker)
                self._failures_in_row = 0
            elif not self._closed and self._failures_in_row < SPAWN_RETRIES:
                self._failures_in_row += 1  # a machine under load: try again before giving up
                retry = True
            else:
                self._failures_in_row = 0
                self._last_error = error
            if not retry:
                self._starting -= 1
            self._cond.notify_all()
        if retry:
            _Spawner.submit(self._spawn)

    def _acquire(self, timeout_s: float) -> SupervisorWorker:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._starting == 0 and len(self._all) < self.size:
                    if self._last_error is not None:
                        error, self._last_error = self._last_error, None
                        raise RuntimeError(f"could not start a sandbox worker: {error}")
                    self._starting += 1
                    _Spawner.submit(self._spawn)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no sandbox worker became free within {timeout_s:.0f}s")
                self._cond.wait(remaining)

    def _release(self, worker: SupervisorWorker) -> None:
        retire = not worker.alive() or (
            self.max_runs_per_worker is not None and worker.runs >= self.max_runs_per_worker
        )
        with self._cond:
            if retire or self._closed:
                if worker in self._all:
                    self._all.remove(worker)
            else:
                self._idle.append(worker)
                self._cond.notify()
        if retire or self._closed:
            worker.kill(grace_s=1.0)
            if not self._closed:
                self._spawn_async()

    def run(
        self,
        request: RunRequest,
        limits: Limits,
        acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
        cancel: Optional[threading.Event] = None,
    ) -> RunResult:
        with contextlib.ExitStack() as turn:
            try:  # (none taken in the thread of a Turns.submit: BaseSandbox.arun took it before the thread)
                turn.enter_context(self.turns.turn(timeout=acquire_timeout_s))
            except TimeoutError:
                return RunResult.sandbox_error(f"no sandbox worker became free within {acquire_timeout_s:.0f}s")
            return self._run_in_turn(request, limits, acquire_timeout_s, cancel)

    def _run_in_turn(self, request: RunRequest, limits: Limits, acquire_timeout_s: float,
                     cancel: Optional[threading.Event]) -> RunResult:
        for attempt in range(RUN_TRIES):
            try:
                worker = self._acquire(acquire_timeout_s)
            except (RuntimeError, TimeoutError) as exc:
                return RunResult.sandbox_error(str(exc))
            try:
                result = worker.run(request, limits, cancel)
            finally:
                self._release(worker)
            if worker.reached or (cancel is not None and cancel.is_set()):
                return result
        return result  # the request reached no worker: each had stopped, or its memory limit could not be set

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Block until every worker has started (or failed to); True when all are ready."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._starting and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return len(self._all) >= self.size

    def close(self, patience_s: float = 10.0) -> None:
        """Stop every worker, and wait (up to ``patience_s``) for those still starting to be stopped
        too, so that a closed pool leaves no process or cgroup behind."""
        with self._cond:
            self._closed = True
            workers, self._all, self._idle = list(self._all), [], []
            self._cond.notify_all()
        for worker in workers:
            worker.kill(grace_s=1.0)
        deadline = time.monotonic() + patience_s
        with self._cond:
            while self._starting and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
