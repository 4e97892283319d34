"""Run blocking tool work (SQLite queries, sandbox calls) off the event loop in one bounded pool.

Hundreds of episodes can await tool calls at once; the pool bounds how many run at a time, so
the event loop stays free and the machine is not flooded with threads. The size comes from
``SKYRL_GYM_TOOL_THREADS`` (default 32).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_lock = threading.Lock()


def tool_thread_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool for blocking tool calls (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            workers = int(os.environ.get("SKYRL_GYM_TOOL_THREADS", "32"))
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="skyrl-tool")
        return _pool


async def run_blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await ``func(*args, **kwargs)`` run in the tool pool."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(tool_thread_pool(), functools.partial(func, *args, **kwargs))


async def step_env(env: Any, action: Any) -> Any:
    """``await env.astep(action)`` when the env has an async path (the tool envs), else
    ``env.step(action)`` in the tool pool: the one call a rollout loop needs for any env."""
    astep = getattr(env, "astep", None)
    if astep is not None and asyncio.iscoroutinefunction(astep):
        return await astep(action)
    return await run_blocking(env.step, action)


async def init_env(env: Any, prompt: Any) -> Any:
    """``env.ainit(prompt)`` when present, else ``env.init(prompt)`` in the tool pool."""
    ainit = getattr(env, "ainit", None)
    if ainit is not None and asyncio.iscoroutinefunction(ainit):
        return await ainit(prompt)
    return await run_blocking(env.init, prompt)
