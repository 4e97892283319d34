"""The built-in math envs: values as in SkyRL-gym, clear errors on bad rows, safe on huge actions."""

from __future__ import annotations

import json
import re

import pytest

import skyrl_gym
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows
from skyrl_gym.envs.gsm8k.multi_turn_env import LAST_TURN_MESSAGE, RETRY_MESSAGE
from skyrl_gym.envs.multiply.dataset import make_rows
from skyrl_gym.errors import DataError, EnvConfigError


def _gsm8k(ground_truth="18"):
    return skyrl_gym.make("gsm8k", extras={"reward_spec": {"method": "rule", "ground_truth": ground_truth}})


def test_every_gsm8k_reference_solution_scores_one_and_a_changed_number_scores_zero(gsm8k_test_file):
    # GSM8K-format rows made by the tests (thousands separators included); bench/gsm8k_reference_sweep.py runs
    # the same check over the 1,319 real test records.
    rows = list(gsm8k_rows(gsm8k_test_file, split="test"))
    assert len(rows) == 24
    for row in rows:
        reference = row["extra_info"]["answer"]
        env = skyrl_gym.make("gsm8k", extras=row)
        assert env.step(reference)["reward"] == 1.0, row["extra_info"]["index"]
        head, _, final = reference.rpartition("#### ")
        wrong = head + "#### " + str(int(float(final.replace(",", ""))) + 1)
        assert skyrl_gym.make("gsm8k", extras=row).step(wrong)["reward"] == 0.0


def test_gsm8k_is_one_step():
    output = _gsm8k().step("3 + 15 = 18\n#### 18")
    assert output == {"observations": [], "reward": 1.0, "done": True, "metadata": {"parsed_answer": "18"}}


@pytest.mark.parametrize("extras, message", [
    ({}, "reward_spec"),
    ({"reward_spec": {}}, "reward_spec.ground_truth is missing"),
    ({"reward_spec": {"ground_truth": None}}, "reward_spec.ground_truth is null in the row"),  # said "missing" (it
    # has 'ground_truth': did you mean 'ground_truth'?)
    (None, re.escape("needs its dataset row as extras, e.g. skyrl_gym.make('gsm8k', "
                     "extras={'reward_spec': {'ground_truth': ...}}); got None")),
])
def test_missing_ground_truth_is_a_clear_error(extras, message):
    with pytest.raises(DataError, match=message):
        skyrl_gym.make("gsm8k", extras=extras)


@pytest.mark.parametrize("env_id",
                         ["gsm8k", "math", "aime", "multiply", "lcb", "humaneval", "code_interpreter"])
def test_make_without_a_row_says_how_to_pass_one(env_id):
    """A new user's first `skyrl_gym.make(ID)` (no row) is told the keyword and shape to give, once."""
    with pytest.raises(DataError) as raised:
        skyrl_gym.make(env_id)
    message = str(raised.value)
    assert f"skyrl_gym.make({env_id!r}, extras={{'reward_spec': {{'ground_truth': ...}}}})" in message
    assert message.count(f"env {env_id!r}") == 1, message


def test_huge_and_odd_actions_give_zero_with_a_reason():
    output = _gsm8k().step("x" * 10_000_000)
    assert output["reward"] == 0.0 and output["metadata"]["action_clipped_from_chars"] == 10_000_000
    assert _gsm8k().step("∑ 😀 #### 18")["reward"] == 1.0
    odd = _gsm8k().step(None)  # type: ignore[arg-type]
    assert odd["reward"] == 0.0 and "action must be a string" in odd["metadata"]["action_type_error"]


def test_gsm8k_multi_turn_rewards_and_messages():
    row = {"reward_spec": {"ground_truth": "18"}, "extra_info": {"max_turns": 3}}
    env = skyrl_gym.make("gsm8k_multi_turn", extras=row)
    first = env.step("I think #### 17")
    assert first["reward"] == pytest.approx(0.2 / 3) and not first["done"]
    assert first["observations"] == [{"role": "user", "content": RETRY_MESSAGE}]
    second = env.step("no idea")
    assert second["reward"] == 0.0 and second["observations"] == [{"role": "user", "content": LAST_TURN_MESSAGE}]
    third = env.step("#### 18")
    assert third == {"observations": [], "reward": 1.0, "done": True, "metadata": {"parsed_answer": "18"}}
    assert env.get_metrics() == {"steps": 3}


def test_gsm8k_multi_turns_format_credit_is_skyrl_gyms_by_default_and_can_be_turned_off():
    """Summed over an episode, the format credit pays stalling (an attacker's pass): 1.16 for four formatted wrong
    turns before the right answer, 1.0 for the right answer at once. SkyRL-gym's 0.2 stays the default."""
    row = {"reward_spec": {"ground_truth": "18"}}

    def summed(actions, env_config=None):
        env = skyrl_gym.make("gsm8k_multi_turn", env_config=env_config, extras=row)
        return sum(env.step(action)["reward"] for action in actions)

    stalled = ["#### 1", "#### 2", "#### 3", "#### 4", "#### 18"]
    assert summed(stalled) == pytest.approx(1.16) and summed(["#### 18"]) == 1.0
    assert summed(stalled, {"format_score": 0}) == 1.0 == summed(["#### 18"], {"format_score": 0})
    for bad in (2, -0.1, "x"):
        with pytest.raises(EnvConfigError, match="env_config.format_score"):
            skyrl_gym.make("gsm8k_multi_turn", env_config={"format_score": bad}, extras=row)


