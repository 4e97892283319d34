"""Host side of the supervisor protocol: a supervisor process behind pipes, and a warm pool of them.

A *worker* is one supervisor (``sandboxes/supervisor.py``) running inside its own isolation
(a bubblewrap sandbox, an ``unshare`` namespace set, a Docker container). The pool keeps ``size``
of them started and ready; each runs one program at a time, so concurrent runs never share a
sandbox. A worker that fails, hangs or is torn down by its program is killed and replaced in the
background.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import select
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence

from skygym_sandboxes.types import Limits, RunRequest, RunResult, Status

HEADER = struct.Struct(">I")
SUPERVISOR_SOURCE = (Path(__file__).with_name("supervisor.py")).read_text(encoding="utf-8")
# Time the host allows beyond the program's own wall limit before it declares the worker hung.
BACKSTOP_S = 10.0


class WorkerDied(RuntimeError):
    """The worker's channel closed or broke in the middle of a run."""


def encode_request(request: RunRequest, limits: Limits) -> Dict[str, Any]:
    def b64(data: Any) -> str:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return base64.b64encode(raw).decode("ascii")

    payload: Dict[str, Any] = {
        "stdin_b64": b64(request.stdin),
        "files": {name: b64(content) for name, content in request.files.items()},
        "limits": limits.to_dict(),
        "argv": list(request.argv),
        "fetch_files": list(request.fetch_files),
    }
    if request.code is not None:
        payload["code"] = request.code
    else:
        payload["command"] = list(request.command or [])
    return payload


def frame(payload: Dict[str, Any]) -> bytes:
    data = json.dumps(payload).encode("utf-8")
    return HEADER.pack(len(data)) + data


def result_from_reply(reply: Dict[str, Any]) -> RunResult:
    return RunResult.from_dict(reply)


class Channel(Protocol):
    """A duplex byte stream to a supervisor."""

    def send(self, data: bytes) -> None: ...

    def recv_exact(self, size: int, deadline: Optional[float]) -> bytes: ...

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
        self._on_kill = on_kill
        self._killed = False

    def send(self, data: bytes) -> None:
        try:
            self.process.stdin.write(data)  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise WorkerDied(f"could not send to the sandbox worker: {exc}; {self.stderr_tail()}") from None

    def recv_exact(self, size: int, deadline: Optional[float]) -> bytes:
        chunks: List[bytes] = []
        while size:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise TimeoutError("the sandbox worker did not answer in time")
            readable, _, _ = select.select([self._stdout_fd], [], [], timeout)
            if not readable:
                continue
            chunk = os.read(self._stdout_fd, size)
            if not chunk:
                raise WorkerDied(
                    f"the sandbox worker exited (code {self.process.poll()}); {self.stderr_tail()}"
                )
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

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


class SupervisorWorker:
    """One supervisor behind a channel: send a request, read its result, under a host-side deadline."""

    def __init__(self, channel: Channel, startup_timeout_s: float = 30.0, expect_ready: bool = True) -> None:
        self.channel = channel
        self.runs = 0
        if expect_ready:
            hello = self._recv(time.monotonic() + startup_timeout_s)
            if not hello.get("ready"):
                raise WorkerDied(f"the sandbox worker sent {hello!r} instead of its ready message")

    def _recv(self, deadline: Optional[float]) -> Dict[str, Any]:
        header = self.channel.recv_exact(HEADER.size, deadline)
        body = self.channel.recv_exact(HEADER.unpack(header)[0], deadline)
        return json.loads(body.decode("utf-8"))

    def run(self, request: RunRequest, limits: Limits) -> RunResult:
        started = time.monotonic()
        deadline = None if limits.wall_s is None else started + limits.wall_s + BACKSTOP_S
        try:
            self.channel.send(frame(encode_request(request, limits)))
            reply = self._recv(deadline)
        except TimeoutError:
            self.channel.kill()
            return RunResult(
                status=Status.TIMEOUT,
                wall_time_s=time.monotonic() - started,
                message="the sandbox stopped answering; it was torn down",
            )
        except WorkerDied as exc:
            self.channel.kill()
            return RunResult(
                status=Status.KILLED,
                wall_time_s=time.monotonic() - started,
                message=f"the sandbox was torn down during the run: {exc}",
            )
        self.runs += 1
        return result_from_reply(reply)

    def alive(self) -> bool:
        return self.channel.alive()

    def kill(self, grace_s: float = 0.0) -> None:
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
    defence against state that a run might leave in its sandbox.
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
        self._cond = threading.Condition()
        self._closed = False
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
        with self._cond:
            self._starting -= 1
            if worker is not None and self._closed:
                worker.kill()
            elif worker is not None:
                self._all.append(worker)
                self._idle.append(worker)
            else:
                self._last_error = error
            self._cond.notify_all()

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

    def run(self, request: RunRequest, limits: Limits, acquire_timeout_s: float = 120.0) -> RunResult:
        try:
            worker = self._acquire(acquire_timeout_s)
        except (RuntimeError, TimeoutError) as exc:
            return RunResult.sandbox_error(str(exc))
        try:
            return worker.run(request, limits)
        finally:
            self._release(worker)

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Block until every worker has started (or failed to); True when all are ready."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._starting and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return len(self._all) >= self.size

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers, self._all, self._idle = list(self._all), [], []
            self._cond.notify_all()
        for worker in workers:
            worker.kill(grace_s=1.0)
