"""Inference engines as Ray actors, placed with placement groups, on any node of the cluster.

With ``generator.run_engines_locally=true`` (as SkyRL-train's configs have it) and ``trainer.use_ray=true``, the
trainer starts ``generator.num_inference_engines`` :class:`EngineActor` s, each holding one engine of
``generator.backend`` (``hf``; ``vllm`` where it is installed) built the same way as in the trainer's process.
With ``trainer.placement.colocate_all`` they take a share of the policy's placement-group bundles (engine ``i`` on
bundle ``i`` modulo the bundle count); otherwise a placement group of their own, one bundle per engine
(``generator.engine_placement_strategy``), wherever Ray finds room: another node included.

The trainer talks to each through an :class:`EngineActorClient`, an ordinary
:class:`~skygym_adapters.types.InferenceEngine`, so ``EngineClient`` and the rollout loop use it unchanged;
``generate`` awaits the actor's ObjectRef on the caller's event loop without blocking it. Weights reach the actors
from policy rank 0 by the bucketed broadcast of ``weight_sync`` (each actor receives with a ``WeightReceiver``),
never through the driver.
"""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any, Callable, Dict, List, Optional

from skygym_adapters.engines.base import BaseInferenceEngine, validate_prompts
from skygym_adapters.types import InferenceEngineOutput, SamplingParams
from skygym_train.config.validation import engines_are_ray_actors

EngineBuilder = Callable[..., List[Any]]
"""``(cfg, model_path, tokenizer) -> [engine]``: how the trainer's process builds its engines
(``generation.create_engines``); each actor builds its one engine with it."""


class EngineActor:
    """The actor's side: one engine, built from the trainer's config, and the receiving end of the weight broadcast.

    Its methods are coroutines (an asyncio actor), so many ``generate`` calls are in flight at once and the
    engine batches them; blocking work (joining the broadcast group, receiving) runs in a thread.
    """

    def __init__(self, cfg: Any, model_path: str, tokenizer: Any, index: int, build: EngineBuilder,
                 num_threads: Optional[int] = None):
        import torch

        if num_threads:
            # Ray sets OMP_NUM_THREADS to the actor's (fractional, rounded) CPU request: use the bundle's cores
            torch.set_num_threads(int(num_threads))
        own = copy.deepcopy(cfg)
        own.generator.run_engines_locally = None  # build it here, as the trainer's process would
        own.generator.num_inference_engines = 1
        own.trainer.seed = int(cfg.trainer.seed) + index  # vLLM: engines sample differently
        self.engine = build(own, model_path, tokenizer)[0]
        self.index = index
        self.receiver: Any = None
        self.weights_received = 0

    def info(self) -> Dict[str, Any]:
        """Where the actor runs and what its weights are: node id and IP, pid, dtype, torch threads."""
        import ray
        import torch

        dtype = getattr(self.engine, "weight_dtype", None)
        return {
            "index": self.index,
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "weight_dtype": str(dtype).replace("torch.", "") if dtype is not None else None,
            "torch_threads": torch.get_num_threads(),
        }

    async def generate(self, prompts: List[List[int]], sampling_params: Optional[Dict[str, Any]],
                       messages: Optional[List[Any]] = None,
                       session_ids: Optional[List[Optional[str]]] = None) -> InferenceEngineOutput:
        return await self.engine.generate(prompts, sampling_params, messages=messages, session_ids=session_ids)

    def expect_sessions(self, count: int) -> None:
        self.engine.expect_sessions(count)

    def finish_session(self, session_id: str) -> None:
        self.engine.finish_session(session_id)

    def last_turn(self, session_id: str) -> None:
        self.engine.last_turn(session_id)

    def engine_stats(self) -> Dict[str, Any]:
        """The engine's counters (an HF engine's ``stats``) and how many sessions' KV caches it keeps."""
        kept = getattr(self.engine, "sessions", None)
        return {**dict(getattr(self.engine, "stats", {})), "kept_sessions": len(kept) if kept is not None else 0}

    async def update_weights(self, named_tensors: Any) -> None:
        await self.engine.update_weights(named_tensors)

    async def connect_weight_receiver(self, backend: str, host: str, port: int, rank: int, world_size: int) -> None:
        """Join policy rank 0's broadcast group (returns once every member has joined)."""
        from skygym_train.weight_sync import WeightReceiver

        self.receiver = WeightReceiver(backend, host, port, rank, world_size)
        await asyncio.get_running_loop().run_in_executor(None, self.receiver.connect)

    async def receive_weights(self) -> int:
        """Receive one broadcast and load it into the engine; returns the number of tensors received."""
        if self.receiver is None:
            raise RuntimeError("connect_weight_receiver() first")
        pairs = await asyncio.get_running_loop().run_in_executor(None, self.receiver.receive)
        await self.engine.update_weights(pairs)
        self.weights_received += 1
        return len(pairs)

    def weight_sums(self) -> Dict[str, float]:
        """The sum of each parameter (float64): a cheap fingerprint to compare with the policy's weights."""
        model = getattr(self.engine, "model", None)
        if model is None or not hasattr(model, "state_dict"):
            return {}
        return {name: float(t.detach().double().sum()) for name, t in model.state_dict().items()}

    async def sleep(self) -> None:
        await self.engine.sleep()

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    async def close(self) -> None:
        await self.engine.aclose()


