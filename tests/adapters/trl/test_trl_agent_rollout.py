"""Real ``GRPOTrainer`` steps on CPU whose episodes an agent of the agent layer plays (``agent_rollout_func``)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]' in a virtual environment of its own (nox -s trl)")
pytestmark = pytest.mark.trl

from skygym_adapters.trl import agent_rollout_func, episode_reward, rows_to_dataset  # noqa: E402
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows  # noqa: E402
from skyrl_gym.envs.gsm8k.multi_turn_env import LAST_TURN_MESSAGE  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_two_grpo_steps_with_agent_trajectories_through_rollout_func(tmp_path, gsm8k_test_file, tiny_model_dir):
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = list(gsm8k_rows(gsm8k_test_file, limit=4, env_class="gsm8k_multi_turn"))
    for row in rows:
        row["max_turns"] = 2
    # task: env makes the row's env the agent's task; the YAML's backend is replaced by the policy being trained.
    agent = {"agent_cls": "react", "task": "env",
             "generator": {"infer_backend": "openai_server", "backend_config": {"base_url": "http://127.0.0.1:1"},
                           "max_iterations": 2, "sampling_params": {"max_tokens": 6, "temperature": 0.0}}}
    rollout = agent_rollout_func(agent, rows)
    outputs = []

    def recorded_rollout(prompts, trainer):
        result = rollout(prompts, trainer)
        outputs.append((prompts, result))
        return result

    columns = []

    def recorded_reward(prompts, completions, **kwargs):
        columns.append(kwargs)
        return episode_reward(prompts, completions, **kwargs)

    recorded_reward.__name__ = "episode_reward"
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", max_steps=2, per_device_train_batch_size=4,
        num_generations=2, max_completion_length=64, learning_rate=1e-3, logging_steps=1, save_strategy="no", seed=0,
    )
    trainer = GRPOTrainer(
        model=str(tiny_model_dir), reward_funcs=[recorded_reward], args=config,
        train_dataset=rows_to_dataset(rows), rollout_func=recorded_rollout,
    )
    trainer.train()

    assert trainer.state.global_step == 2 and len(outputs) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for prompts, result in outputs:
        assert len(result["completion_ids"]) == len(prompts)  # one trajectory per (repeated) prompt
        assert result["agent_finish_reason"] == ["FINISH"] * len(prompts)  # the env ended each at its turn limit
        for ids, mask, logprobs, turns in zip(
            result["completion_ids"], result["env_mask"], result["logprobs"], result["env_turns"]
        ):
            assert turns == 2 and len(ids) == len(mask) == len(logprobs)
            runs = [mask[0]] + [m for prev, m in zip(mask, mask[1:]) if m != prev]
            assert runs == [1, 0, 1]  # model turn, the env's message (not trained on), model turn
            assert LAST_TURN_MESSAGE in tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
            assert sum(mask) <= 2 * (6 + 1)  # the YAML's max_tokens per turn (+ a closing end-of-turn token)
            # TRL's own temperature (1.0) replaced the YAML's 0.0: logprobs of sampled tokens, not of greedy ones
            assert all(lp < 0 for lp, m in zip(logprobs, mask) if m == 1)
    # The task's rewards reached the reward function as the env_reward column, with the finish reasons.
    assert [c["env_reward"] for c in columns] == [r["env_reward"] for _, r in outputs]
    assert all(c["agent_finish_reason"] == r["agent_finish_reason"] for c, (_, r) in zip(columns, outputs))
    assert len([e for e in trainer.state.log_history if "rewards/episode_reward/mean" in e]) == 2
