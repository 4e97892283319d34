"""Worker groups: the trainer talks to N workers of one role as if they were one.

``LocalWorkerGroup`` runs a single worker in this process (the fast path for small CPU runs);
``RayWorkerGroup`` runs one Ray actor per device inside a placement group and splits each batch
evenly across them (data parallel, FSDP2 shards within the group).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol

import torch

from skygym_train.workers.batch import TrainingBatch
from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec


def worker_class(spec: WorkerSpec) -> type:
    """The worker for ``spec.strategy``: FSDP2 (``TrainingWorker``) or DeepSpeed ZeRO (``DeepSpeedWorker``)."""
    if spec.strategy == "deepspeed":
        from skygym_train.workers.deepspeed_worker import DeepSpeedWorker

        return DeepSpeedWorker
    return TrainingWorker


class WorkerGroup(Protocol):
    world_size: int
    role: str

    def call(self, method: str, *args: Any, **kwargs: Any) -> List[Any]: ...

    def forward(self, batch: TrainingBatch) -> Dict[str, torch.Tensor]: ...

    def train_step(self, batch: TrainingBatch) -> Dict[str, float]: ...


class LocalWorkerGroup:
    def __init__(self, spec: WorkerSpec):
        self.role = spec.role
        self.world_size = 1
        self.worker = worker_class(spec)(spec)

    def call(self, method: str, *args: Any, **kwargs: Any) -> List[Any]:
        return [getattr(self.worker, method)(*args, **kwargs)]

    def forward(self, batch: TrainingBatch) -> Dict[str, torch.Tensor]:
        return self.worker.forward(batch)

    def train_step(self, batch: TrainingBatch) -> Dict[str, float]:
        return self.worker.train_step(batch)

    def shutdown(self) -> None:
        """Close the worker's process group (on a GPU, NCCL's: left open, the process warns at exit that it leaked
        it). The policy, reference and critic of one process share that group: the first to shut it down closes it."""
        self.worker.shutdown()


class RayWorkerGroup:
    """``num_workers`` Ray actors of one role, one per placement-group bundle."""

    def __init__(
        self,
        spec: WorkerSpec,
        num_workers: int,
        placement_group: Any,
        *,
        bundle_offset: int = 0,
        num_gpus_per_actor: float = 0.0,
        num_cpus_per_actor: float = 1.0,
        num_threads: Optional[int] = None,
        env_vars: Optional[Dict[str, str]] = None,
    ):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.role = spec.role
        self.world_size = num_workers
        self.sequence_parallel_size = spec.sequence_parallel_size
        if num_workers % spec.sequence_parallel_size:
            raise ValueError(f"{num_workers} {spec.role} workers cannot form groups of sequence_parallel_size="
                             f"{spec.sequence_parallel_size}")
        self.data_parallel_size = num_workers // spec.sequence_parallel_size
        remote_cls = ray.remote(worker_class(spec))

        def options(index: int) -> Dict[str, Any]:
            opts: Dict[str, Any] = dict(
                num_cpus=num_cpus_per_actor,
                num_gpus=num_gpus_per_actor,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=placement_group, placement_group_bundle_index=bundle_offset + index
                ),
            )
            if env_vars:  # a runtime env of its own costs a fresh worker set-up, so only when asked
                opts["runtime_env"] = {"env_vars": env_vars}
            return opts

        self.actors = [
            remote_cls.options(**options(i)).remote(spec, rank=i, world_size=num_workers, num_threads=num_threads)
            for i in range(num_workers)
        ]
        # Rank 0's node hosts the rendezvous: ask it for an address, then tell every rank.
        host, port = ray.get(self.actors[0].rendezvous_address.remote())
        self.call("set_dist_init", f"tcp://{host}:{port}")

    def call(self, method: str, *args: Any, **kwargs: Any) -> List[Any]:
        import ray

        return ray.get([getattr(actor, method).remote(*args, **kwargs) for actor in self.actors])

    def call_async(self, method: str, *args: Any, **kwargs: Any) -> List[Any]:
        """Start ``method`` on every actor and return at once (Ray object refs); ``wait`` collects the results."""
        return [getattr(actor, method).remote(*args, **kwargs) for actor in self.actors]

    def wait(self, pending: List[Any]) -> List[Any]:
        import ray

        return ray.get(pending)

    def _shares(self, parts: List[TrainingBatch]) -> List[TrainingBatch]:
        """Each actor's part: the ranks of one sequence-parallel group (``ulysses``) share theirs."""
        return [parts[rank // self.sequence_parallel_size] for rank in range(self.world_size)]

    def forward(self, batch: TrainingBatch) -> Dict[str, torch.Tensor]:
        import ray

        parts = _split_padded(batch, self.data_parallel_size)
        pending = [actor.forward.remote(part) for actor, part in zip(self.actors, self._shares(parts))]
        results = ray.get(pending)[:: self.sequence_parallel_size]  # one answer per sequence-parallel group
        merged = {key: torch.cat([r[key] for r in results]) for key in results[0]}
        return {key: value[: batch.size] for key, value in merged.items()}

    def train_step(self, batch: TrainingBatch) -> Dict[str, float]:
        import ray

        parts = batch.chunk(self.data_parallel_size)
        results = ray.get([actor.train_step.remote(part) for actor, part in zip(self.actors, self._shares(parts))])
        return results[0]  # metrics are already averaged across ranks

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Close each worker's process groups, then end the actors. A worker that is dead, or stuck in a collective
        whose peer died, gets ``timeout_s`` to answer and is ended anyway."""
        import ray

        try:
            ray.get([actor.shutdown.remote() for actor in self.actors], timeout=timeout_s)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
            pass  # ended below either way
        finally:
            for actor in self.actors:
                ray.kill(actor)


def _split_padded(batch: TrainingBatch, parts: int) -> List[TrainingBatch]:
    """Split for forward passes; every rank must join each FSDP collective, so pad with repeats."""
    per = -(-batch.size // parts)
    rows = list(range(batch.size)) + [batch.size - 1] * (per * parts - batch.size)
    return [batch.select(rows[i * per : (i + 1) * per]) for i in range(parts)]
