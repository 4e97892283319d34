"""Full ``search`` episodes through the real retrieval server started on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

import pytest

import skyrl_gym
from skyrl_gym.envs.search.utils import compute_score, extract_solution
from skyrl_gym.errors import DataError
from skyrl_gym.tools.search import SearchToolGroup
from tests.tool_env_support import RetrieverProcess, first_observation, search_config, write_corpus


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process = RetrieverProcess(write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl"))
    yield process
    process.stop()


def make_env(url, target, max_turns=2):
    return skyrl_gym.make(
        "search",
        env_config=search_config(url),
        extras={"reward_spec": {"method": "rule", "ground_truth": {"target": target}}, "max_turns": max_turns},
    )


def test_search_then_answer_scores_one(server):
    env = make_env(server.url, ["William Shakespeare", "Shakespeare"])
    out1 = env.step("<think>I should look it up.</think><search>who wrote Hamlet</search>")
    observation = first_observation(out1)
    assert not out1["done"] and out1["reward"] == 0.0
    assert observation.startswith("\n<information>") and observation.endswith("</information>\n")
    result = json.loads(observation[len("\n<information>") : -len("</information>\n")])["result"]
    assert result.startswith("Doc 1: \"Hamlet\"\nHamlet is a tragedy written by William Shakespeare")
    assert out1["metadata"]["tool_input"] == ["who wrote Hamlet"] and out1["metadata"]["search_status"] == "success"
    out2 = env.step("<think>Found it.</think><answer> the Shakespeare. </answer>")
    assert out2["done"] and out2["observations"] == [] and out2["reward"] == 1.0
    assert out2["metadata"] == {"answer": "the Shakespeare.", "targets": ["William Shakespeare", "Shakespeare"]}
    assert env.get_metrics() == {"turns": 2, "searches": 1, "search_errors": 0, "correct": True}


def test_wrong_answer_and_missing_answer_score_zero(server):
    env = make_env(server.url, "Paris")
    assert env.step("<answer>Lyon</answer>")["reward"] == 0.0
    env = make_env(server.url, "Paris", max_turns=2)
    env.step("<search>capital of France</search>")
    final = env.step("<search>again</search>")
    assert final["done"] and final["reward"] == 0.0


def test_action_without_search_tag_gets_empty_information(server):
    env = make_env(server.url, "Paris", max_turns=3)
    out = env.step("I will search <search>unclosed")
    assert first_observation(out) == "\n<information></information>\n"


def test_async_episodes_share_one_loop_and_pooled_connections(server):
    questions = [("capital of Germany", "Berlin"), ("highest mountain", "Mount Everest"), ("Python programming language", "Python")]

    async def episode(question, target):
        env = make_env(server.url, target)
        out = await env.astep(f"<search>{question}</search>")
        assert "<information>" in first_observation(out)
        top = json.loads(first_observation(out).strip()[len("<information>") : -len("</information>")])["result"]
        answer = top.split("\n", 1)[0].split('"')[1].split(" (")[0]  # the title of the best document
        final = await env.astep(f"<answer>{answer}</answer>")
        return final["reward"]

    async def main():
        rewards = await asyncio.gather(*(episode(q, t) for q, t in questions * 20))
        await SearchToolGroup.close_async_sessions()
        return rewards

    assert asyncio.run(main()) == [1.0] * 60


def test_reward_matches_skyrl_gym_rules():
    assert compute_score("<answer>The Eiffel Tower!</answer>", {"target": ["eiffel tower"]}) == 1.0
    assert compute_score("<answer>wrong</answer><answer>Paris</answer>", {"target": "Paris"}) == 1.0
    assert compute_score("no answer", {"target": "Paris"}) == 0.0
    assert compute_score("<answer>Paris</answer>", "Paris") == 1.0
    assert extract_solution("<answer>  a  </answer>") == "a"


def test_row_without_ground_truth_is_rejected_with_the_field_name():
    with pytest.raises(DataError, match="ground_truth"):
        skyrl_gym.make("search", env_config={}, extras={"reward_spec": {"method": "rule"}})
    with pytest.raises(DataError, match="search ground_truth"):
        skyrl_gym.make("search", env_config={}, extras={"reward_spec": {"ground_truth": {"target": 5}}})


def test_rows_from_the_example_script_drive_a_full_episode(server, tmp_path):
    import subprocess
    import sys

    from skyrl_gym.data import load_rows, validate_row
    from tests.tool_env_support import REPO_ROOT

    source = tmp_path / "qa.jsonl"
    source.write_text(json.dumps({"question": "Who wrote Hamlet?", "golden_answers": ["William Shakespeare"]}) + "\n")
    done = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / "search" / "make_search_rows.py"), str(source),
                           str(tmp_path / "rows.jsonl"), "--max-turns", "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (row,) = load_rows(str(tmp_path / "rows.jsonl"))
    validate_row(row, 0)
    assert "<search>" in row["prompt"][1]["content"] and row["prompt"][1]["content"].endswith("Who wrote Hamlet?")
    env = skyrl_gym.make("search", env_config=search_config(server.url), extras=row)
    env.init(row["prompt"])
    assert "Shakespeare" in first_observation(env.step("<think>?</think><search>Hamlet author</search>"))
    assert env.step("<answer>William Shakespeare</answer>")["reward"] == 1.0


def test_the_answer_is_what_the_regular_expression_found():
    import re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    reference = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)  # SkyRL-gym's
    pieces = ["<answer>", "</answer>", "<answer", "answer>", " ", "\n", "Paris", "x"]

    @settings(max_examples=600, deadline=None)
    @given(st.lists(st.sampled_from(pieces), max_size=14).map("".join))
    def agree(text):
        found = reference.findall(text)
        assert extract_solution(text) == (found[-1].strip() if found else None)

    agree()


@pytest.mark.timeout(20)
def test_an_answer_followed_by_unclosed_answer_tags_is_read_at_once():
    """A final answer then 400,000 characters of <answer> took the reward 134 s: every opening was searched to
    the end of the transcript."""
    env = skyrl_gym.make("search", extras={"reward_spec": {"ground_truth": {"target": ["Paris"]}}})
    env.init([{"role": "user", "content": "q"}])
    assert env.step("<answer>Paris</answer>" + "<answer>" * 100_000)["reward"] == 1.0
