"""The agent layer's dispatchers: pipelined stages against stage-by-stage, 32 trajectories.

Each trajectory starts a container (initialize: 0.2-0.6 s), talks to a model (generate: 3 calls of 0.05-0.25 s)
and is graded (evaluate: 0.1-0.4 s); the waits are simulated with ``asyncio.sleep`` (seeded, the same for both
runs). ``async_pipeline`` lets every trajectory move on as soon as its own stage is done, with at most
``max_parallel_agents`` in each stage; ``stage_by_stage`` (a dispatcher registered here, as a user would) runs all
initializations, then all generations, then all evaluations, with the same limits.

    python bench/agent_dispatch.py [--trajectories 32] [--parallel 4 8 16] [--scale 1.0]

The speed-up grows with the number of waves (trajectories / max_parallel_agents): the pipeline's gain is the
overlap of stages, which a short batch spends mostly filling and draining.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from skygym_adapters.agents import (
    AGENT_REGISTRY,
    AgentRunner,
    BaseTrajectory,
    register_agent,
    register_dispatcher,
)
from skygym_adapters.agents.dispatchers import DISPATCHER_REGISTRY, iter_trajectories, run_stage


@register_dispatcher("stage_by_stage")
async def stage_by_stage(cfg, trajectories, init_fn, run_fn, eval_fn):
    """Every trajectory's stage k before any trajectory's stage k+1 (a barrier between stages)."""
    for name, limit in (
        (init_fn, cfg["max_parallel_agents"]),
        (run_fn, cfg["max_parallel_agents"]),
        (eval_fn, cfg["max_eval_parallel_agents"]),
    ):
        slots = asyncio.Semaphore(limit)

        async def one(trajectory, name=name, slots=slots):
            if trajectory.result is not None and trajectory.result.get("error"):
                return
            async with slots:
                await run_stage(trajectory, name)

        await asyncio.gather(*(one(t) for _, _, t in iter_trajectories(trajectories)))


class SimulatedTrajectory(BaseTrajectory):
    scale = 1.0

    def _rng(self, stage):
        return random.Random(f"{self.cfg.instance_id}-{self.cfg.trajectory_id}-{stage}")

    async def initialize_trajectory(self):
        await asyncio.sleep(self._rng("init").uniform(0.2, 0.6) * self.scale)  # a container starts

    async def generate_trajectory(self):
        rng = self._rng("generate")
        for _ in range(3):
            await asyncio.sleep(rng.uniform(0.05, 0.25) * self.scale)  # a model call
        self.result = {
            "instance_id": self.cfg.instance_id,
            "trajectory_id": self.cfg.trajectory_id,
            "messages": [],
            "results": None,
            "finish_reason": "FINISH_TOOL",
            "error": None,
            "eval_error": None,
            "reward": 0.0,
        }

    async def evaluate_trajectory(self):
        await asyncio.sleep(self._rng("eval").uniform(0.1, 0.4) * self.scale)  # tests run
        self.result["reward"] = 1.0


def run(dispatcher: str, trajectories: int, parallel: int, eval_parallel: int) -> float:
    runner = AgentRunner(
        {
            "agent_cls": "simulated",
            "dispatcher": {
                "type": dispatcher,
                "max_parallel_agents": parallel,
                "max_eval_parallel_agents": eval_parallel,
            },
            "generator": {"backend_config": {"base_url": "http://127.0.0.1:9"}},
        }
    )
    rows = [{"prompt": [{"role": "user", "content": f"task {i}"}]} for i in range(trajectories)]
    start = time.perf_counter()
    out = asyncio.run(runner.run(rows, val_mode=True))
    seconds = time.perf_counter() - start
    assert out["summary"]["mean_reward"] == 1.0
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument(
        "--parallel",
        type=int,
        nargs="+",
        default=[4, 8, 16],
        help="max_parallel_agents (= max_eval_parallel_agents) values to measure",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every simulated wait")
    args = parser.parse_args()
    SimulatedTrajectory.scale = args.scale
    register_agent("simulated", SimulatedTrajectory, object)
    print(
        f"{args.trajectories} trajectories; initialize 0.2-0.6 s, generate 3 x 0.05-0.25 s, evaluate 0.1-0.4 s "
        f"(x{args.scale:g})"
    )
    print(f"{'max_parallel_agents':>20} {'stage by stage':>15} {'async_pipeline':>15} {'speed-up':>9}")
    try:
        for parallel in args.parallel:
            staged = run("stage_by_stage", args.trajectories, parallel, parallel)
            pipelined = run("async_pipeline", args.trajectories, parallel, parallel)
            print(f"{parallel:>20} {staged:>13.2f} s {pipelined:>13.2f} s {staged / pipelined:>8.2f}x")
    finally:
        AGENT_REGISTRY.pop("simulated")
        DISPATCHER_REGISTRY.pop("stage_by_stage")


if __name__ == "__main__":
    main()
