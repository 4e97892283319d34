"""``env_reward``: a skyrl_gym env as a TRL reward function (plain calls; no TRL needed)."""

from __future__ import annotations

import pytest

from skygym_adapters.trl import completion_text, env_reward, env_rollout_func, episode_reward, prompt_key
from skyrl_gym.errors import DataError, UnregisteredEnv

PROMPTS = [[{"role": "user", "content": "2+2?"}], [{"role": "user", "content": "3+3?"}]]


def test_env_reward_reads_the_ground_truth_from_the_reward_spec_column():
    reward = env_reward("gsm8k")
    completions = [[{"role": "assistant", "content": "#### 4"}], [{"role": "assistant", "content": "#### 7"}]]
    spec = [{"method": "rule", "ground_truth": "4"}, {"method": "rule", "ground_truth": "6"}]
    assert reward(PROMPTS, completions, reward_spec=spec, trainer_state=None) == [1.0, 0.0]
    assert reward.__name__ == "gsm8k_reward"


def test_env_reward_per_row_env_class_and_flat_ground_truth_column():
    reward = env_reward()
    rewards = reward(PROMPTS, ["#### 4", r"\boxed{6}"], env_class=["gsm8k", "math"], ground_truth=["4", "6"])
    assert rewards == [1.0, 1.0]


def test_env_reward_passes_extra_columns_to_the_env():
    # multiply gives partial credit for a boxed wrong answer on the last turn: max_turns comes from a column.
    reward = env_reward("multiply")
    spec = [{"ground_truth": "12"}, {"ground_truth": "12"}]
    assert reward(PROMPTS, [r"\boxed{13}", r"\boxed{13}"], reward_spec=spec, max_turns=[1, 5]) == [0.5, 0.0]


def test_missing_ground_truth_names_the_row():
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(DataError, match="row 1 has no 'reward_spec'"):
            env_reward("gsm8k")(PROMPTS, ["#### 4", "#### 6"], extra_info=[{}, {}],
                                reward_spec=[{"ground_truth": "4"}])
        gc.collect()
    # row 0's scoring was made a coroutine before row 1 was read, and was never awaited
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]


def test_unknown_env_fails_when_the_reward_is_built():
    with pytest.raises(Exception, match="gsm9k"):
        env_reward("gsm9k")


def test_episode_reward_reads_the_rollout_column_and_explains_when_missing():
    assert episode_reward(PROMPTS, ["a", "b"], env_reward=[1.0, 0.25]) == [1.0, 0.25]
    with pytest.raises(DataError, match="env_rollout_func"):
        episode_reward(PROMPTS, ["a", "b"])


def test_completion_text_and_prompt_key():
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]) == "ab"
    assert prompt_key([{"role": "user", "content": "x", "name": None}]) == prompt_key([{"content": "x", "role": "user"}])


def test_a_rollout_func_over_rows_of_an_unknown_env_fails_when_it_is_built():
    rows = [{"prompt": [{"role": "user", "content": "1+1?"}], "env_class": "gsm8k",
             "reward_spec": {"method": "rule", "ground_truth": "2"}},
            {"prompt": [{"role": "user", "content": "2+2?"}], "env_class": "gsm8kk",
             "reward_spec": {"method": "rule", "ground_truth": "4"}}]
    with pytest.raises(DataError, match=r"env_rollout_func: row 1's env_class: .*gsm8kk.*'gsm8k'"):
        env_rollout_func(rows)
    with pytest.raises(UnregisteredEnv, match="gsm8kk"):
        env_rollout_func(rows[:1], env_id="gsm8kk")
    assert callable(env_rollout_func(rows[:1]))
    with pytest.raises(DataError, match=r"row 0's env_class must be an env id, got \['gsm8k'\]"):
        env_rollout_func([{**rows[0], "env_class": ["gsm8k"]}])


def test_rows_that_share_a_prompt_must_play_alike():
    """TRL hands a rollout function only the prompts: two rows with one prompt but another turn limit or partial
    credit would both be played by one of them. Rows that differ only in their ids (``index``, ``split``) are one."""
    prompt = [{"role": "user", "content": "What is 3 times 4?"}]
    row = {"prompt": prompt, "env_class": "multiply", "reward_spec": {"ground_truth": "12"},
           "extra_info": {"index": 0, "split": "train", "max_turns": 1}}
    assert callable(env_rollout_func([row, {**row, "extra_info": {**row["extra_info"], "index": 7}}]))
    assert callable(env_rollout_func([{**row, "data_source": "nq"}, {**row, "data_source": "hotpotqa"}]))  # no env reads it
    with pytest.raises(DataError, match=r"row 1 has the same prompt as row 0 but another boxed_wrong_reward"):
        env_rollout_func([row, {**row, "boxed_wrong_reward": 0.9}])
    with pytest.raises(DataError, match=r"row 2 has the same prompt as row 0 but another extra_info.max_turns "
                                        r"\(extra_info.max_turns: 1 / 3\)"):
        env_rollout_func([row, row, {**row, "extra_info": {"index": 2, "max_turns": 3}}])
    with pytest.raises(DataError, match=r"but another reward_spec"):
        env_rollout_func([row, {**row, "reward_spec": {"ground_truth": "13"}}])


def test_rows_read_with_pandas_that_share_a_prompt_compare_by_value():
    """pandas gives NaN for a missing value (NaN != NaN) and numpy arrays for list columns (whose == is not a
    truth value): two such copies of one row are one row, and an array that differs is named, not a traceback."""
    np = pytest.importorskip("numpy", reason="numpy reads like pandas' rows; pip install numpy")
    prompt = np.array([{"role": "user", "content": "What is 3 times 4?"}], dtype=object)
    row = {"prompt": list(prompt), "env_class": "multiply", "reward_spec": {"ground_truth": "12"},
           "difficulty": float("nan"), "tags": np.array(["a", "b"]), "id": "q1"}
    assert callable(env_rollout_func([row, {**row, "id": "q2"}]))
    with pytest.raises(DataError, match=r'row 1 has the same prompt as row 0 but another tags \(tags: \["a", "b"\] / \["a", "c"\]\)'):
        env_rollout_func([row, {**row, "tags": np.array(["a", "c"])}])
