"""Starting Ray for the trainer and placing actor groups with placement groups."""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import types
from typing import Any, Dict, List, Optional, Sequence


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
    # ray.init replaces SIGTERM's handler with sys.exit: a handler the caller installed (the training commands end a
    # run as a second Ctrl-C does, exit 143 and say so) comes back; where there was none, Ray's exit stays
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if in_main else None
    ray.init(
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        include_dashboard=False,
        log_to_driver=kwargs.pop("log_to_driver", True),
        runtime_env={"env_vars": env_vars},
        **kwargs,
    )
    if callable(previous):
        signal.signal(signal.SIGTERM, previous)


def bundles(num: int, use_gpu: bool, cpus_per_bundle: float = 1.0, gpus_per_bundle: float = 1.0
            ) -> List[Dict[str, float]]:
    return [{"GPU": gpus_per_bundle, "CPU": cpus_per_bundle} if use_gpu else {"CPU": cpus_per_bundle}
            for _ in range(num)]


def cpus_per_worker(num_workers: int) -> int:
    """CPU cores for each of ``num_workers`` CPU training workers: the largest node's cores shared evenly (at
    least 1), so a single worker on a 2-core machine trains on both cores instead of Ray's default of one."""
    import ray

    largest_node = max((node["Resources"].get("CPU", 0) for node in alive_nodes()), default=1)
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


# What a node must be able to import for the work the trainer places there, and the distribution that versions it.
DISTRIBUTIONS = {"skyrl_gym": "skyrl-gym", "torch": "torch", "transformers": "transformers", "peft": "peft",
                 "deepspeed": "deepspeed", "vllm": "vllm", "flash_attn": "flash-attn"}
INSTALL_HINTS = {"skyrl_gym": "pip install 'skyrl-gym[train]'", "vllm": "pip install 'skyrl-gym[vllm]'",
                 "deepspeed": "pip install 'skyrl-gym[deepspeed]'", "flash_attn": "pip install flash-attn"}
NODE_CHECK_TIMEOUT_S = 60.0


def look_here(modules: Sequence[str], folders: Sequence[str], distributions: Dict[str, str]) -> Dict[str, Any]:
    """What this process sees: each module's distribution version (``None``: not importable here; ``""``: importable
    but with no distribution metadata) and whether each model folder holds a ``config.json``. The standard library
    and its arguments only: the task that runs it on a node carries it by value, so a node without skyrl-gym can
    say so."""
    import importlib.metadata
    import importlib.util
    import os

    versions: Dict[str, Optional[str]] = {}
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        version = None
        if found:
            try:
                version = importlib.metadata.version(distributions.get(module, module))
            except importlib.metadata.PackageNotFoundError:
                version = ""
        versions[module] = version
    readable = {folder: os.path.isfile(os.path.join(folder, "config.json")) for folder in folders}
    return {"versions": versions, "folders": readable}


@dataclasses.dataclass
class NodeCheck:
    """What :func:`check_nodes` found: ``errors`` stop a run before it starts, ``warnings`` are printed;
    ``nodes``: the nodes asked (address and the start of the node id)."""

    errors: List[str]
    warnings: List[str]
    nodes: List[str]


def node_problems(here: Dict[str, Any], nodes: Dict[str, Dict[str, Any]], folders: Dict[str, str]) -> NodeCheck:
    """Compare what each node sees (``{node: look_here(...)}``, a string where the node could not be asked) with
    this process (``here``). ``folders``: ``{config key: model folder}``. A module a node cannot import, or a model
    folder it cannot read, is an error: the workers and engine actors placed there would fail once the run has
    started, or load another model. A version other than this process's is a warning (a build tag such as
    ``+cu130`` against ``+cpu`` is no difference: the driver may be a CPU machine)."""

    def public(version: Optional[str]) -> Optional[str]:
        return version.split("+")[0] if version else version

    errors: List[str] = []
    warnings: List[str] = []
    for node, seen in sorted(nodes.items()):
        if isinstance(seen, str):
            warnings.append(f"Ray node {node}: {seen}; its packages and model folders were not checked")
            continue
        for module, version in seen["versions"].items():
            mine = here["versions"].get(module)
            if version is None:
                hint = INSTALL_HINTS.get(module, f"pip install {DISTRIBUTIONS.get(module, module)}")
                errors.append(f"Ray node {node} cannot import {module}, which the work placed there needs "
                              f"({hint} on that node, in the Python its `ray start` runs)")
            elif mine and version and public(version) != public(mine):
                warnings.append(f"Ray node {node} has {DISTRIBUTIONS.get(module, module)} {version} where this "
                                f"process has {mine}: the workers there run other code than the driver expects; "
                                "install the same versions on every node")
        for key, folder in folders.items():
            if not seen["folders"].get(folder, True):
                errors.append(f"Ray node {node} cannot read the model folder {folder} ({key} is that folder on "
                              "this machine): the workers placed there load their model from it; put it (or the "
                              "Hugging Face cache, HF_HOME) on storage every node mounts, at the same path")
    return NodeCheck(errors, warnings, sorted(nodes))


def alive_nodes() -> List[Dict[str, Any]]:
    """The alive nodes of the Ray this process is connected to (``ray.nodes()``' entries)."""
    import ray

    return [node for node in ray.nodes() if node.get("Alive")]


def check_nodes(modules: Sequence[str], folders: Dict[str, str], timeout_s: float = NODE_CHECK_TIMEOUT_S) -> NodeCheck:
    """Ask every alive node of the Ray this process is connected to what it can import and read
    (:func:`look_here`, one task of no CPU pinned to each node) and compare it with this process
    (:func:`node_problems`). A node that does not answer within ``timeout_s`` is a warning."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    alive = alive_nodes()
    # a copy of look_here belonging to no module: Ray pickles it by value instead of by name, so a node that cannot
    # import skygym_train runs it too and reports what it lacks
    by_value = types.FunctionType(look_here.__code__, {"__builtins__": builtins}, look_here.__name__)
    look = ray.remote(num_cpus=0, max_retries=0)(by_value)
    refs = {
        f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})": look.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote(list(modules), list(folders.values()), DISTRIBUTIONS)
        for node in alive
    }
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    nodes: Dict[str, Any] = {}
    for label, ref in refs.items():
        if ref not in ready:
            with contextlib.suppress(Exception):  # a task of a node that went away cannot be cancelled either
                ray.cancel(ref, force=True)
            nodes[label] = f"no answer within {timeout_s:.0f} s"
            continue
        try:
            nodes[label] = ray.get(ref)
        except Exception as exc:  # the task could not even start there (a Python of its own, ...)
            nodes[label] = f"could not run the check ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    return node_problems(look_here(modules, list(folders.values()), DISTRIBUTIONS), nodes, folders)
