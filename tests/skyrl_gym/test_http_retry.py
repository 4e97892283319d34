"""``skyrl_gym.http_retry``: deadlines that hold against a server that trickles bytes, bounded bodies, and the
caller's session settings kept. The server is the judge tests' ``judge_server.py``, a real process on 127.0.0.1."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
import requests
from requests.adapters import HTTPAdapter

from skyrl_gym.http_retry import ReplyTooLarge, RetriesExhausted, request_with_retries, watch_deadlines
from skyrl_gym.tools.search import RetryPolicy
from tests.skyrl_gym.rewards.judge_support import JudgeServer

FAST_RETRY = RetryPolicy(attempts=2, initial_delay_s=0.01)


@pytest.fixture(scope="module")
def server() -> Iterator[JudgeServer]:
    judge = JudgeServer()
    yield judge
    judge.stop()


def ask(server: JudgeServer, model: str, **options):
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    return request_with_retries(
        requests.Session(), "POST", server.url + "/v1/chat/completions", FAST_RETRY, json=body, **options
    )


@pytest.mark.timeout(90)  # without the attempt's deadline each attempt reads the whole trickle (about 30 s)
def test_a_connect_and_read_timeout_bound_the_whole_attempt(server):
    with pytest.raises(RetriesExhausted, match=r"no complete answer from .* within 2 s; gave up after 2 attempts"):
        ask(server, "trickle-judge", timeout=(1, 1))  # the remote env's form: (connect, read) seconds


@pytest.mark.timeout(90)
def test_the_overall_deadline_leaves_no_time_for_more_attempts(server):
    many = RetryPolicy(attempts=50, initial_delay_s=0.01)
    body = {"model": "trickle-judge", "messages": []}
    with pytest.raises(RetriesExhausted) as exhausted:
        request_with_retries(
            requests.Session(),
            "POST",
            server.url + "/v1/chat/completions",
            many,
            1.0,
            json=body,
            deadline=time.monotonic() + 1.5,
        )
    assert 1 <= exhausted.value.attempts < 50 and "the deadline" in str(exhausted.value)


def test_an_answer_is_read_whole_within_the_attempt_and_a_long_one_is_refused(server):
    response, attempts = ask(server, "rule-judge", timeout=10)
    assert attempts == 1 and response.json()["choices"][0]["finish_reason"] == "stop"
    with pytest.raises(ReplyTooLarge, match="more than 50000 bytes"):
        ask(server, "huge-judge", timeout=10, max_body_bytes=50_000)


def test_watching_deadlines_keeps_the_callers_pool_settings():
    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=256, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    watch_deadlines(session)
    watched = session.adapters["http://"]
    assert watched is not adapter and (watched._pool_connections, watched._pool_maxsize) == (4, 256)
    assert watch_deadlines(session).adapters["http://"] is watched  # once is enough
