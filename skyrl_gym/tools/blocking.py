"""Run blocking tool work off the event loop: I/O in one bounded thread pool, CPU work in processes.

Hundreds of episodes can await tool calls at once; the pools bound how many run at a time, so the
event loop stays free and the machine is not flooded. Work that waits (HTTP, sandbox calls) goes to
threads (``run_blocking``; ``SKYRL_GYM_TOOL_THREADS``, default 32). Work that computes in Python, such
as parsing SQL with sqlglot, would hold the GIL in a thread and starve the event loop, so it goes to
worker processes (``run_cpu_bound``; ``SKYRL_GYM_TOOL_PROCESSES``, default ``min(4, cpus)``; ``0``
runs it in the thread pool instead). The function and its arguments must pickle.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import os
import select
import threading
import time
from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_process_pool: Optional[concurrent.futures.ProcessPoolExecutor] = None
_pool_lock = threading.Lock()


def tool_thread_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool for blocking tool calls (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            workers = int(os.environ.get("SKYRL_GYM_TOOL_THREADS", "32"))
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="skyrl-tool")
        return _pool


def _end_with(owner: int) -> None:
    """Pool initializer: a worker ends when the process that made the pool ends. One that outlived it waited on its
    call queue for good (it holds both ends of the pipe) and kept the fork server alive too (every worker holds the
    server's lifeline): an owner killed, or ended by ``os._exit`` as Ray actors and pytest-xdist workers end, left
    a fork server and its workers behind for good, 85 MB each."""

    def watch() -> None:
        try:  # a pidfd is readable once the owner has ended, and no pid can be reused meanwhile
            select.select([os.pidfd_open(owner)], [], [])
        except ProcessLookupError:  # ended already
            pass
        except (AttributeError, OSError):  # no pidfd (not Linux 5.3 or later): ask every second
            from skygym_sandboxes.workers import pid_alive

            while pid_alive(owner):
                time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="skyrl-tool-owner", daemon=True).start()


def tool_process_pool() -> Optional[concurrent.futures.ProcessPoolExecutor]:
    """The process-wide pool for CPU-bound tool calls, or None when ``SKYRL_GYM_TOOL_PROCESSES=0``.

    Workers come from a fork server (a clean interpreter, not a fork of this possibly threaded process)
    and import what the first call needs once.
    """
    global _process_pool
    workers = int(os.environ.get("SKYRL_GYM_TOOL_PROCESSES", str(min(4, os.cpu_count() or 1))))
    if workers <= 0:
        return None
    with _pool_lock:
        if _process_pool is None:
            import multiprocessing

            context = multiprocessing.get_context("forkserver")
            _process_pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=workers, mp_context=context, initializer=_end_with, initargs=(os.getpid(),))
            atexit.register(_process_pool.shutdown, wait=True, cancel_futures=True)  # before teardown
        return _process_pool


async def run_blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await ``func(*args, **kwargs)`` run in the tool thread pool."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(tool_thread_pool(), functools.partial(func, *args, **kwargs))


async def run_cpu_bound(func: Callable[..., T], *args: Any) -> T:
    """Await ``func(*args)`` run in a tool worker process (in the thread pool if processes are off).

    A worker that dies (killed, out of memory) breaks the pool; the pool is then replaced and the
    call runs once more, so one lost worker costs a retry, not every later call.
    """
    global _process_pool
    pool = tool_process_pool()
    if pool is None:
        return await run_blocking(func, *args)
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(pool, func, *args)
    except concurrent.futures.process.BrokenProcessPool:
        with _pool_lock:
            if _process_pool is pool:
                _process_pool = None
        pool.shutdown(wait=False, cancel_futures=True)
        try:
            return await loop.run_in_executor(tool_process_pool(), func, *args)
        except concurrent.futures.process.BrokenProcessPool as exc:
            raise concurrent.futures.process.BrokenProcessPool(
                f"{exc} Twice in a row: a worker that dies as it starts is most often a script without an "
                "`if __name__ == \"__main__\":` guard (worker processes import the main script again, as "
                "multiprocessing's do); put the script's work under one, or set SKYRL_GYM_TOOL_PROCESSES=0 to run "
                "tool calls in threads") from exc
