"""Learning tests: a tiny model from its random start raises its reward on a toy env within bounded steps.

The env rewards the share of the letter ``e`` in the response (a random model writes ~10%); a working
trainer finds tokens full of ``e`` within a few dozen updates. Both run the real loop: the HF engine,
the rollout generator, the env, the worker's update and the in-process weight sync.
"""

from __future__ import annotations

import pytest

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


def _rewards(result):
    return [h["reward/mean"] for h in result["history"] if "reward/mean" in h]


@pytest.mark.slow
@pytest.mark.parametrize(
    "estimator,steps",
    [("grpo", 30), ("gae", 30)],  # gae = PPO with a critic (values from a second model with a value head)
)
def test_reward_rises_from_random_start(estimator, steps, tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(
        toy_overrides(
            tiny_chat_model,
            toy_data,
            tmp_path,
            **{
                "trainer.algorithm.advantage_estimator": estimator,
                "trainer.max_training_steps": steps,
                # 8 prompts x 4 samples: with 4 prompts the outcome at lr 5e-2 hung on the seed (one in
                # three seeds collapsed onto a low-reward answer); with 8 seeds 42, 1 and 2 all rise by >0.25
                "trainer.train_batch_size": 8,
                "trainer.policy_mini_batch_size": 8,
                "trainer.critic_mini_batch_size": 8,
                "trainer.micro_train_batch_size_per_gpu": 32,
                "trainer.micro_forward_batch_size_per_gpu": 32,
            },
        )
    )
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
        if estimator == "gae":
            assert trainer.critic is not None
    rewards = _rewards(result)
    assert len(rewards) == steps
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.08, f"{estimator}: reward did not rise: {[round(r, 3) for r in rewards]}"
    assert last > 1.8 * first
