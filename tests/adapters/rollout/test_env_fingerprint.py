"""Every trajectory records the reward fingerprint of its env (which verifier gave its reward)."""

from __future__ import annotations

from skygym_adapters.rollout import RolloutConfig, RolloutGenerator

import skyrl_gym
from tests.adapters.support import ScriptedEngine, user


async def test_trajectories_carry_the_env_fingerprint(tokenizer):
    engine = ScriptedEngine(tokenizer, ["#### 72"])
    generator = RolloutGenerator(
        engine, tokenizer, RolloutConfig(max_turns=1, sampling_params={"max_generate_length": 8})
    )
    (trajectory,) = await generator.run(
        [user("6 * 12?")], ["gsm8k"], [{"reward_spec": {"ground_truth": "72"}}]
    )
    assert trajectory.env_fingerprint == skyrl_gym.spec("gsm8k").fingerprint
    assert trajectory.to_json_dict()["env_fingerprint"] == trajectory.env_fingerprint
