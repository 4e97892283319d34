"""The veRL custom reward: called directly, and through veRL's own reward worker on GSM8K rows."""

from __future__ import annotations

import asyncio

import pytest

from skygym_adapters.verl.reward import compute_score
from skygym_adapters.verl.rows import rows_to_verl
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows
from skyrl_gym.errors import DataError


def test_compute_score_uses_the_env_of_the_data_source():
    assert compute_score("openai/gsm8k", "so the answer is #### 72", "72", {}) == 1.0
    assert compute_score("openai/gsm8k", "so the answer is #### 71", "72", {}) == 0.0
    # math env: math-verify equivalence of the boxed answer
    assert compute_score("math", r"\boxed{\frac{1}{2}}", "0.5", {}) == 1.0


def test_compute_score_reads_env_class_and_extra_columns_from_converted_rows(gsm8k_test_file):
    row = next(gsm8k_rows(gsm8k_test_file, limit=1, env_class="gsm8k_multi_turn"))
    row["max_turns"] = 2  # reaches the env: a formatted wrong answer earns 0.2 / 2
    verl_row = rows_to_verl([row])[0]
    wrong = compute_score(verl_row["data_source"], "#### 1", verl_row["reward_model"]["ground_truth"], verl_row["extra_info"])
    assert wrong == pytest.approx(0.1)


def test_an_episode_reward_from_the_agent_loop_is_returned_unchanged():
    assert compute_score("openai/gsm8k", "garbage", "72", {"skyrl_gym_reward": 1.25}) == 1.25


def test_unknown_env_is_a_clear_error():
    with pytest.raises(Exception, match="no_such_env"):
        compute_score("x", "#### 1", "1", {}, env_class="no_such_env")
    with pytest.raises(DataError, match="names no env"):
        compute_score("my/private-set", "#### 1", "1", {})


@pytest.mark.verl
def test_verl_reward_worker_scores_gsm8k_rows_with_the_env(tmp_path, gsm8k_test_file, tiny_model_dir, tokenizer):
    """veRL's RewardLoopWorker -> NaiveRewardManager -> our compute_score, on real GSM8K rows."""
    pytest.importorskip("verl", reason="needs the 'verl' extra, in a venv of its own: nox -s verl")
    import numpy as np
    import torch
    from verl.protocol import DataProto

    from skygym_adapters.verl.local import compose_config, compute_rewards

    rows = list(gsm8k_rows(gsm8k_test_file, limit=12))
    verl_rows = rows_to_verl(rows)
    # Responses: the reference solution for even rows, the same with a wrong final number for odd rows.
    responses = []
    for i, row in enumerate(rows):
        solution = row["extra_info"]["answer"]
        if i % 2:
            solution = solution.rsplit("####", 1)[0] + "#### " + str(int(row["reward_spec"]["ground_truth"]) + 1)
        responses.append(solution)
    encoded = [tokenizer.encode(text, add_special_tokens=False) for text in responses]
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id
    response_tensor = torch.tensor([ids + [pad] * (width - len(ids)) for ids in encoded])
    prompt_tensor = torch.full((len(rows), 4), pad)
    attention = torch.cat(
        [torch.ones(len(rows), 4, dtype=torch.long),
         torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in encoded])], dim=1
    )
    batch = DataProto.from_single_dict(
        {
            "prompts": prompt_tensor,
            "responses": response_tensor,
            "attention_mask": attention,
            "data_source": np.array([r["data_source"] for r in verl_rows], dtype=object),
            "reward_model": np.array([r["reward_model"] for r in verl_rows], dtype=object),
            "extra_info": np.array([r["extra_info"] for r in verl_rows], dtype=object),
        }
    )
    config = compose_config(
        tiny_model_dir,
        [
            "actor_rollout_ref.rollout.name=vllm",
            "reward.custom_reward_function.path=pkg://skygym_adapters.verl.reward",
            "reward.custom_reward_function.name=compute_score",
        ],
    )
    results = asyncio.run(compute_rewards(config, batch))
    scores = [result["reward_score"] for result in results]
    assert scores == [0.0 if i % 2 else 1.0 for i in range(len(rows))]
