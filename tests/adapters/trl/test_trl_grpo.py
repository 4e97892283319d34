"""Real ``GRPOTrainer`` steps on CPU with a tiny model and skyrl_gym rewards (single- and multi-turn)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]' in a virtual environment of its own (nox -s trl)")
pytestmark = pytest.mark.trl

import skyrl_gym  # noqa: E402
from skygym_adapters.trl import env_reward, env_rollout_func, episode_reward, rows_to_dataset  # noqa: E402
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows  # noqa: E402
from skyrl_gym.envs.gsm8k.multi_turn_env import LAST_TURN_MESSAGE  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _config(tmp_path, **overrides):
    from trl import GRPOConfig

    settings = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to="none",
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=16,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def _recording(reward_fn, calls):
    def recorded(prompts, completions, **kwargs):
        rewards = reward_fn(prompts, completions, **kwargs)
        calls.append({"completions": completions, "rewards": rewards, "columns": kwargs})
        return rewards

    recorded.__name__ = reward_fn.__name__
    return recorded


def test_two_grpo_steps_with_an_env_reward(tmp_path, gsm8k_test_file, tiny_model_dir):
    from trl import GRPOTrainer

    rows = list(gsm8k_rows(gsm8k_test_file, limit=8))
    calls = []
    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=[_recording(env_reward("gsm8k"), calls)],
        args=_config(tmp_path),
        train_dataset=rows_to_dataset(rows),
    )
    trainer.train()

    assert trainer.state.global_step == 2
    assert len(calls) == 2
    truths = {row["reward_spec"]["ground_truth"] for row in rows}
    for call in calls:
        # TRL handed the dataset's reward_spec column through; the rewards are the env's own scores.
        assert {spec["ground_truth"] for spec in call["columns"]["reward_spec"]} <= truths
        for completion, spec, got in zip(call["completions"], call["columns"]["reward_spec"], call["rewards"]):
            env = skyrl_gym.make("gsm8k", extras={"reward_spec": spec})
            assert got == env.step(completion[0]["content"])["reward"]
    logged = [entry for entry in trainer.state.log_history if "rewards/gsm8k_reward/mean" in entry]
    assert len(logged) == 2


def test_two_grpo_steps_with_multi_turn_episodes_through_rollout_func(tmp_path, gsm8k_test_file, tiny_model_dir):
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    rows = list(gsm8k_rows(gsm8k_test_file, limit=4, env_class="gsm8k_multi_turn"))
    rollout = env_rollout_func(rows, max_turns=2, max_tokens_per_turn=6)
    outputs = []

    def recorded_rollout(prompts, trainer):
        result = rollout(prompts, trainer)
        outputs.append((prompts, result))
        return result

    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=[episode_reward],
        args=_config(tmp_path, max_completion_length=64),
        train_dataset=rows_to_dataset(rows),
        rollout_func=recorded_rollout,
    )
    trainer.train()

    assert trainer.state.global_step == 2 and len(outputs) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for prompts, result in outputs:
        assert len(result["completion_ids"]) == len(prompts)  # one episode per (repeated) prompt
        for ids, mask, logprobs, turns in zip(
            result["completion_ids"], result["env_mask"], result["logprobs"], result["env_turns"]
        ):
            assert turns == 2 and len(ids) == len(mask) == len(logprobs)
            # model turn (mask 1), the env's message (mask 0), model turn (mask 1)
            runs = [mask[0]] + [m for prev, m in zip(mask, mask[1:]) if m != prev]
            assert runs == [1, 0, 1]
            env_tokens = [t for t, m in zip(ids, mask) if m == 0]
            assert LAST_TURN_MESSAGE in tokenizer.decode(env_tokens)
            assert all(lp < 0 for lp, m in zip(logprobs, mask) if m == 1)
    logged = [entry for entry in trainer.state.log_history if "rewards/episode_reward/mean" in entry]
    assert len(logged) == 2
