"""The env contract, exercised the way a SkyRL-gym user writes envs."""

from __future__ import annotations

from typing import Any, Dict

import pytest

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.metrics import aggregate_for_environment, default_aggregate_metrics


class SkyRLStyleCountdownEnv(BaseTextEnv):
    """Written exactly as for SkyRL-gym: no-argument super().__init__(), step overridden, mutable defaults."""

    def __init__(self, env_config: Dict[str, Any] = {}, extras: Dict[str, Any] = {}):
        super().__init__()
        self.target = extras["reward_spec"]["ground_truth"]
        self.max_turns = 3

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        correct = action.strip() == self.target
        done = correct or self.turns >= self.max_turns
        observations = [] if done else [{"role": "user", "content": "try again"}]
        return BaseTextEnvStepOutput(observations=observations, reward=float(correct), done=done, metadata={})

    def get_metrics(self):
        return {"turns": self.turns, "solved": self.turns < 3}


@pytest.fixture
def countdown_id():
    skyrl_gym.register(id="test-countdown", entry_point=SkyRLStyleCountdownEnv)
    yield "test-countdown"
    skyrl_gym.deregister("test-countdown")


def test_skyrl_style_env_runs_unchanged_through_make(countdown_id):
    row = {"reward_spec": {"ground_truth": "3"}}
    with skyrl_gym.make(countdown_id, env_config={}, extras=row) as env:
        prompt = [{"role": "user", "content": "count"}]
        observation, info = env.init(prompt)
        assert observation == prompt and info == {}
        first = env.step("1")
        assert first["done"] is False and first["observations"] == [{"role": "user", "content": "try again"}]
        second = env.step("3")
        assert second["done"] is True and second["reward"] == 1.0
        assert env.turns == 2


def test_context_manager_closes_env():
    closed = []

    class ClosingEnv(BaseTextEnv):
        def step(self, action):
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata={})

        def close(self):
            closed.append(True)

    with ClosingEnv():
        pass
    assert closed == [True]


def test_default_metric_aggregation_means_numbers_and_booleans():
    metrics = [{"turns": 1, "solved": True, "note": "x"}, {"turns": 3, "solved": False}, {"turns": float("nan")}]
    assert default_aggregate_metrics(metrics) == {"turns": 2.0, "solved": 0.5}
    assert default_aggregate_metrics([]) == {}


def test_aggregate_for_environment_uses_the_env_class(countdown_id):
    assert aggregate_for_environment(countdown_id, [{"turns": 2, "solved": True}]) == {"turns": 2.0, "solved": 1.0}
    assert aggregate_for_environment("gsm8k_multi_turn", [{"steps": 1}, {"steps": 3}]) == {"avg_steps": 2.0}


def test_base_text_env_defaults():
    env = BaseTextEnv(env_config={"a": 1}, extras={"b": 2})
    assert (env.max_turns, env.turns, env.tool_groups) == (1, 0, [])
    assert env.env_config == {"a": 1} and env.extras == {"b": 2}
    assert env.init([{"role": "user", "content": "q"}]) == ([{"role": "user", "content": "q"}], {})
    assert env.get_metrics() == {}
    with pytest.raises(NotImplementedError, match="BaseTextEnv must implement step"):
        env.step("x")
