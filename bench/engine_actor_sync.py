"""Weight sync to an engine actor on a second Ray node, beside the same broadcast into an engine in the driver.

    python bench/engine_actor_sync.py                        # the embedded SmolLM2-135M-Instruct
    python bench/engine_actor_sync.py --model PATH --syncs 8

Starts a local Ray (2 CPUs) and joins a second node to it (a ``ray start`` process on this machine, announcing
the machine's own address; ``tests/ray_two_nodes.py``). Then, with one policy worker on the head, it sets up the
trainer twice and times ``--syncs`` weight syncs after the first (which also builds the group):

- baseline: ``generator.run_engines_locally=null``, the HF engine in the driver, ``weight_sync_backend=gloo``;
- actors: ``generator.run_engines_locally=true``, ``colocate_all=false``: the HF engine is a Ray actor that can only
  be placed on the second node; policy rank 0 broadcasts to it directly.

Prints MiB per sync and the median seconds of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def time_syncs(overrides: list, syncs: int, node2: str = "") -> tuple:
    from skygym_train.config import load_config
    from skygym_train.trainer import PPOTrainer
    from skygym_train.weight_sync import EngineWeightSync

    cfg = load_config(overrides)
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        if node2:
            (client,) = trainer.engine.engines
            assert client.node_id == node2, "the engine actor is not on the second node"
        sync = EngineWeightSync(cfg, trainer.policy, trainer.engine, trainer._runner)
        sync.sync()
        seconds = []
        for _ in range(syncs):
            start = time.perf_counter()
            sync.sync()
            seconds.append(time.perf_counter() - start)
        return sync.bytes_last / 2**20, statistics.median(seconds), sync.describe()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--syncs", type=int, default=5)
    args = parser.parse_args()

    from skygym_train.ray_utils import init_ray
    from skyrl_gym.data import write_jsonl
    from tests.ray_two_nodes import second_ray_node
    from tests.skygym_train.toy_envs import register_toy_env, toy_overrides, toy_rows

    init_ray(num_cpus=2)
    register_toy_env()
    tmp = Path(tempfile.mkdtemp(prefix="engine-actor-sync-"))
    write_jsonl(toy_rows(16), tmp / "train.jsonl")
    common = {"trainer.use_ray": "true", "trainer.num_cpu_workers": 1, "trainer.placement.colocate_all": "false"}
    with second_ray_node(num_cpus=1) as nodes:
        rows = [
            ("engine in the driver (gloo)",
             time_syncs(toy_overrides(args.model, tmp / "train.jsonl", tmp, **common,
                                      **{"generator.weight_sync_backend": "gloo"}), args.syncs)),
            ("engine actor on node 2 (gloo)",
             time_syncs(toy_overrides(args.model, tmp / "train.jsonl", tmp, **common,
                                      **{"generator.run_engines_locally": "true"}), args.syncs, nodes["node2"])),
        ]
    for name, (mib, median, how) in rows:
        print(f"{name:32s} {mib:7.1f} MiB per sync  median {median:.2f} s  ({how})")


if __name__ == "__main__":
    main()
