"""Worker groups: the trainer talks to N workers of one role as if they were one.

``LocalWorkerGroup`` runs a single worker in this process (the fast path for small CPU runs);
``RayWorkerGroup`` runs one Ray actor per device inside a placement group and splits each batch
evenly across them (data parallel, FSDP2 shards within the group).
"""

from __future__ import annotations

import socket
from typing import Any, Dict, List, Optional, Protocol

import torch

from skyrl_train.workers.batch import TrainingBatch
from skyrl_train.workers.fsdp_worker import TrainingWorker, WorkerSpec


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
        self.worker = TrainingWorker(spec)

    def call(self, method: str, *args: Any, **kwargs: Any) -> List[Any]:
        return [getattr(self.worker, method)(*args, **kwargs)]

    def forward(self, batch: TrainingBatch) -> Dict[str, torch.Tensor]:
        return self.worker.forward(batch)

    def train_step(self, batch: TrainingBatch) -> Dict[str, float]:
        return self.worker.train_step(batch)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class _RankInfo:
    """Tiny actor method host: the node IP and a free port for rank 0's rendezvous."""

    @staticmethod
    def address() -> tuple[str, int]:
        import ray

        return ray.util.get_node_ip_address(), _free_port()


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
        env_vars: Optional[Dict[str, str]] = None,
    ):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.role = spec.role
        self.world_size = num_workers
        remote_cls = ray.remote(TrainingWorker)

        def options(index: int) -> Dict[str, Any]:
            return dict(
                num_cpus=num_cpus_per_actor,
                num_gpus=num_gpus_per_actor,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=placement_group, placement_group_bundle_index=bundle_offset + index
                ),
                runtime_env={"env_vars": env_vars or {}},
            )

        # Rank 0's node hosts the rendezvous; ask it for an address before starting the others.
        probe = ray.remote(_RankInfo).options(**options(0)).remote()
        host, port = ray.get(probe.address.remote())
        ray.kill(probe)
        init_method = f"tcp://{host}:{port}"
        self.actors = [
            remote_cls.options(**options(i)).remote(spec, rank=i, world_size=num_workers, dist_init=init_method)
            for i in range(num_workers)
        ]

    def call(self, method: str, *args: Any, **kwargs: Any) -> List[Any]:
        import ray

        return ray.get([getattr(actor, method).remote(*args, **kwargs) for actor in self.actors])

    def forward(self, batch: TrainingBatch) -> Dict[str, torch.Tensor]:
        import ray

        parts = _split_padded(batch, self.world_size)
        results = ray.get([actor.forward.remote(part) for actor, part in zip(self.actors, parts)])
        merged = {key: torch.cat([r[key] for r in results]) for key in results[0]}
        return {key: value[: batch.size] for key, value in merged.items()}

    def train_step(self, batch: TrainingBatch) -> Dict[str, float]:
        import ray

        parts = batch.chunk(self.world_size)
        results = ray.get([actor.train_step.remote(part) for actor, part in zip(self.actors, parts)])
        return results[0]  # metrics are already averaged across ranks

    def shutdown(self) -> None:
        import ray

        try:
            self.call("shutdown")
        finally:
            for actor in self.actors:
                ray.kill(actor)


def _split_padded(batch: TrainingBatch, parts: int) -> List[TrainingBatch]:
    """Split for forward passes; every rank must join each FSDP collective, so pad with repeats."""
    per = -(-batch.size // parts)
    rows = list(range(batch.size)) + [batch.size - 1] * (per * parts - batch.size)
    return [batch.select(rows[i * per : (i + 1) * per]) for i in range(parts)]
