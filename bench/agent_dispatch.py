"""The agent layer's dispatchers: pipelined stages against stage-by-stage, 32 trajectories.

Each trajectory starts a container (initialize: 0.2-0.6 s), talks to a model (generate: 3 calls of 0.05-0.25 s)
and is graded (evaluate: 0.1-0.4 s); the waits are simulated with ``asyncio.sleep`` (seeded, the same for both
runs). ``async_pipeline`` lets every trajectory move on as soon as its own stage is done, with at most
``max_parallel_agents`` in each stage; ``stage_by_stage`` (a dispatcher registered here, as a user would) runs all
initializations, then all generations, then all evaluations, with the same limits.

    python bench/agent_dispatch.py [--trajectories 32] [--parallel 4 8 16] [--scale 1.0]
    python bench/agent_dispatch.py --swe outputs/swe/instances.jsonl [--trajectories 16] [--parallel 4]

``--swe``: real SWE trajectories instead of simulated ones (``task: swe_bench``, a Docker engine and instances from
``skyrl-gym swe build``): each starts a container, a scripted model (0.05-0.25 s per reply) replays the gold patch
through the tools, and the patch is graded in a fresh container; every reward must be 1.0.

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
    ChatReply,
    register_agent,
    register_backend,
    register_dispatcher,
)
from skygym_adapters.agents.backends import BACKEND_REGISTRY
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


class GoldReplayChat:
    """A chat backend that replays each instance's gold patch through the SWE tools, with model-like latency."""

    token_level = False

    def __init__(self, instances, scale: float) -> None:
        self.instances = instances
        self.scale = scale

    async def chat(self, messages, tools, sampling_params):
        from skyrl_gym.envs.swe.replay import replay_actions

        text = "\n".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
        instance = next(i for i in self.instances if i.problem_statement.strip() in text)
        turn = sum(m["role"] == "assistant" for m in messages)
        rng = random.Random(f"{instance.instance_id}-{len(messages)}")
        await asyncio.sleep(rng.uniform(0.05, 0.25) * self.scale)
        actions = replay_actions(instance.patch)
        return ChatReply({"role": "assistant", "content": actions[min(turn, len(actions) - 1)]}, "stop")

    def count_tokens(self, messages):
        return None

    async def aclose(self) -> None:
        pass


def run_swe(dispatcher: str, instances, trajectories: int, parallel: int) -> float:
    from skyrl_gym.envs.swe.dataset import instance_row

    runner = AgentRunner(
        {
            "agent_cls": "codeact",
            "task": "swe_bench",
            "data": {"instance_id_key": "instance_id"},
            "generator": {"infer_backend": "bench_gold_replay", "max_iterations": 30},
            "dispatcher": {
                "type": dispatcher,
                "max_parallel_agents": parallel,
                "max_eval_parallel_agents": parallel,
            },
        }
    )
    rows = [instance_row(instances[i % len(instances)]) for i in range(trajectories)]
    start = time.perf_counter()
    out = asyncio.run(runner.run(rows, val_mode=True))
    seconds = time.perf_counter() - start
    assert out["summary"]["mean_reward"] == 1.0, [
        r.get("error") or r.get("eval_error") for r in out["results"]
    ]
    return seconds


def main_swe(args) -> None:
    from skyrl_gym.envs.swe.instances import load_instances

    instances = load_instances(args.swe)
    register_backend(
        "bench_gold_replay", lambda cfg, engine, tokenizer, **_: GoldReplayChat(instances, args.scale)
    )
    print(
        f"{args.trajectories} real SWE trajectories over {len(instances)} instances (containers, gold replay, grading)"
    )
    print(f"{'max_parallel_agents':>20} {'stage by stage':>15} {'async_pipeline':>15} {'speed-up':>9}")
    try:
        for parallel in args.parallel:
            staged = run_swe("stage_by_stage", instances, args.trajectories, parallel)
            pipelined = run_swe("async_pipeline", instances, args.trajectories, parallel)
            print(f"{parallel:>20} {staged:>13.2f} s {pipelined:>13.2f} s {staged / pipelined:>8.2f}x")
    finally:
        BACKEND_REGISTRY.pop("bench_gold_replay")
        DISPATCHER_REGISTRY.pop("stage_by_stage")


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
    parser.add_argument(
        "--swe", default=None, help="instances.jsonl: real SWE containers instead of simulated ones"
    )
    args = parser.parse_args()
    if args.swe:
        return main_swe(args)
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
