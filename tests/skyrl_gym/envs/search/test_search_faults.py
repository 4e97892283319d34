"""The retrieval service misbehaves: the env retries, then reports in an observation; batches go on."""

from __future__ import annotations

import asyncio
import time

import pytest

import skyrl_gym
from skyrl_gym.tools.search import SearchToolGroup
from tests.tool_env_support import (
    MisbehavingServer,
    RetrieverProcess,
    first_observation,
    search_config,
    unused_port_url,
    write_corpus,
)

EXTRAS = {"reward_spec": {"method": "rule", "ground_truth": {"target": "Paris"}}, "max_turns": 3}


@pytest.fixture
def flaky():
    servers = []

    def start(**kwargs):
        servers.append(MisbehavingServer(**kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_500s_are_retried_until_the_service_answers(flaky):
    server = flaky(fail_first=2)
    env = skyrl_gym.make("search", env_config=search_config(server.url, retry_attempts=3), extras=EXTRAS)
    out = env.step("<search>capital of France</search>")
    assert "Result for capital of France" in first_observation(out)
    assert server.requests == 3


def test_persistent_500s_become_an_error_observation_and_the_episode_goes_on(flaky):
    server = flaky(always_fail=True)
    env = skyrl_gym.make("search", env_config=search_config(server.url, retry_attempts=3), extras=EXTRAS)
    out = env.step("<search>capital of France</search>")
    observation = first_observation(out)
    assert "Search error: Server Error (500) on attempt 3/3; gave up after 3 attempts" in observation
    assert out["metadata"]["search_status"] == "api_error" and not out["done"]
    assert server.requests == 3
    assert env.step("<answer>Paris</answer>")["reward"] == 1.0
    assert env.get_metrics()["search_errors"] == 1


def test_hanging_service_times_out_on_every_attempt(flaky):
    """Two 0.3 s attempts against a 60 s hang; the bound of 20 s leaves a loaded machine room (a 3 s hang against
    a bound of 2.5 s did not)."""
    server = flaky(hang_s=60.0)
    env = skyrl_gym.make("search", env_config=search_config(server.url, timeout=0.3, retry_attempts=2), extras=EXTRAS)
    start = time.monotonic()
    observation = first_observation(env.step("<search>anything</search>"))
    assert time.monotonic() - start < 20
    assert "Timeout Error: no answer within 0.3 s on attempt 2/2" in observation


def test_server_killed_mid_episode(tmp_path):
    server = RetrieverProcess(write_corpus(tmp_path / "corpus.jsonl"))
    try:
        env = skyrl_gym.make("search", env_config=search_config(server.url), extras=EXTRAS)
        assert "Paris is the capital" in first_observation(env.step("<search>capital of France</search>"))
        server.kill()
        observation = first_observation(env.step("<search>capital of France again</search>"))
        assert "Search error: Connection Error on attempt 3/3" in observation
        assert env.step("<answer>Paris</answer>")["reward"] == 1.0
    finally:
        server.stop()


def test_a_batch_of_async_episodes_finishes_while_the_service_is_down_or_flaky(flaky):
    """Twenty episodes against a service that is down, twenty against one that fails each query's first request.
    Which request fails is the query's, not the arrival order's: with "the first 10 requests fail", a loaded machine
    once let one episode's three quick attempts all land among the first 10 and the test failed, not the code.
    The timeout of 30 s leaves a loaded machine room; nothing here should take more than a second."""
    flaky_server = flaky(fail_each_query_once=True)
    down_url = unused_port_url()

    async def episode(i):
        url = down_url if i % 2 else flaky_server.url
        env = skyrl_gym.make("search", env_config=search_config(url, timeout=30.0, retry_attempts=3), extras=EXTRAS)
        observation = first_observation(await env.astep(f"<search>capital of France {i}</search>"))
        final = await env.astep("<answer>Paris</answer>")
        return observation, final["reward"]

    async def main():
        results = await asyncio.gather(*(episode(i) for i in range(40)))
        await SearchToolGroup.close_async_sessions()
        return results

    results = asyncio.run(main())
    assert [reward for _, reward in results] == [1.0] * 40
    down = [obs for i, (obs, _) in enumerate(results) if i % 2]
    served = {i: obs for i, (obs, _) in enumerate(results) if not i % 2}
    assert all("Connection Error" in obs for obs in down)
    for i, obs in served.items():  # each query's one failure was retried, and each episode got its own answer
        assert f"Result for capital of France {i}" in obs, (i, obs)
    assert flaky_server.requests == 40  # 20 queries, each failed once and answered once


def test_hanging_service_times_out_on_the_async_path_too(flaky):
    server = flaky(hang_s=60.0)  # and a bound of 20 s, as above

    async def main():
        env = skyrl_gym.make("search", env_config=search_config(server.url, timeout=0.3, retry_attempts=2), extras=EXTRAS)
        start = time.monotonic()
        observation = first_observation(await env.astep("<search>anything</search>"))
        elapsed = time.monotonic() - start
        await SearchToolGroup.close_async_sessions()
        return observation, elapsed

    observation, elapsed = asyncio.run(main())
    assert elapsed < 20
    assert "Timeout Error: no answer within 0.3 s on attempt 2/2" in observation
