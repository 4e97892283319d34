"""The 'word_sort' env through skyrl_gym's public API, as installed (entry points)."""

import pytest

import skyrl_gym
from skyrl_gym import datasets
from skyrl_gym.checker import check_env
from skyrl_gym.data import row_extras
from skyrl_gym.errors import DataError


def make(words):
    env = skyrl_gym.make("word_sort", extras={"reward_spec": {"method": "rule", "ground_truth": words}})
    env.init([{"role": "user", "content": "Sort these words alphabetically: " + ", ".join(words)}])
    return env


def test_the_env_and_its_builder_are_registered():
    assert "word_sort" in skyrl_gym.registry and datasets.has_dataset("word_sort")


def test_rows_are_deterministic_and_their_reference_is_right():
    rows = datasets.build_rows("word_sort", split="test", size=8, seed=3)
    assert rows == datasets.build_rows("word_sort", split="test", size=8, seed=3)
    for row in rows:
        env = skyrl_gym.make("word_sort", extras=row_extras(row))
        env.init(row["prompt"])
        assert env.step(row["extra_info"]["reference_action"])["reward"] == 1.0


@pytest.mark.parametrize("answer, reason", [
    ("sorted: policy, reward, agent", "no complete <answer>"),
    ("<answer>agent, reward, policy</answer>", "'reward' comes after 'policy'"),
    ("<answer>agent, policy</answer>", "missing reward"),
    ("<answer>agent, policy, reward, token</answer>", "not in the list: token"),
])
def test_a_wrong_answer_gets_its_reason_and_a_second_try(answer, reason):
    env = make(["policy", "reward", "agent"])
    first = env.step(answer)
    assert first["reward"] == 0.0 and not first["done"] and reason in first["metadata"]["reason"]
    assert reason in first["observations"][0]["content"]
    second = env.step("<answer>Agent policy reward</answer>")  # case and separators do not matter
    assert second["reward"] == 1.0 and second["done"]


def test_the_second_wrong_answer_ends_the_episode():
    env = make(["b", "a"])
    assert not env.step("<answer>b, a</answer>")["done"]
    last = env.step("<answer>b, a</answer>")
    assert last["done"] and last["reward"] == 0.0 and last["observations"] == []


def test_a_row_without_its_words_is_refused():
    with pytest.raises(DataError, match="ground_truth must be the list of words"):
        skyrl_gym.make("word_sort", extras={"reward_spec": {"method": "rule", "ground_truth": "agent"}})


def test_the_checker_passes_on_builder_rows():
    rows = datasets.build_rows("word_sort", split="test", size=4, seed=0)
    report = check_env("word_sort", rows, huge_action_chars=100_000)
    assert report.ok, str(report)


def test_the_audit_passes():
    """Golden answers earn 1.0; no reward hack (the library's and word_sort's own, in audit.py) earns more
    than a wrong answer."""
    from skyrl_gym.audit import audit_env

    report = audit_env("word_sort", max_rows=2)
    assert report.ok, report.table()
    assert {"the words in reverse order", "every word twice"} <= {case.name for case in report.cases}