class EngineActorClient(BaseInferenceEngine):
    """The trainer's handle on one :class:`EngineActor`: an :class:`~skygym_adapters.types.InferenceEngine` whose
    calls are Ray actor calls, awaited as ObjectRefs on the caller's event loop."""

    def __init__(self, actor: Any, info: Dict[str, Any], placement_group: Any = None):
        self.actor = actor
        self.info = info
        self.node_id: str = info["node_id"]
        self._placement_group = placement_group  # removed on close: the one client that owns it
        self._closed = False

    @property
    def weight_dtype(self) -> Any:
        """The engine's weight dtype (what a broadcast casts to), as the in-process engines report it."""
        import torch

        name = self.info.get("weight_dtype")
        return getattr(torch, name) if name else None

    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[SamplingParams] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput:
        prompts = validate_prompts(prompt_token_ids)
        return await self.actor.generate.remote(prompts, sampling_params, messages, session_ids)

    # not awaited (the protocol's hooks are plain calls): an async actor may run them a little after a later call,
    # which costs at most a batch's time window (a late announcement) or a kept cache held a moment longer
    def expect_sessions(self, count: int) -> None:
        self.actor.expect_sessions.remote(count)

    def finish_session(self, session_id: str) -> None:
        self.actor.finish_session.remote(session_id)

    def last_turn(self, session_id: str) -> None:
        self.actor.last_turn.remote(session_id)

    async def update_weights(self, named_tensors: Any) -> None:
        """A state dict (pickled through Ray's object store) or a folder the actor's node can read."""
        if not isinstance(named_tensors, (dict, str)) and not hasattr(named_tensors, "__fspath__"):
            named_tensors = dict(named_tensors)
        await self.actor.update_weights.remote(named_tensors)

    # the broadcast (weight_sync): these return ObjectRefs at once, so the policy can send meanwhile
    def connect_weight_receiver(self, backend: str, host: str, port: int, rank: int, world_size: int) -> Any:
        return self.actor.connect_weight_receiver.remote(backend, host, port, rank, world_size)

    def receive_weights(self) -> Any:
        return self.actor.receive_weights.remote()

    def weight_sums(self) -> Dict[str, float]:
        import ray

        return ray.get(self.actor.weight_sums.remote())

    def engine_stats(self) -> Dict[str, Any]:
        import ray

        return ray.get(self.actor.engine_stats.remote())

    async def sleep(self) -> None:
        await self.actor.sleep.remote()

    async def wake_up(self) -> None:
        await self.actor.wake_up.remote()

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        import ray

        if not ray.is_initialized():
            return
        try:
            ray.get(self.actor.close.remote(), timeout=30)
        except Exception:  # a dead actor has nothing left to close
            pass
        ray.kill(self.actor)
        if self._placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._placement_group)


