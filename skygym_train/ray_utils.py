"""Starting Ray for the trainer and placing actor groups with placement groups."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional


def init_ray(num_cpus: Optional[int] = None, num_gpus: Optional[int] = None, **kwargs: Any) -> None:
    """Start (or join) Ray with the dashboard off; workers see the driver's non-site-packages import paths and run
    at the driver's priority (``RAY_worker_niceness=0`` unless set).

    On a small machine ``num_cpus`` bounds the workers Ray starts (e.g. ``num_cpus=2``).
    """
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        return
    # Ray starts worker processes at nice 15; a training actor is the job's main work, and on a busy machine it
    # would yield its cores to every other process. Only applies when this call starts Ray.
    os.environ.setdefault("RAY_worker_niceness", "0")
    # The packages themselves are installed (editable or wheel); this carries a user's own script folder.
    paths = [p for p in sys.path if p and "site-packages" not in p]
    env_vars = {
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths + os.environ.get("PYTHONPATH", "").split(os.pathsep))).strip(os.pathsep),
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_AUTH_MODE": "disabled",
    }
    ray.init(
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        include_dashboard=False,
        log_to_driver=kwargs.pop("log_to_driver", True),
        runtime_env={"env_vars": env_vars},
        **kwargs,
    )


def bundles(num: int, use_gpu: bool, cpus_per_bundle: float = 1.0, gpus_per_bundle: float = 1.0
            ) -> List[Dict[str, float]]:
    return [{"GPU": gpus_per_bundle, "CPU": cpus_per_bundle} if use_gpu else {"CPU": cpus_per_bundle}
            for _ in range(num)]


def cpus_per_worker(num_workers: int) -> int:
    """CPU cores for each of ``num_workers`` CPU training workers: the largest node's cores shared evenly (at
    least 1), so a single worker on a 2-core machine trains on both cores instead of Ray's default of one."""
    import ray

    largest_node = max((node["Resources"].get("CPU", 0) for node in ray.nodes() if node.get("Alive")), default=1)
    # inside a Ray task (SkyRL's tutorial runs the trainer in one) the task's own CPU is not free to reserve
    free = ray.available_resources().get("CPU", largest_node)
    return max(1, int(min(largest_node, free)) // max(1, num_workers))


def create_placement_group(num_bundles: int, use_gpu: bool, strategy: str = "PACK", timeout_s: float = 120,
                           cpus_per_bundle: float = 1.0, gpus_per_bundle: float = 1.0,
                           what: str = "lower the worker counts in trainer.placement") -> Any:
    """A placement group of one bundle per worker; fails with the resources it asked for if Ray has none (``what``:
    the advice the error ends with)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group(bundles(num_bundles, use_gpu, cpus_per_bundle, gpus_per_bundle), strategy=strategy)
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(pg)  # a pending group would take the resources once they free up
        size = f"{gpus_per_bundle:g} GPU" if use_gpu else f"{cpus_per_bundle:g} CPU"
        raise RuntimeError(
            f"Ray could not reserve {num_bundles} x {size} ({strategy}) within {timeout_s:.0f}s "
            f"(cluster has {ray.cluster_resources()}, free {ray.available_resources()}); {what}"
        )
    return pg
