"""The countdown community env: exact arithmetic, no eval, clear reasons."""

from __future__ import annotations

import pytest

from skygym_contrib.countdown.dataset import make_rows
from skygym_contrib.countdown.env import CountdownEnv, ExpressionError, evaluate
from skyrl_gym.errors import DataError

ROW = {"reward_spec": {"ground_truth": {"target": 50, "numbers": [3, 7, 5]}}}


@pytest.mark.parametrize(
    "answer, reward, reason",
    [
        ("<answer>(3 + 7) * 5</answer>", 1.0, None),
        ("<answer>3 + 7 + 5</answer>", 0.1, "evaluates to 15, not 50"),
        ("<answer>(3 + 7) * 5 * 1</answer>", 0.1, "exactly once"),
        ("<answer>__import__('os')</answer>", 0.0, "only integers"),
        ("<answer>5 / (7 - 7)</answer>", 0.0, "division by zero"),
        ("(3 + 7) * 5", 0.0, "no <answer>"),
    ],
)
def test_countdown_rewards(answer, reward, reason):
    output = CountdownEnv(extras=ROW).step(answer)
    assert output["reward"] == reward and output["done"] is True
    if reason:
        assert reason in output["metadata"]["reason"]


def test_exact_fractions():
    assert evaluate("7 / 3 * 3")[0] == 7


def test_bad_rows_and_long_expressions():
    with pytest.raises(DataError, match="ground_truth must be"):
        CountdownEnv(extras={"reward_spec": {"ground_truth": 50}})
    with pytest.raises(ExpressionError, match="too long"):
        evaluate("1+" * 200 + "1")


def test_generated_rows_are_solvable_by_construction():
    rows = make_rows(20, seed=1)
    assert rows == make_rows(20, seed=1)
    for row in rows:
        truth = row["reward_spec"]["ground_truth"]
        assert truth["target"] > 0 and len(truth["numbers"]) == 3
        assert CountdownEnv(extras=row).step(row["extra_info"]["solution"])["reward"] == 1.0


def test_registered_through_the_entry_point_when_installed():
    from importlib.metadata import PackageNotFoundError, distribution

    import skyrl_gym

    try:
        distribution("skyrl-gym")
    except PackageNotFoundError:
        pytest.skip("skyrl-gym is not installed (running from a source tree): no entry points to read")
    env = skyrl_gym.make("countdown", extras=ROW)
    assert isinstance(env, CountdownEnv)
    assert skyrl_gym.spec("countdown").provider == "skyrl-gym"