def create_engine_actors(cfg: Any, model_path: str, tokenizer: Any, build: EngineBuilder,
                         placement_group: Any = None) -> List[EngineActorClient]:
    """Start ``generator.num_inference_engines`` engine actors and wait until each has loaded its model (each
    builds it with ``build``, the trainer's ``create_engines``).

    ``placement_group``: the policy's (``colocate_all``): each actor takes a share of one of its bundles, as each
    training role does. Without it the actors get a placement group of their own: one bundle per engine of
    ``inference_engine_tensor_parallel_size`` GPUs and a CPU (on CPU-only clusters: one CPU), placed with
    ``generator.engine_placement_strategy``.
    """
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from skygym_train.config.validation import cuda_available, uses_critic, uses_ref
    from skygym_train.ray_utils import create_placement_group, init_ray

    init_ray()
    g = cfg.generator
    count = int(g.num_inference_engines)
    use_gpu = cuda_available()
    remote_cls = ray.remote(EngineActor)
    owned = None
    options: List[Dict[str, Any]] = []
    threads: List[Optional[int]] = []
    if placement_group is not None:
        roles = 1 + int(uses_ref(cfg)) + int(uses_critic(cfg))
        specs = placement_group.bundle_specs
        # the trainer gives the engines the share of a bundle that each role has (see _build_ray_groups); engines
        # that share one bundle split it
        share = 1.0 / (roles + 1) / -(-count // len(specs))
        for i in range(count):
            bundle = i % len(specs)
            spec = specs[bundle]
            options.append(dict(
                num_cpus=share * float(spec.get("CPU", 0)),
                num_gpus=share * float(spec.get("GPU", 0)),
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=placement_group, placement_group_bundle_index=bundle),
            ))
            # on CPU the roles take turns on the bundle's cores (generation, then training): each uses them all
            threads.append(None if use_gpu else max(1, int(spec.get("CPU", 1))))
    else:
        tp = int(g.inference_engine_tensor_parallel_size)
        owned = create_placement_group(
            count, use_gpu, strategy=str(g.engine_placement_strategy), cpus_per_bundle=1.0, gpus_per_bundle=float(tp),
            what="lower generator.num_inference_engines, add nodes, or set trainer.placement.colocate_all=true")
        for i in range(count):
            options.append(dict(
                num_cpus=1.0,
                num_gpus=float(tp) if use_gpu else 0.0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=owned, placement_group_bundle_index=i),
            ))
            threads.append(None if use_gpu else 1)
    if g.backend == "vllm" and not use_gpu:
        # vLLM's CPU kernels check that every thread sees the same OpenMP thread count, and threads started after
        # torch.set_num_threads still read Ray's OMP_NUM_THREADS=1: set it for the whole actor process instead
        for opts, n in zip(options, threads):
            opts["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": str(n)}}
    actors = [remote_cls.options(**opts).remote(cfg, model_path, tokenizer, i, build, threads[i])
              for i, opts in enumerate(options)]
    try:
        infos = ray.get([actor.info.remote() for actor in actors])
    except BaseException:
        for actor in actors:
            ray.kill(actor)
        if owned is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(owned)
        raise
    # the last client removes the group: EngineClient closes its engines in order, so every actor is down by then
    return [EngineActorClient(actor, info, owned if i == count - 1 else None)
            for i, (actor, info) in enumerate(zip(actors, infos))]


__all__ = ["EngineActor", "EngineActorClient", "create_engine_actors", "engines_are_ray_actors"]
