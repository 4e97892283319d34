"""``searchcode`` episodes: search through the real retrieval server, Python in the real sandbox."""

from __future__ import annotations

import asyncio
import json

import pytest

import skyrl_gym
from skyrl_gym.tools.search import SearchToolGroup
from tests.tool_env_support import RetrieverProcess, first_observation, search_config, write_corpus


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process = RetrieverProcess(write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def sandbox_ready():
    from skygym_sandboxes import run_python

    result = run_python("print('ready')", timeout=20)
    if result.status == "sandbox_error":
        pytest.skip(f"the local sandbox cannot run here: {result.message}")
    return True


def make_env(url, ground_truth="8849", max_turns=4, **config):
    return skyrl_gym.make(
        "searchcode",
        env_config=search_config(url, **{"python_timeout": 5.0, **config}),
        extras={"reward_spec": {"method": "rule", "ground_truth": ground_truth}, "max_turns": max_turns},
    )


def test_search_then_compute_then_solve(server, sandbox_ready):
    env = make_env(server.url)
    out1 = env.step("<think>Look it up.</think><tool><search>highest mountain height metres</search></tool>")
    found = json.loads(first_observation(out1))["result"]
    assert "8,849 metres" in found
    assert out1["metadata"]["tool_name"] == "search" and out1["metadata"]["tools"] == [["search"], ["python"]]
    out2 = env.step("<tool><python>print(int('8,849'.replace(',', '')))</python></tool>")
    assert first_observation(out2) == "8849"
    final = env.step("<solution>The height is #### 8849</solution>")
    assert final["done"] and final["reward"] == 1.0
    assert final["metadata"] == {"parsed_answer": "8849", "ground_truth": "8849"}
    assert env.get_metrics() == {"turns": 3, "search_calls": 1, "python_calls": 1, "correct": True}


def test_python_errors_and_timeouts_are_observations(server, sandbox_ready):
    env = make_env(server.url, max_turns=5, python_timeout=1.0)
    error = first_observation(env.step("<tool><python>raise ValueError('fail')</python></tool>"))
    assert error.startswith("Error executing Python code:") and error.endswith("ValueError: fail")
    timeout = first_observation(env.step("<tool><python>while True: pass</python></tool>"))
    assert timeout == "Error executing Python code: Execution timed out after 1.0 seconds."  # as SkyRL-gym prints it
    silent = first_observation(env.step("<tool><python>x = 1</python></tool>"))
    assert "print()" in silent
    wrong = env.step("<solution>#### 7</solution>")
    assert wrong["reward"] == 0.0 and "7" in wrong["metadata"]["reason"]


def test_sandbox_keeps_code_away_from_the_host(server, sandbox_ready, tmp_path):
    marker = tmp_path / "written_by_model.txt"
    env = make_env(server.url)
    env.step(f"<tool><python>open({str(marker)!r}, 'w').write('x')</python></tool>")
    assert not marker.exists()


def test_bad_tool_calls_say_what_is_expected(server):
    env = make_env(server.url, max_turns=4)
    missing = first_observation(env.step("I will just think."))
    assert missing.startswith("No <tool>...</tool> block found") and "<tool><python>" in missing
    unknown = first_observation(env.step("<tool><shell>ls</shell></tool>"))
    assert unknown.startswith("Tool 'shell' not found")


def test_search_url_comes_from_env_config(server):
    env = make_env(server.url)
    assert env.search_tools.search_url == server.url and env.search_tools.topk == 3


def test_async_episodes_use_both_tools_concurrently(server, sandbox_ready):
    async def episode(i):
        env = make_env(server.url, ground_truth=str(i * i))
        searched = first_observation(await env.astep("<tool><search>Jupiter moons</search></tool>"))
        computed = first_observation(await env.astep(f"<tool><python>print({i} * {i})</python></tool>"))
        final = await env.astep(f"<solution>#### {computed}</solution>")
        return "95 known moons" in searched, final["reward"]

    async def main():
        results = await asyncio.gather(*(episode(i) for i in range(12)))
        await SearchToolGroup.close_async_sessions()
        return results

    assert asyncio.run(main()) == [(True, 1.0)] * 12


def test_the_inner_call_is_what_the_regular_expression_found():
    import re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from skyrl_gym.envs.searchcode.env import _first_inner_call

    reference = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)  # SkyRL-gym's

    pieces = ["<a>", "</a>", "<b>", "</b>", "<ab>", "</ab>", "<", ">", "/", "a", " ", "\n"]

    @settings(max_examples=800, deadline=None)
    @given(st.lists(st.sampled_from(pieces), max_size=16).map("".join))
    def agree(text):
        found = reference.search(text)
        assert _first_inner_call(text) == (None if found is None else (found.group(1), found.group(2)))

    agree()


@pytest.mark.timeout(20)
def test_a_tool_block_of_unclosed_tags_is_read_at_once():
    """400,000 characters of <x> inside a <tool> block held a step 157 s: every opening was searched to the
    end."""
    env = skyrl_gym.make("searchcode", extras={"reward_spec": {"ground_truth": "1"}})
    env.init([{"role": "user", "content": "q"}])
    out = env.step("<tool>" + "<x>" * 300_000 + "</tool>")
    assert not out["done"] and "No valid inner tool tag" in json.dumps(out["observations"])
