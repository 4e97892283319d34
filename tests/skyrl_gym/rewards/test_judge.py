"""LLM-as-judge rewards (``reward_spec.method: judge``) against a real judge server process.

The judge under test is ``judge_server.py``: an OpenAI-compatible chat server, started here as its own process,
that follows a rule instead of a model (no judge model runs on the test machines), so verdicts are deterministic.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

import skyrl_gym
from skyrl_gym.episode import ScriptedPolicy, make_env_factory, run_episode
from skyrl_gym.errors import DataError
from skyrl_gym.rewards.judge import (
    JudgeClient,
    JudgeEndpoint,
    JudgeError,
    JudgeRequest,
    judge_messages,
    judge_response,
    parse_verdict,
)
from tests.skyrl_gym.rewards.judge_support import JudgeServer, gsm8k_row

HERE = Path(__file__).resolve().parent
GOLDEN = json.loads((HERE / "judge_golden.json").read_text())
TOKEN = "judge-test-token"


@pytest.fixture(scope="module")
def server() -> Iterator[JudgeServer]:
    judge = JudgeServer()
    yield judge
    judge.stop()


def judge_config(server: JudgeServer, model: str = "rule-judge", **settings: Any) -> Dict[str, Any]:
    # base_url in the OpenAI client's form (".../v1"); a fresh cache per test through a distinct cache_size
    return {"judge": {"base_url": server.url + "/v1", "model": model, "retry_delay_s": 0.01, **settings}}


# ----- reading verdicts ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", GOLDEN["verdicts"], ids=lambda case: case["text"][:30] or "empty")
def test_parse_verdict_golden_cases(case):
    if "error" in case:
        with pytest.raises(JudgeError, match=case["error"].replace("[", r"\[").replace("]", r"\]")):
            parse_verdict(case["text"], case.get("scale", 1.0))
    else:
        score, label = parse_verdict(case["text"], case.get("scale", 1.0))
        assert score == pytest.approx(case["score"])
        assert label == case.get("label")


def test_the_request_holds_question_reference_rubric_and_the_tail_of_a_long_response():
    messages = judge_messages(
        "x" * 50 + "FINAL 42", {"answer": 42}, "be strict", "What is 6*7?", max_response_chars=10, fence="f00d"
    )
    user = messages[-1]["content"]
    assert "<question-f00d>\nWhat is 6*7?\n</question-f00d>" in user
    assert '<reference-f00d>\n{"answer": 42}\n</reference-f00d>' in user and "be strict" in user
    assert "FINAL 42" in user and "x" * 11 not in user  # the tail: where the final answer is


# ----- configuration ---------------------------------------------------------------------------------------------
def test_a_judge_row_without_an_endpoint_fails_at_make_naming_the_setting(monkeypatch):
    monkeypatch.delenv("SKYRL_GYM_JUDGE_URL", raising=False)
    with pytest.raises(JudgeError, match="SKYRL_GYM_JUDGE_URL"):
        skyrl_gym.make("gsm8k", extras=gsm8k_row())
    with pytest.raises(JudgeError, match="SKYRL_GYM_JUDGE_MODEL"):
        skyrl_gym.make("gsm8k", env_config={"judge": {"base_url": "http://127.0.0.1:9"}}, extras=gsm8k_row())
    with pytest.raises(JudgeError, match="http:// or https://"):
        skyrl_gym.make(
            "gsm8k", env_config={"judge": {"base_url": "127.0.0.1:9", "model": "m"}}, extras=gsm8k_row()
        )


def test_bad_reward_spec_fields_are_named(server):
    config = judge_config(server)
    with pytest.raises(DataError, match="judge_input"):
        skyrl_gym.make("gsm8k", env_config=config, extras=gsm8k_row(judge_input="everything"))
    with pytest.raises(DataError, match="scale"):
        skyrl_gym.make("gsm8k", env_config=config, extras=gsm8k_row(scale=0))
    with pytest.raises(DataError, match="rubric"):
        skyrl_gym.make("gsm8k", env_config=config, extras=gsm8k_row(rubric=["a list"]))


def test_the_endpoint_comes_from_environment_variables(server, monkeypatch):
    monkeypatch.setenv("SKYRL_GYM_JUDGE_URL", server.url)  # a bare server address gets /v1/chat/completions
    monkeypatch.setenv("SKYRL_GYM_JUDGE_MODEL", "rule-judge")
    monkeypatch.setenv("SKYRL_GYM_JUDGE_TIMEOUT", "20")
    endpoint = JudgeEndpoint.from_config(None)
    assert endpoint.chat_url == server.url + "/v1/chat/completions" and endpoint.timeout_s == 20.0
    with skyrl_gym.make("gsm8k", extras=gsm8k_row()) as env:
        env.init([{"role": "user", "content": "48 + 24?"}])
        assert env.step("#### 72")["reward"] == 1.0


# ----- golden episodes -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", GOLDEN["episodes"], ids=lambda case: case["name"][:40])
def test_golden_episodes_against_the_judge_server(server, case):
    row = case["row"]
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make(row["env_class"], env_config=judge_config(server), extras=extras)
    env.init(row["prompt"])
    outputs = [env.step(action) for action in case["actions"]]
    env.close()
    assert outputs[-1]["done"] and [o["done"] for o in outputs[:-1]] == [False] * (len(outputs) - 1)
    assert [o["reward"] for o in outputs] == case.get(
        "rewards", [0.0] * (len(outputs) - 1) + [case["reward"]]
    )
    last = outputs[-1]["metadata"]
    assert last["env_reward"] == pytest.approx(case["env_reward"], abs=1e-6)
    assert last["judge"]["score"] == case["reward"] and "judge_error" not in last
    assert last["judge"].get("label") == case.get("label")
    assert env.get_metrics()["judge_error"] == 0


def test_the_wrapped_env_still_looks_like_itself(server):
    env = skyrl_gym.make("gsm8k_multi_turn", env_config=judge_config(server), extras=gsm8k_row("42"))
    assert env.spec.id == "gsm8k_multi_turn" and type(env.unwrapped).__name__ == "GSM8kMultiTurnEnv"
    env.max_turns = 2  # as the episode driver tells it: the wrapped env counts the turns
    assert env.unwrapped.max_turns == 2 and env.max_turns == 2
    env.init([{"role": "user", "content": "6 * 7?"}])
    assert env.step("#### 40")["done"] is False and env.turns == 1
    assert env.step("#### 40")["done"] is True
    env.close()
    env.close()  # twice is fine


# ----- cache, retries, concurrency -------------------------------------------------------------------------------
def test_identical_requests_are_asked_once(server):
    config = judge_config(server, cache_size=123)
    before = server.stats()["requests"]
    rewards, cached = [], []
    for _ in range(3):
        with skyrl_gym.make("gsm8k", env_config=config, extras=gsm8k_row("1234")) as env:
            env.init([{"role": "user", "content": "cache me"}])
            output = env.step("#### 1234")
            rewards.append(output["reward"])
            cached.append(output["metadata"]["judge"]["cached"])
    assert rewards == [1.0, 1.0, 1.0] and cached == [False, True, True]
    assert server.stats()["requests"] - before == 1


def test_a_503_is_retried_and_the_retry_is_recorded(server):
    with skyrl_gym.make(
        "gsm8k", env_config=judge_config(server, "flaky-judge"), extras=gsm8k_row("55")
    ) as env:
        env.init([{"role": "user", "content": "retry me"}])
        output = env.step("#### 55")
    assert output["reward"] == 1.0 and output["metadata"]["judge"]["attempts"] == 2


def test_many_verdicts_at_once_stay_within_the_concurrency_limit(server):
    client = JudgeClient(JudgeEndpoint(base_url=server.url, model="rule-judge", max_concurrency=4))
    requests_ = [
        JudgeRequest(f"#### {i}", str(i if i % 2 == 0 else i + 1), question=f"batch {i}") for i in range(24)
    ]
    before = server.stats()
    verdicts = client.judge_many(requests_)
    after = server.stats()
    assert client.judge(judge_messages("#### 3", "3", question="own prompt")).score == 1.0  # messages of your own
    client.close()
    assert [v.score for v in verdicts] == [1.0 if i % 2 == 0 else 0.0 for i in range(24)]
    assert after["requests"] - before["requests"] == 24
    assert 1 < after["max_in_flight"] <= 4  # they overlapped, and never more than max_concurrency at once


# ----- failures become errors in metadata, not exceptions --------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "config, expected_error",
    [
        ({"model": "no-such-model"}, "HTTP 404"),
        ({"model": "rambling-judge"}, "could not read a score"),
        # the verdict's own deadline set apart (by default the attempt + 1 s): a loaded machine's late start cannot
        # cut the attempt short ("before the deadline"), which is the other message
        ({"model": "slow-judge", "timeout_s": 0.5, "attempts": 1, "deadline_s": 30},
         "no complete answer from .* within 0.5 s"),
        (
            {"base_url": "dead", "attempts": 2},
            "did not answer: cannot connect to http.*gave up after 2 attempts",
        ),
    ],
    ids=["unknown model", "unreadable answer", "timeout", "nothing listening"],
)
def test_a_failing_judge_gives_reward_0_and_says_why(server, config, expected_error):
    settings = judge_config(server)["judge"]
    settings.update(config)
    if settings["base_url"] == "dead":
        settings["base_url"] = f"http://127.0.0.1:{_free_port()}/v1"
    with skyrl_gym.make("gsm8k", env_config={"judge": settings}, extras=gsm8k_row("7")) as env:
        env.init([{"role": "user", "content": f"fail {expected_error}"}])
        output = env.step("#### 7")
        metrics = env.get_metrics()
    assert output["reward"] == 0.0 and output["done"] is True
    assert output["metadata"]["env_reward"] == 1.0  # the env's own rule is kept for the record
    import re

    assert re.search(expected_error, output["metadata"]["judge_error"]), output["metadata"]["judge_error"]
    assert metrics["judge_error"] == 1
    attempts = {"HTTP 404": 1, "could not read a score": 1, "no complete answer from .* within 0.5 s": 1}
    assert output["metadata"]["judge"]["attempts"] == attempts.get(expected_error, 2)  # 404s are not retried
    # an unreadable answer is the judge's answer (asked again, it says the same): cached; a failed call is not
    with skyrl_gym.make("gsm8k", env_config={"judge": settings}, extras=gsm8k_row("7")) as env:
        env.init([{"role": "user", "content": f"fail {expected_error}"}])
        again = env.step("#### 7")
    assert again["metadata"]["judge"]["cached"] is (expected_error == "could not read a score")
    assert again["metadata"]["judge_error"] == output["metadata"]["judge_error"]


def test_a_batch_with_failing_judge_calls_is_scored_to_the_end_and_the_failures_are_counted(server):
    """The ``score`` command's batch: rows whose judge fails score 0 with the error; the others are judged."""
    from skyrl_gym.cli.score_cmd import score_rows

    good, bad = judge_config(server), judge_config(server, "rambling-judge")
    rows = [
        {"env_class": "gsm8k", "prompt": [{"role": "user", "content": f"q{i}"}], **gsm8k_row(str(i))}
        for i in range(6)
    ]
    results = [
        score_rows([row], [f"#### {i}"], env_config=good if i % 3 else bad, progress=False)[0]
        for i, row in enumerate(rows)
    ]
    assert [r["reward"] for r in results] == [0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    errors = [r["metadata"].get("judge_error") for r in results]
    assert sum(e is not None for e in errors) == 2 and all("could not read" in e for e in errors if e)


def test_the_episode_driver_awaits_the_judge_without_blocking_its_loop(server):
    config = judge_config(server)

    async def many() -> list:
        episodes = [
            run_episode(
                make_env_factory("gsm8k", config, gsm8k_row(str(100 + i))),
                [{"role": "user", "content": f"driver {i}"}],
                ScriptedPolicy(f"#### {100 + i}"),
                env_class="gsm8k",
            )
            for i in range(8)
        ]
        return await asyncio.gather(*episodes)

    episodes = asyncio.run(many())
    assert [e.steps[-1].reward for e in episodes] == [1.0] * 8
    assert all(e.error is None and e.env_metrics["judge_error"] == 0 for e in episodes)


def test_a_bearer_token_is_sent_and_a_wrong_one_is_reported():
    guarded = JudgeServer(token=TOKEN)
    try:
        config = {"judge": {"base_url": guarded.url + "/v1", "model": "rule-judge", "api_key": TOKEN}}
        assert judge_response("#### 9", "9", env_config=config).score == 1.0
        config["judge"]["api_key"] = "wrong"
        verdict = judge_response("#### 9", "9", env_config=config)
        assert verdict.score is None and "HTTP 401 (check api_key" in verdict.error
    finally:
        guarded.stop()


def test_judge_metrics_are_aggregated_beside_the_envs_own(server):
    env = skyrl_gym.make("gsm8k_multi_turn", env_config=judge_config(server), extras=gsm8k_row("42"))
    per_episode = [
        {"steps": 1, "judge_error": 0, "judge_score": 1.0, "judge_cached": 1},
        {"steps": 3, "judge_error": 1, "judge_cached": 0},
    ]
    assert env.aggregate_metrics(per_episode) == {
        "avg_steps": 2.0,
        "judge_errors": 1,
        "judge_error_rate": 0.5,
        "judge_score": 1.0,
        "judge_cache_hit_rate": 0.5,
    }
    env.close()


def test_a_trainers_per_env_aggregate_keeps_the_judge_metrics():
    from skyrl_gym.metrics import aggregate_for_environment

    per_episode = [
        {"steps": 2, "judge_error": 0, "judge_score": 0.5, "judge_cached": 0},
        {"steps": 4, "judge_error": 1, "judge_cached": 0},
    ]
    assert aggregate_for_environment("gsm8k_multi_turn", per_episode) == {
        "avg_steps": 3.0,
        "judge_errors": 1,
        "judge_error_rate": 0.5,
        "judge_score": 0.5,
        "judge_cache_hit_rate": 0.0,
    }
