"""Dispatchers keep to their concurrency limits: stages are counted while they run, on a real asyncio workload."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from skygym_adapters.agents import AgentRunner, BaseTrajectory, register_agent, register_dispatcher
from skygym_adapters.agents.dispatchers import (
    DISPATCHER_REGISTRY,
    async_batch_dispatcher,
    async_pipeline_dispatcher,
)


class Gauge:
    """In-flight count per stage, and the highest count seen."""

    def __init__(self):
        self.now = defaultdict(int)
        self.peak = defaultdict(int)
        self.order = []

    async def stage(self, name, trajectory, hops=5):
        self.now[name] += 1
        self.peak[name] = max(self.peak[name], self.now[name])
        self.order.append((name, trajectory))
        for _ in range(hops):  # yield to the loop so other trajectories can enter (no sleeps, no clocks)
            await asyncio.sleep(0)
        self.now[name] -= 1


class CountedTrajectory(BaseTrajectory):
    gauge: Gauge = None

    async def initialize_trajectory(self):
        await self.gauge.stage("init", self.cfg.instance_id)

    async def generate_trajectory(self):
        await self.gauge.stage("generate", self.cfg.instance_id, hops=7)
        self.result = {
            "instance_id": self.cfg.instance_id,
            "trajectory_id": self.cfg.trajectory_id,
            "messages": [],
            "results": 1.0,
            "finish_reason": "FINISH",
            "error": None,
            "eval_error": None,
            "reward": 0.0,
        }

    async def evaluate_trajectory(self):
        await self.gauge.stage("evaluate", self.cfg.instance_id, hops=3)
        self.result["reward"] = 1.0


def make_trajectories(count, gauge, cls=CountedTrajectory):
    from skygym_adapters.agents.trajectory import TrajectoryConfig

    cls.gauge = gauge
    return {
        i: {0: cls(TrajectoryConfig(instance_id=i, trajectory_id=0), {}, None, None, None)}
        for i in range(count)
    }


def test_pipeline_keeps_each_stage_within_its_limit_and_overlaps_stages():
    gauge = Gauge()
    trajectories = make_trajectories(24, gauge)
    cfg = {"max_parallel_agents": 4, "max_eval_parallel_agents": 2}
    asyncio.run(
        async_pipeline_dispatcher(
            cfg, trajectories, "initialize_trajectory", "generate_trajectory", "evaluate_trajectory"
        )
    )
    assert dict(gauge.peak) == {"init": 4, "generate": 4, "evaluate": 2}
    assert all(t[0].result["reward"] == 1.0 for t in trajectories.values())
    # pipelined: some trajectory was evaluated before the last one was initialized
    first_eval = gauge.order.index(next(o for o in gauge.order if o[0] == "evaluate"))
    last_init = max(i for i, o in enumerate(gauge.order) if o[0] == "init")
    assert first_eval < last_init


def test_async_batch_bounds_whole_trajectories():
    gauge = Gauge()
    trajectories = make_trajectories(12, gauge)
    asyncio.run(
        async_batch_dispatcher(
            {"max_parallel_agents": 3},
            trajectories,
            "initialize_trajectory",
            "generate_trajectory",
            "evaluate_trajectory",
        )
    )
    in_flight_peak = max(gauge.peak.values())
    assert in_flight_peak <= 3 and gauge.peak["init"] == 3
    assert all(t[0].result["reward"] == 1.0 for t in trajectories.values())


def test_a_stage_that_raises_fails_only_its_trajectory():
    class Flaky(CountedTrajectory):
        async def generate_trajectory(self):
            if self.cfg.instance_id == 1:
                raise RuntimeError("container died")
            await super().generate_trajectory()

    gauge = Gauge()
    trajectories = make_trajectories(3, gauge, Flaky)
    asyncio.run(
        async_pipeline_dispatcher(
            {"max_parallel_agents": 2},
            trajectories,
            "initialize_trajectory",
            "generate_trajectory",
            "evaluate_trajectory",
        )
    )
    failed = trajectories[1][0].result
    assert failed["finish_reason"] == "error_runtime" and "RuntimeError: container died" in failed["error"]
    assert [t[0].result["reward"] for t in trajectories.values()] == [1.0, 0.0, 1.0]
    assert ("evaluate", 1) not in gauge.order  # its later stages were skipped


def test_the_runner_passes_the_yaml_limits_and_a_user_dispatcher_can_be_registered():
    seen = {}

    @register_dispatcher("test_recording")
    async def recording(cfg, trajectories, init_fn, run_fn, eval_fn):
        seen.update(cfg)
        await async_pipeline_dispatcher(cfg, trajectories, init_fn, run_fn, eval_fn)

    gauge = Gauge()
    CountedTrajectory.gauge = gauge
    register_agent("test_counted", CountedTrajectory, object)
    try:
        runner = AgentRunner(
            {
                "agent_cls": "test_counted",
                "generator": {
                    "backend_config": {"base_url": "http://127.0.0.1:9"},
                    "num_trajectories": 2,
                    "val_config": {"num_trajectories": 3},
                },
                "dispatcher": {
                    "type": "test_recording",
                    "max_parallel_agents": 5,
                    "max_eval_parallel_agents": 1,
                    "val_config": {"max_parallel_agents": 2},
                },
            }
        )
        rows = [{"prompt": [{"role": "user", "content": f"q{i}"}]} for i in range(4)]
        out = asyncio.run(runner.run(rows, val_mode=True))
    finally:
        DISPATCHER_REGISTRY.pop("test_recording")
        from skygym_adapters.agents import AGENT_REGISTRY

        AGENT_REGISTRY.pop("test_counted")
    assert seen["max_parallel_agents"] == 2 and seen["max_eval_parallel_agents"] == 1
    assert seen["num_instances"] == 4 and seen["num_trajectories"] == 3
    assert len(out["results"]) == 12 and out["summary"]["mean_reward"] == 1.0
    assert dict(gauge.peak) == {"init": 2, "generate": 2, "evaluate": 1}


def test_an_unknown_dispatcher_lists_the_registered_ones():
    from skygym_adapters.agents import AgentConfigError

    with pytest.raises(
        AgentConfigError, match=r"unknown dispatcher.type 'fifo'.*'async_batch', 'async_pipeline'"
    ):
        AgentRunner(
            {
                "dispatcher": {"type": "fifo"},
                "generator": {"backend_config": {"base_url": "http://127.0.0.1:9"}},
            }
        )
