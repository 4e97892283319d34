"""The ``Sandbox`` protocol every backend implements, and a base class that derives the async and
batch calls from a backend's synchronous ``_run``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
import time
from typing import List, Optional, Protocol, Sequence, Union, runtime_checkable

from skygym_sandboxes.types import Limits, RunRequest, RunResult
from skygym_sandboxes.workers import WarmPool

RequestLike = Union[RunRequest, str]


@runtime_checkable
class Sandbox(Protocol):
    """Runs untrusted programs under limits. Every call returns a :class:`RunResult`; a program that
    hangs, prints forever or crashes gives a result with the matching status, never an exception."""

    name: str
    limits: Limits

    def run(self, request: RequestLike) -> RunResult: ...

    async def arun(self, request: RequestLike) -> RunResult: ...

    def run_batch(
        self, requests: Sequence[RequestLike], concurrency: Optional[int] = None
    ) -> List[RunResult]: ...

    async def arun_batch(
        self, requests: Sequence[RequestLike], concurrency: Optional[int] = None
    ) -> List[RunResult]: ...

    def close(self) -> None: ...


def as_request(request: RequestLike) -> RunRequest:
    """A plain string is Python source."""
    if isinstance(request, RunRequest):
        return request
    if isinstance(request, str):
        return RunRequest(code=request)
    raise TypeError(f"expected a RunRequest or Python source as str, got {type(request).__name__}")


@functools.lru_cache(maxsize=None)
def _takes_cancel(backend: type) -> bool:
    """Whether ``backend._run`` takes ``cancel`` (every backend here does; ``run_batch`` always passes one)."""
    import inspect

    return "cancel" in inspect.signature(backend._run).parameters


class BaseSandbox:
    """Implements ``run``/``arun``/``run_batch``/``arun_batch`` on top of ``_run(request, limits)``.

    Subclasses set ``name`` and implement ``_run``, which may block (a worker's pipe, an HTTP call);
    async calls run it in threads so the event loop never blocks. ``concurrency`` bounds how many
    programs run at once in a batch (default: the backend's ``default_concurrency``).
    """

    name = "base"
    default_concurrency = 2
    _pool: Optional[WarmPool] = None  # the warm workers of a backend that keeps them

    def __init__(self, limits: Optional[Union[Limits, dict]] = None) -> None:
        self.limits = Limits.from_dict(limits) if not isinstance(limits, Limits) else limits
        self._closed = False
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._executor_lock = threading.Lock()

    # -- to implement --------------------------------------------------------------------------
    def _run(
        self, request: RunRequest, limits: Limits, cancel: Optional[threading.Event] = None
    ) -> RunResult:
        raise NotImplementedError

    # -- public API ----------------------------------------------------------------------------
    def run(self, request: RequestLike, cancel: Optional[threading.Event] = None) -> RunResult:
        """Run one program. ``cancel``, when set by another thread, abandons the run: its sandbox
        is torn down (and replaced) and the result is a ``sandbox_error``."""
        started = time.monotonic()
        try:
            request = as_request(request)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{self.name} sandbox: bad request: {exc}") from None
        if self._closed:
            return RunResult.sandbox_error(f"the {self.name} sandbox is closed", backend=self.name)
        limits = request.limits or self.limits
        try:
            takes_cancel = cancel is not None and _takes_cancel(type(self))  # a backend of someone else's may not
            result = self._run(request, limits, cancel) if takes_cancel else self._run(request, limits)
        except Exception as exc:  # a backend failure is a result, never the caller's exception
            result = RunResult.sandbox_error(
                f"{type(exc).__name__}: {exc}", backend=self.name, wall_time_s=time.monotonic() - started
            )
        result.backend = self.name
        return result

    async def arun(self, request: RequestLike) -> RunResult:
        # A pool of our own: asyncio's default one is small (cpus + 4) and shared with everything else.
        if self._executor is None:
            with self._executor_lock:
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        max_workers=max(32, self.default_concurrency), thread_name_prefix=f"{self.name}-arun"
                    )
        try:
            if self._pool is None:  # whose work it is goes along, for any pool the run reaches
                call = functools.partial(contextvars.copy_context().run, self.run, request)
                return await asyncio.get_running_loop().run_in_executor(self._executor, call)
            # A warm pool's turn is taken before a thread: this executor hands its threads out first come, first
            # served, and with every thread waiting for a worker, clients were served in arrival order. No time
            # limit on the wait, as in the executor's queue before: a trainer's batch may queue thousands of runs.
            return await self._pool.turns.run_in_thread(self._executor, self.run, request)
        except RuntimeError:  # the executor was shut down: close() ran meanwhile
            if not self._closed:
                raise
            return RunResult.sandbox_error("the sandbox was closed before this run started", backend=self.name)

    def run_batch(
        self, requests: Sequence[RequestLike], concurrency: Optional[int] = None
    ) -> List[RunResult]:
        requests = list(requests)
        if not requests:
            return []
        workers = max(1, min(len(requests), concurrency or self.default_concurrency))
        contexts = [contextvars.copy_context() for _ in requests]  # one each: a context runs in one thread at a time
        cancel = threading.Event()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{self.name}-batch")
        try:
            return list(pool.map(lambda context, request: context.run(self.run, request, cancel), contexts, requests))
        except BaseException:  # Ctrl-C: the runs under way are abandoned (their sandboxes torn down), those not begun
            cancel.set()  # never start; before, the batch ended only once every run reached its wall limit (56 s)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    async def arun_batch(
        self, requests: Sequence[RequestLike], concurrency: Optional[int] = None
    ) -> List[RunResult]:
        requests = list(requests)
        gate = asyncio.Semaphore(max(1, concurrency or self.default_concurrency))

        async def one(request: RequestLike) -> RunResult:
            async with gate:
                return await self.arun(request)

        return list(await asyncio.gather(*(one(request) for request in requests)))

    def close(self) -> None:
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def __enter__(self) -> "BaseSandbox":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: warm workers must not outlive their owner
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass
