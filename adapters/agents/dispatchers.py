"""Dispatchers: how a batch of trajectories moves through its three stages.

A dispatcher is ``async def dispatcher(cfg, trajectories, init_fn, run_fn, eval_fn)`` (SkyAgent's signature):
``cfg`` holds ``max_parallel_agents``, ``max_eval_parallel_agents``, ``num_instances``, ``num_trajectories``,
``sampling_params`` and ``on_trajectory_done`` (a callback, or None); ``trajectories`` maps an instance key to
``{trajectory_id: trajectory}``; the ``*_fn`` are the names of the stage methods. Register your own with
``@register_dispatcher("name")`` and name it in ``dispatcher.type``.

* ``async_pipeline`` (default): every trajectory goes initialize -> generate -> evaluate on its own, as soon as
  its previous stage is done; at most ``max_parallel_agents`` trajectories are initializing and at most
  ``max_parallel_agents`` generating at once, and at most ``max_eval_parallel_agents`` evaluating. While one
  trajectory waits for its container, another generates and a third is being graded.
* ``async_batch``: every trajectory runs its three stages back to back; at most ``max_parallel_agents``
  trajectories are in flight at once (SkyAgent's starts all of them at once, with no limit).

A stage method that raises (a bug in a user's trajectory) marks that trajectory failed and skips its later stages.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Dict, Iterator, Tuple

logger = logging.getLogger(__name__)

Dispatcher = Callable[[Dict[str, Any], Dict[Any, Dict[int, Any]], str, str, str], Awaitable[None]]
DISPATCHER_REGISTRY: Dict[str, Dispatcher] = {}


def register_dispatcher(name: str) -> Callable[[Dispatcher], Dispatcher]:
    def decorator(fn: Dispatcher) -> Dispatcher:
        DISPATCHER_REGISTRY[name] = fn
        return fn

    return decorator


def iter_trajectories(trajectories: Dict[Any, Dict[int, Any]]) -> Iterator[Tuple[Any, int, Any]]:
    """(instance key, trajectory id, trajectory), lowest trajectory ids first so that every instance starts early."""
    order = [
        (trajectory_id, position, key)
        for position, (key, per) in enumerate(trajectories.items())
        for trajectory_id in per
    ]
    for trajectory_id, _, key in sorted(order, key=lambda item: (item[0], item[1])):
        yield key, trajectory_id, trajectories[key][trajectory_id]


async def run_stage(trajectory: Any, name: str) -> bool:
    """Run one stage; False (and the trajectory marked failed) when it raised."""
    try:
        await getattr(trajectory, name)()
        return True
    except Exception as exc:
        logger.warning("trajectory stage %s raised: %s", name, exc, exc_info=True)
        fail = getattr(trajectory, "fail", None)
        if callable(fail):
            fail("error_runtime", f"{name}: {type(exc).__name__}: {exc}")
        return False


def _done(cfg: Dict[str, Any], trajectory: Any) -> None:
    callback = cfg.get("on_trajectory_done")
    if callback is not None:
        callback(trajectory)


@register_dispatcher("async_pipeline")
async def async_pipeline_dispatcher(
    cfg: Dict[str, Any], trajectories: Dict[Any, Dict[int, Any]], init_fn: str, run_fn: str, eval_fn: str
) -> None:
    init_slots = asyncio.Semaphore(int(cfg["max_parallel_agents"]))
    run_slots = asyncio.Semaphore(int(cfg["max_parallel_agents"]))
    eval_slots = asyncio.Semaphore(int(cfg.get("max_eval_parallel_agents") or cfg["max_parallel_agents"]))

    async def one(trajectory: Any) -> None:
        for slots, name in ((init_slots, init_fn), (run_slots, run_fn), (eval_slots, eval_fn)):
            if name is None:
                continue
            async with slots:
                if not await run_stage(trajectory, name):
                    break
        _done(cfg, trajectory)

    await asyncio.gather(*(one(t) for _, _, t in iter_trajectories(trajectories)))


@register_dispatcher("async_batch")
async def async_batch_dispatcher(
    cfg: Dict[str, Any], trajectories: Dict[Any, Dict[int, Any]], init_fn: str, run_fn: str, eval_fn: str
) -> None:
    slots = asyncio.Semaphore(int(cfg["max_parallel_agents"]))

    async def one(trajectory: Any) -> None:
        async with slots:
            for name in (init_fn, run_fn, eval_fn):
                if name is not None and not await run_stage(trajectory, name):
                    break
        _done(cfg, trajectory)

    await asyncio.gather(*(one(t) for _, _, t in iter_trajectories(trajectories)))


__all__ = [
    "DISPATCHER_REGISTRY",
    "Dispatcher",
    "async_batch_dispatcher",
    "async_pipeline_dispatcher",
    "iter_trajectories",
    "register_dispatcher",
    "run_stage",
]