def test_gsm8k_multi_turn_max_turns_sources():
    assert skyrl_gym.make("gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "1"}}).max_turns == 5
    env = skyrl_gym.make("gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "1"}, "max_turns": 2})
    assert env.max_turns == 2
    env.step("#### 0")
    assert env.step("#### 0")["done"]
    with pytest.raises(DataError, match="max_turns must be a whole number"):
        skyrl_gym.make("gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "1"}, "max_turns": "many"})


def test_aime_reads_reward_model_or_reward_spec():
    env = skyrl_gym.make("aime", extras={"reward_model": {"ground_truth": "204"}})
    output = env.step("long reasoning...\nAnswer: \\boxed{204}")
    assert output["reward"] == 1.0 and output["metadata"] == {"acc": True, "pred": "204"}
    env = skyrl_gym.make("aime", extras={"reward_spec": {"ground_truth": "204"}})
    assert env.step("Answer: 203")["reward"] == -1.0
    # only the last 300 characters count
    assert skyrl_gym.make("aime", extras={"reward_spec": {"ground_truth": "1"}}).step("Answer: 1" + " " * 400)["reward"] == -1.0


def test_math_env_uses_mathematical_equivalence():
    env = skyrl_gym.make("math", extras={"reward_spec": {"ground_truth": r"\frac{1}{2}"}})
    output = env.step(r"The answer is \boxed{0.5}.")
    assert output["reward"] == 1.0 and output["metadata"]["pred"] == "0.5"
    wrong = skyrl_gym.make("math", extras={"reward_spec": {"ground_truth": r"\frac{1}{2}"}}).step(r"\boxed{0.25}")
    assert wrong["reward"] == 0.0


def test_multiply_env_and_its_dataset():
    rows = make_rows(5, num_digits=2, seed=7)
    assert rows == make_rows(5, num_digits=2, seed=7)  # deterministic
    assert rows != make_rows(5, num_digits=2, seed=8)
    row = rows[0]
    a, b = (int(x) for x in row["prompt"][-1]["content"].split(" * "))
    assert row["reward_spec"]["ground_truth"] == str(a * b)
    env = skyrl_gym.make("multiply", extras=row)
    first = env.step(r"\boxed{1}")
    assert first["reward"] == 0.0 and "incorrect" in first["observations"][0]["content"]
    assert env.step(rf"\boxed{{{a * b}}}")["reward"] == 1.0
    single = skyrl_gym.make("multiply", env_config={"boxed_wrong_reward": 0.1}, extras={**row, "max_turns": 1})
    assert single.step(r"\boxed{1}") ["reward"] == 0.1
    empty = skyrl_gym.make("multiply", extras={**row, "max_turns": 1}).step(r"put it in \boxed{}")
    assert empty["reward"] == 0.0


def test_multiply_reads_commas_as_thousands_separators_only():
    """Every comma was dropped, so "\\boxed{1,8}" (two values, or 1.8 with a decimal comma) was paid for 18."""
    def reward(answer: str, truth: str) -> float:
        row = {"prompt": [{"role": "user", "content": "x"}], "reward_spec": {"ground_truth": truth}, "max_turns": 1}
        return skyrl_gym.make("multiply", extras=row).step(rf"\boxed{{{answer}}}")["reward"]

    wrong = reward("17", "18")  # a boxed wrong answer's partial credit
    assert wrong < 1.0 and reward("1,8", "18") == reward("18,", "18") == wrong
    assert reward("9,801", "9801") == reward("9801", "9801") == 1.0


def test_a_multiply_rows_partial_credit_wins_over_env_config_and_is_checked():
    """Rows that carry ``boxed_wrong_reward`` (the quickstart's) score the same wherever they are stepped."""
    row = {**make_rows(1, num_digits=1, seed=3)[0], "max_turns": 1, "boxed_wrong_reward": 0.1}
    assert skyrl_gym.make("multiply", extras=row).step(r"\boxed{-1}")["reward"] == 0.1
    env = skyrl_gym.make("multiply", env_config={"boxed_wrong_reward": 0.5}, extras=row)
    assert env.step(r"\boxed{-1}")["reward"] == 0.1
    for bad in (2, -0.1, "0.1", True):
        with pytest.raises(DataError, match=r"the row's boxed_wrong_reward must be a number from 0 to 1"):
            skyrl_gym.make("multiply", extras={**row, "boxed_wrong_reward": bad})


def test_rows_round_trip_through_json():
    rows = make_rows(2, seed=1)
    assert json.loads(json.dumps(rows)) == rows


@pytest.mark.parametrize("env_id, key, value, what", [
    ("multiply", "boxed_wrong_reward", "x", "a number"),
    ("math", "verify_timeout", True, "a number"),
    ("lcb", "timeout", "soon", "a number"),
    ("lcb", "memory_mb", "lots", "an integer"),
    ("humaneval", "memory_mb", [1], "an integer"),
    ("code_interpreter", "max_output_chars", "1e3", "an integer"),
])
def test_a_bad_number_in_env_config_names_the_env_and_the_key(env_id, key, value, what):
    """`float('x')` said only "could not convert string to float: 'x'"; now the message says whose key."""
    ground_truth = {"lcb": json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}]),
                    "humaneval": json.dumps({"prompt": "def f():\n", "test": "def check(c):\n    pass\n",
                                             "entry_point": "f"})}.get(env_id, "6")
    with pytest.raises(ValueError) as raised:
        skyrl_gym.make(env_id, env_config={key: value},
                       extras={"reward_spec": {"ground_truth": ground_truth}})
    assert str(raised.value) == f"env {env_id!r}: env_config.{key} must be {what}, got {value!r}"
