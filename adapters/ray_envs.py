"""Envs in Ray actors: rollouts spread env work over a Ray cluster.

An :class:`EnvWorkerPool` places ``num_workers`` :class:`EnvWorker` actors (``scheduling_strategy="SPREAD"`` puts
them on as many nodes as it can; CPUs and custom resources per actor are settable). Each actor hosts many env
sessions. :meth:`EnvWorkerPool.env_factory` is a ``make_env`` for :func:`skyrl_gym.episode.run_episode`: it builds
the env inside the least busy live actor and returns a :class:`RayEnv`, which behaves like the local env (``init``,
``step``, ``await astep``, ``get_metrics``, ``close``, ``max_turns``, ``tool_schemas``) and forwards every call to
the actor. ``await env.astep(action)`` awaits the actor call, so hundreds of episodes wait on one event loop.

>>> pool = EnvWorkerPool(num_workers=4, num_cpus_per_worker=1)                  # doctest: +SKIP
>>> episode = await run_episode(pool.env_factory("gsm8k", None, row), row["prompt"], policy,
...                             caller=RayEnvCaller())                          # doctest: +SKIP
>>> pool.shutdown()                                                             # doctest: +SKIP

The trainer's generator uses a pool when ``environment.ray_env_workers.num_workers > 0`` (``RolloutConfig``:
``ray_env_workers`` and ``ray_env_worker_options``).

Errors: an env that raises inside an actor raises the same exception here (the env's own type and message), so
the episode ends with the same error result as with a local env. An actor that dies raises
:class:`EnvWorkerDied` naming the worker and its node; the pool sends no new session there, and when every worker
is dead :class:`EnvWorkerDied` says so. ``RayEnv.close`` ends the session in the actor; ``pool.shutdown()`` closes
the sessions still open in every actor, then ends the actors.

The env ids must be registered in the actor's process: built-in ids and installed packages' entry points are;
``imports=["my_pkg.envs"]`` imports modules that register more when each actor starts.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import socket
import threading
import time
import uuid
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from skyrl_gym.core import Env, StepOutput
from skyrl_gym.episode import EnvCaller
from skyrl_gym.remote.proxy import ProxyEnv

logger = logging.getLogger(__name__)

SCHEDULING_STRATEGIES = ("SPREAD", "DEFAULT")


class EnvWorkerDied(RuntimeError):
    """The Ray actor hosting an env died (its sessions are lost), or no live env worker is left."""


# --------------------------------------------------------------------------------------------------- the actor
class EnvWorker:
    """Hosts env sessions in a Ray actor (a threaded actor: ``max_concurrency`` calls at once). Used through
    :class:`EnvWorkerPool`; every method takes the session id the client chose."""

    def __init__(self, index: int, imports: Sequence[str] = ()) -> None:
        for module in imports:
            importlib.import_module(module)
        self.index = index
        self._sessions: Dict[str, Env] = {}
        self._lock = threading.Lock()
        self._calls: Dict[str, int] = {}
        self._errors = 0
        self._created = 0
        self._closed = 0
        try:
            import ray

            self.node_id = ray.get_runtime_context().get_node_id()
        except Exception:  # run outside Ray (tests of the class itself)
            self.node_id = ""

    # --- bookkeeping
    def _count(self, method: str) -> None:
        with self._lock:
            self._calls[method] = self._calls.get(method, 0) + 1

    def _env(self, session_id: str) -> Env:
        env = self._sessions.get(session_id)
        if env is None:
            raise KeyError(
                f"env worker {self.index}: no open session {session_id!r} (closed, or never created)"
            )
        return env

    def _run(self, method: str, fn: Callable[[], Any]) -> Any:
        self._count(method)
        try:
            return fn()
        except BaseException:
            with self._lock:
                self._errors += 1
            raise

    # --- the env's calls
    def create(
        self, session_id: str, env_class: str, env_config: Any, extras: Optional[Dict[str, Any]]
    ) -> Dict[str, Any]:
        def build() -> Dict[str, Any]:
            from skyrl_gym.registration import make

            env = make(env_class, env_config=env_config, extras=dict(extras or {}))
            with self._lock:
                self._sessions[session_id] = env
                self._created += 1
            schemas = getattr(env, "tool_schemas", None)
            try:
                tool_schemas = list(schemas()) if callable(schemas) else []
            except Exception:
                tool_schemas = []
            return {
                "max_turns": getattr(env, "max_turns", None),
                "max_turns_is_default": bool(getattr(env, "max_turns_is_default", False)),
                "tool_schemas": tool_schemas,
                "worker": self.index,
                "node_id": self.node_id,
            }

        return self._run("create", build)

    def init(self, session_id: str, prompt: Any) -> Tuple[Any, Any]:
        return self._run("init", lambda: self._env(session_id).init(prompt))

    def step(self, session_id: str, action: Any, max_turns: Optional[int] = None) -> Dict[str, Any]:
        def step() -> Dict[str, Any]:
            env = self._env(session_id)
            if max_turns is not None and hasattr(env, "max_turns"):
                env.max_turns = max_turns
            output = env.step(action)
            answer: Dict[str, Any] = {"output": output, "turns": getattr(env, "turns", None)}
            get_metrics = getattr(env, "get_metrics", None)
            if isinstance(output, Mapping) and output.get("done") and callable(get_metrics):
                try:  # saves the client a round trip at the end; a failure is raised by get_metrics() itself
                    answer["metrics"] = get_metrics()
                except Exception:
                    pass
            return answer

        return self._run("step", step)

    def get_metrics(self, session_id: str) -> Any:
        def metrics() -> Any:
            get_metrics = getattr(self._env(session_id), "get_metrics", None)
            return get_metrics() if callable(get_metrics) else {}

        return self._run("get_metrics", metrics)

    def close(self, session_id: str) -> bool:
        """Close one session; False when it was not open (closed already)."""

        def close() -> bool:
            with self._lock:
                env = self._sessions.pop(session_id, None)
            if env is None:
                return False
            with self._lock:
                self._closed += 1
            env.close()
            return True

        return self._run("close", close)

    def close_all(self) -> Dict[str, Any]:
        """Close every open session (the pool's shutdown); returns how many, and the close errors."""
        with self._lock:
            sessions, self._sessions = dict(self._sessions), {}
        errors = []
        for session_id, env in sessions.items():
            try:
                env.close()
            except Exception as exc:
                errors.append(f"{session_id}: {type(exc).__name__}: {exc}")
        with self._lock:
            self._closed += len(sessions)
        return {"closed": len(sessions), "errors": errors}

    def info(self) -> Dict[str, Any]:
        """Where this worker runs and what it did: node id, host, pid, sessions open, calls per method."""
        with self._lock:
            return {
                "worker": self.index,
                "node_id": self.node_id,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "sessions_open": len(self._sessions),
                "sessions_created": self._created,
                "sessions_closed": self._closed,
                "calls": dict(self._calls),
                "errors": self._errors,
            }


# --------------------------------------------------------------------------------------------------- errors
def _last_line(text: str) -> str:
    """The last non-empty line of Ray's error text (the exception raised in the actor), without colour codes."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines() if line.strip()]
    return lines[-1][:500] if lines else text[:500]


def _ray_exceptions() -> Tuple[type, type]:
    from ray.exceptions import RayActorError, RayTaskError

    return RayTaskError, RayActorError


# --------------------------------------------------------------------------------------------------- the client
class RayEnv(ProxyEnv):
    """An env session living in an :class:`EnvWorker` actor; behaves like the local env it forwards to."""

    def __init__(
        self,
        pool: "EnvWorkerPool",
        worker: int,
        session_id: str,
        env_class: str,
        described: Mapping[str, Any],
    ) -> None:
        super().__init__()
        self.pool = pool
        self.worker = worker
        self.session_id = session_id
        self.env_class = env_class
        self.node_id: str = str(described.get("node_id") or "")
        self._describe(described)
        self._closed = False
        self.close_error: Optional[str] = None

    def __str__(self) -> str:
        return f"RayEnv<{self.env_class} in env worker {self.worker}>"

    # ----- calls
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self}: the session was closed")

    def _submit(self, method: str, *args: Any) -> Any:
        return self.pool._submit(self.worker, method, self.session_id, *args)

    def _get(self, method: str, *args: Any) -> Any:
        return self.pool._get(self.worker, method, self._submit(method, *args), self.env_class)

    async def _await(self, method: str, *args: Any) -> Any:
        return await self.pool._await(self.worker, method, self._submit(method, *args), self.env_class)

    def init(self, prompt: Any = None) -> Tuple[Any, Any]:
        self._check_open()
        result = self._get("init", prompt)
        self.turns, self._metrics = 0, None
        return result

    async def ainit(self, prompt: Any = None) -> Tuple[Any, Any]:
        self._check_open()
        result = await self._await("init", prompt)
        self.turns, self._metrics = 0, None
        return result

    def step(self, action: Any) -> StepOutput:
        self._check_open()
        return self._stepped(self._get("step", action, self._max_turns_to_send))

    async def astep(self, action: Any) -> StepOutput:
        self._check_open()
        return self._stepped(await self._await("step", action, self._max_turns_to_send))

    def get_metrics(self) -> Dict[str, Any]:
        if self._metrics is not None:  # sent with the step that ended the episode
            return dict(self._metrics)
        return {} if self._closed else self._get("get_metrics")

    async def aget_metrics(self) -> Dict[str, Any]:
        if self._metrics is not None:
            return dict(self._metrics)
        return {} if self._closed else await self._await("get_metrics")

    def _closing(self) -> bool:
        if self._closed:
            return False
        self._closed = True
        self.pool._session_closed(self.worker)
        return True

    def close(self) -> None:
        """End the session in the actor; a second call does nothing. A dead actor took the session with it: that
        is kept in ``close_error``, not raised; an env whose own ``close`` raised raises here too."""
        if self._closing():
            try:
                self._get("close")
            except EnvWorkerDied as exc:
                self.close_error = str(exc)

    async def aclose(self) -> None:
        if self._closing():
            try:
                await self._await("close")
            except EnvWorkerDied as exc:
                self.close_error = str(exc)

    def __del__(self) -> None:  # a session its user forgot: ended in the actor, without waiting
        try:
            if not self._closed and self.pool is not None:
                self._closed = True
                self.pool._session_closed(self.worker)
                self._submit("close")
        except Exception:
            pass


class RayEnvFactory:
    """``make_env`` for :func:`skyrl_gym.episode.run_episode`: builds the env in a worker of ``pool``."""

    def __init__(
        self,
        pool: "EnvWorkerPool",
        env_class: str,
        env_config: Any = None,
        extras: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.pool, self.env_class, self.env_config = pool, env_class, env_config
        self.extras = dict(extras or {})

    def __call__(self) -> RayEnv:
        return self.pool.make(self.env_class, self.env_config, self.extras)

    async def acreate(self) -> RayEnv:
        return await self.pool.amake(self.env_class, self.env_config, self.extras)


class _Awaiting:
    """A coroutine function that :class:`RayEnvCaller` awaits instead of running a blocking call."""

    def __init__(self, coroutine_fn: Callable[[], Awaitable[Any]]) -> None:
        self.coroutine_fn = coroutine_fn


class RayEnvCaller(EnvCaller):
    """An :class:`~skyrl_gym.episode.EnvCaller` that awaits a :class:`RayEnv`'s make, init, get_metrics and close
    (and step, as every caller does) instead of blocking a thread on them; other envs' calls run as
    ``EnvCaller(executor)`` runs them."""

    async def call(self, method: str, fn: Callable[..., Any], *args: Any) -> Any:
        native = _native_call(method, fn, args)
        if native is None:
            return await super().call(method, fn, *args)
        return await super().call(method, _Awaiting(native))

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if isinstance(fn, _Awaiting):
            return await fn.coroutine_fn()
        return await super()._run(fn, *args)


def _native_call(method: str, fn: Any, args: Tuple[Any, ...]) -> Optional[Callable[[], Awaitable[Any]]]:
    if isinstance(fn, RayEnvFactory):
        return fn.acreate
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, RayEnv):
        if method == "init":
            return lambda: owner.ainit(*args)
        if method == "close":
            return owner.aclose
    if method == "get_metrics" and len(args) == 1 and isinstance(args[0], RayEnv):
        return args[0].aget_metrics
    return None


# --------------------------------------------------------------------------------------------------- the pool
class EnvWorkerPool:
    """``num_workers`` :class:`EnvWorker` actors, started on first use (or by :meth:`start`).

    Args:
        num_workers: actors to place.
        num_cpus_per_worker: CPUs Ray reserves for each actor (0 is allowed: the actor then takes no CPU slot).
        resources_per_worker: custom Ray resources each actor needs (e.g. ``{"env_node": 1}`` to keep env work on
            nodes started with that resource).
        scheduling_strategy: ``SPREAD`` (over as many nodes as possible) or ``DEFAULT`` (Ray's own placement).
        max_concurrency: calls one actor runs at once (threads); sessions beyond it wait their turn.
        imports: modules each actor imports when it starts (to register env ids that are not built in or
            installed through an entry point).
        start_timeout_s: how long :meth:`start` waits for every actor to be placed and answer.
        ray_init_kwargs: passed to ``ray.init`` when Ray is not started yet (then it joins ``RAY_ADDRESS`` if set,
            else starts a local Ray).
    """

    def __init__(
        self,
        num_workers: int,
        num_cpus_per_worker: float = 1.0,
        resources_per_worker: Optional[Mapping[str, float]] = None,
        scheduling_strategy: str = "SPREAD",
        max_concurrency: int = 32,
        imports: Sequence[str] = (),
        start_timeout_s: float = 120.0,
        ray_init_kwargs: Optional[Mapping[str, Any]] = None,
    ) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an integer >= 1, got {num_workers!r}")
        if num_cpus_per_worker < 0:
            raise ValueError(f"num_cpus_per_worker must be >= 0, got {num_cpus_per_worker!r}")
        if scheduling_strategy not in SCHEDULING_STRATEGIES:
            raise ValueError(
                f"scheduling_strategy must be one of {SCHEDULING_STRATEGIES}, got {scheduling_strategy!r}"
            )
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
        self.num_workers = num_workers
        self.num_cpus_per_worker = float(num_cpus_per_worker)
        self.resources_per_worker = {str(k): float(v) for k, v in (resources_per_worker or {}).items()}
        self.scheduling_strategy = scheduling_strategy
        self.max_concurrency = max_concurrency
        self.imports = list(imports)
        self.start_timeout_s = float(start_timeout_s)
        self.ray_init_kwargs = dict(ray_init_kwargs or {})
        self._actors: List[Any] = []
        self._alive: List[bool] = []
        self._open: List[int] = []
        self._nodes: List[str] = []
        self._lock = threading.Lock()
        self._next = 0
        self._started = False

    # ----- life cycle
    def start(self) -> "EnvWorkerPool":
        """Place the actors and wait until each answers; a clear error when the cluster cannot hold them."""
        with self._lock:
            if self._started:
                return self
            import ray

            if not ray.is_initialized():
                os.environ.setdefault("RAY_AUTH_MODE", "disabled")
                ray.init(**{"include_dashboard": False, **self.ray_init_kwargs})
            options: Dict[str, Any] = {
                "num_cpus": self.num_cpus_per_worker,
                "max_concurrency": self.max_concurrency,
                "scheduling_strategy": self.scheduling_strategy,
                "max_restarts": 0,
            }
            if self.resources_per_worker:
                options["resources"] = dict(self.resources_per_worker)
            asked, held = self.num_workers * self.num_cpus_per_worker, ray.cluster_resources().get("CPU", 0.0)
            if asked > held:  # said now: the wait below is for nodes that may join (an autoscaling cluster)
                logger.warning("EnvWorkerPool: %d workers x %g CPUs is more than the cluster's %g CPUs in all: "
                               "waiting up to %g s for nodes to join; else lower num_workers or num_cpus_per_worker",
                               self.num_workers, self.num_cpus_per_worker, held, self.start_timeout_s)
            actor_class = ray.remote(EnvWorker)
            actors = [actor_class.options(**options).remote(i, self.imports) for i in range(self.num_workers)]
            try:
                infos = ray.get([a.info.remote() for a in actors], timeout=self.start_timeout_s)
            except ray.exceptions.GetTimeoutError:
                for actor in actors:
                    ray.kill(actor)
                raise EnvWorkerDied(
                    f"could not place {self.num_workers} env workers ({self.num_cpus_per_worker:g} CPUs"
                    f"{' and ' + str(self.resources_per_worker) if self.resources_per_worker else ''} each) within "
                    f"{self.start_timeout_s:g} s: the cluster has {ray.cluster_resources()} in all and "
                    f"{ray.available_resources()} free; use fewer workers, fewer CPUs per worker, or add nodes"
                ) from None
            except Exception as exc:
                for actor in actors:
                    ray.kill(actor)
                raise EnvWorkerDied(
                    f"env workers failed to start ({type(exc).__name__}): {_last_line(str(exc))}"
                ) from exc
            self._actors = actors
            self._alive = [True] * len(actors)
            self._open = [0] * len(actors)
            self._nodes = [str(info.get("node_id") or "") for info in infos]
            self._started = True
            logger.info("%d env workers on %d node(s)", len(actors), len(set(self._nodes)))
        return self

    async def astart(self) -> "EnvWorkerPool":
        """:meth:`start` from a coroutine: waits for the actors on a thread (Ray itself, when it is not started
        yet, starts on the calling thread, which its processes are bound to)."""
        if self._started:
            return self
        import asyncio

        import ray

        if not ray.is_initialized():
            return self.start()
        return await asyncio.to_thread(self.start)

    def shutdown(self, timeout_s: float = 30.0) -> int:
        """Close the sessions still open in every live actor (their envs' ``close``), then end the actors
        (``ray.kill``: they go shortly after this returns). Returns how many sessions were closed."""
        with self._lock:
            if not self._started:
                return 0
            actors, alive = self._actors, self._alive
            self._actors, self._alive, self._open, self._started = [], [], [], False
        import ray

        pending = [actor.close_all.remote() for actor, ok in zip(actors, alive) if ok]
        closed = 0
        try:
            for result in ray.get(pending, timeout=timeout_s):
                closed += result["closed"]
                for error in result.get("errors", []):
                    logger.warning("env worker shutdown: close failed for %s", error)
        except Exception as exc:
            logger.warning("env workers: closing their sessions failed (%s: %s)", type(exc).__name__, exc)
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception:
                pass
        return closed

    close = shutdown

    def __enter__(self) -> "EnvWorkerPool":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    # ----- sessions
    def env_factory(
        self, env_class: str, env_config: Any = None, extras: Optional[Mapping[str, Any]] = None
    ) -> RayEnvFactory:
        """``make_env`` for :func:`~skyrl_gym.episode.run_episode` (a :class:`RayEnvCaller` awaits it)."""
        return RayEnvFactory(self, env_class, env_config, extras)

    def _pick(self) -> int:
        """The live worker with the fewest open sessions (round robin among equals); reserves a session there."""
        with self._lock:
            live = [i for i, ok in enumerate(self._alive) if ok]
            if not live:
                raise EnvWorkerDied(f"all {self.num_workers} env workers have died; no env can be built")
            count = len(self._alive)
            order = [(self._next + k) % count for k in range(count)]
            index = min((i for i in order if self._alive[i]), key=lambda i: self._open[i])
            self._next = (index + 1) % count
            self._open[index] += 1
            return index

    def _session_closed(self, worker: int) -> None:
        with self._lock:
            if worker < len(self._open) and self._open[worker] > 0:
                self._open[worker] -= 1

    def _create_args(self, env_class: str, env_config: Any, extras: Any) -> Tuple[str, Any, Any]:
        if hasattr(env_config, "items") and not isinstance(env_config, dict):  # an OmegaConf section
            env_config = {k: v for k, v in env_config.items()}
        return uuid.uuid4().hex, env_config, dict(extras or {})

    def make(
        self, env_class: str, env_config: Any = None, extras: Optional[Mapping[str, Any]] = None
    ) -> RayEnv:
        """Build ``env_class`` in a worker (blocking); see :meth:`amake`."""
        self.start()
        session_id, env_config, extras = self._create_args(env_class, env_config, extras)
        worker = self._pick()
        try:
            described = self._get(
                worker,
                "create",
                self._submit(worker, "create", session_id, env_class, env_config, extras),
                env_class,
            )
        except BaseException:
            self._session_closed(worker)
            raise
        return RayEnv(self, worker, session_id, env_class, described)

    async def amake(
        self, env_class: str, env_config: Any = None, extras: Optional[Mapping[str, Any]] = None
    ) -> RayEnv:
        """Build ``env_class`` in the least busy live worker and return the :class:`RayEnv` that drives it."""
        await self.astart()
        session_id, env_config, extras = self._create_args(env_class, env_config, extras)
        worker = self._pick()
        try:
            described = await self._await(
                worker,
                "create",
                self._submit(worker, "create", session_id, env_class, env_config, extras),
                env_class,
            )
        except BaseException:
            self._session_closed(worker)
            raise
        return RayEnv(self, worker, session_id, env_class, described)

    # ----- calls to the actors
    def _submit(self, worker: int, method: str, *args: Any) -> Any:
        actors = self._actors
        if worker >= len(actors):
            raise EnvWorkerDied(f"env worker {worker}: the pool was shut down")
        return getattr(actors[worker], method).remote(*args)

    def _get(self, worker: int, method: str, ref: Any, env_class: str) -> Any:
        import ray

        try:
            return ray.get(ref)
        except Exception as exc:
            raise self._translate(worker, method, exc, env_class) from None

    async def _await(self, worker: int, method: str, ref: Any, env_class: str) -> Any:
        try:
            return await ref
        except Exception as exc:
            raise self._translate(worker, method, exc, env_class) from None

    def _translate(self, worker: int, method: str, exc: BaseException, env_class: str) -> BaseException:
        """The env's own exception for an error raised in the actor; :class:`EnvWorkerDied` for a dead actor."""
        task_error, actor_error = _ray_exceptions()
        if isinstance(exc, actor_error):
            with self._lock:
                if worker < len(self._alive):
                    self._alive[worker] = False
                live = sum(self._alive)
            node = self._nodes[worker][:12] if worker < len(self._nodes) else "?"
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return EnvWorkerDied(
                f"env worker {worker} (Ray actor on node {node}) died during {method} of a {env_class!r} env; its "
                f"sessions are lost ({live} of {self.num_workers} workers left): {detail[:300]}"
            )
        if isinstance(exc, task_error):
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                try:
                    cause.add_note(f"(raised in env worker {worker} of a Ray env pool)")
                except Exception:
                    pass
                return cause
        return exc

    # ----- what the workers did
    @property
    def started(self) -> bool:
        return self._started

    def worker_nodes(self) -> List[str]:
        """The Ray node id of each worker (started workers only)."""
        return list(self._nodes)

    def alive(self) -> List[bool]:
        return list(self._alive)

    def open_sessions(self) -> List[int]:
        """Sessions the pool has open on each worker (its own count, no actor call)."""
        with self._lock:
            return list(self._open)

    def worker_info(self, timeout_s: float = 30.0) -> List[Optional[Dict[str, Any]]]:
        """Each live worker's :meth:`EnvWorker.info` (node id, pid, sessions, calls per method); None for a dead
        one."""
        import ray

        refs = [actor.info.remote() if ok else None for actor, ok in zip(self._actors, self._alive)]
        out: List[Optional[Dict[str, Any]]] = []
        deadline = time.monotonic() + timeout_s
        for i, ref in enumerate(refs):
            if ref is None:
                out.append(None)
                continue
            try:
                out.append(ray.get(ref, timeout=max(0.1, deadline - time.monotonic())))
            except Exception as exc:
                self._translate(i, "info", exc, "")
                out.append(None)
        return out


__all__ = [
    "EnvWorker",
    "EnvWorkerDied",
    "EnvWorkerPool",
    "RayEnv",
    "RayEnvCaller",
    "RayEnvFactory",
    "SCHEDULING_STRATEGIES",
]
