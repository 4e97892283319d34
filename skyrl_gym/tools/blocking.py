"""Run blocking tool work off the event loop: I/O in one bounded thread pool, CPU work in processes.

Hundreds of episodes can await tool calls at once; the pools bound how many run at a time, so the
event loop stays free and the machine is not flooded. Work that waits (HTTP, sandbox calls) goes to
threads (``run_blocking``; ``SKYRL_GYM_TOOL_THREADS``, default 32). Work that computes in Python, such
as parsing SQL with sqlglot, would hold the GIL in a thread and starve the event loop, so it goes to
helper processes (``run_cpu_bound``; ``SKYRL_GYM_TOOL_PROCESSES``, default ``min(4, cpus) + 1``; ``0``
runs it in the thread pool instead). The function must be importable by name, and it and its arguments must pickle.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading
from typing import Any, Callable, Optional, Tuple, TypeVar

from skygym_sandboxes.turns import Turns

from skyrl_gym.helper_processes import DEFAULT_SIZE, HelperPool

T = TypeVar("T")

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_turns: Optional[Turns] = None
_process_pool: Optional[HelperPool] = None
_pool_lock = threading.Lock()


def tool_thread_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool for blocking tool calls (created on first use)."""
    return _thread_pool_and_turns()[0]


def _thread_pool_and_turns() -> Tuple[concurrent.futures.ThreadPoolExecutor, Turns]:
    global _pool, _turns
    with _pool_lock:
        if _pool is None or _turns is None:
            workers = max(1, int(os.environ.get("SKYRL_GYM_TOOL_THREADS", "32")))
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="skyrl-tool")
            _turns = Turns(workers)
        return _pool, _turns


def tool_process_pool() -> Optional[HelperPool]:
    """The process-wide pool of helper processes for CPU-bound tool calls, or None when
    ``SKYRL_GYM_TOOL_PROCESSES=0``. Helpers are fresh interpreters (see :mod:`skyrl_gym.helper_processes`: a main
    script without an ``if __name__ == "__main__":`` guard is not run again in them) and import what the first call
    needs once."""
    global _process_pool
    workers = int(os.environ.get("SKYRL_GYM_TOOL_PROCESSES", str(DEFAULT_SIZE)))
    if workers <= 0:
        return None
    with _pool_lock:
        if _process_pool is None:
            _process_pool = HelperPool(workers)
        return _process_pool


async def run_blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await ``func(*args, **kwargs)`` run in the tool thread pool, in a copy of the caller's context. Its threads go
    to callers in turns by whose work it is (:mod:`skygym_sandboxes.turns`: serve-env's clients), as do the pools
    the call reaches in them."""
    pool, turns = _thread_pool_and_turns()
    return await turns.run_in_thread(pool, functools.partial(func, *args, **kwargs))


async def run_cpu_bound(func: Callable[..., T], *args: Any) -> T:
    """Await ``func(*args)`` run in a tool helper process (in the thread pool if processes are off). A helper that
    dies (killed, out of memory) is replaced and the call runs once more, so one lost helper costs a retry."""
    pool = tool_process_pool()
    if pool is None:
        return await run_blocking(func, *args)
    return await pool.acall(func, *args)
