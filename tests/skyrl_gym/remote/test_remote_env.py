"""Envs as a service: ``skyrl-gym serve-env`` in a real process, and ``skyrl_gym.make("remote", ...)`` driving it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import pytest
import requests

pytest.importorskip(
    "fastapi", reason="serve-env needs fastapi and uvicorn: pip install 'skyrl-gym[env-service]'"
)
pytest.importorskip(
    "uvicorn", reason="serve-env needs fastapi and uvicorn: pip install 'skyrl-gym[env-service]'"
)

import skyrl_gym  # noqa: E402
from skyrl_gym.episode import ScriptedPolicy, run_episode  # noqa: E402
from skyrl_gym.errors import DataError  # noqa: E402
from skyrl_gym.remote.client import RemoteEnv, RemoteEnvError  # noqa: E402
from tests.skyrl_gym.remote.service_support import COUNTER_ID, REPO_ROOT, env_service  # noqa: E402

TOKEN = "test-token-" + uuid.uuid4().hex[:8]
GSM8K_ROW = {"reward_spec": {"method": "rule", "ground_truth": "72"}}
PROMPT = [{"role": "user", "content": "48 clips in April, half as many in May: how many in all?"}]


@pytest.fixture(scope="module")
def service():
    with env_service(token=TOKEN) as running:
        yield running


def remote(service, env_id: str = "gsm8k", extras=None, **options):
    return skyrl_gym.make("remote", url=service.url, env_id=env_id, extras=extras, token=TOKEN, **options)


def test_a_remote_env_gives_what_the_local_env_gives(service):
    for action in ["#### 72", "#### 71", "", "The answer is 72", "x" * 20_000 + "#### 72"]:
        with skyrl_gym.make("gsm8k", extras=GSM8K_ROW) as local, remote(service, extras=GSM8K_ROW) as far:
            assert far.init(PROMPT) == local.init(PROMPT)
            assert far.step(action) == local.step(action)
            assert far.get_metrics() == local.get_metrics()
    assert skyrl_gym.spec("remote").entry_point == "skyrl_gym.remote.client:RemoteEnv"
    assert "remote" not in skyrl_gym.registry  # a spelling of make(), not a catalogue entry


def test_multi_turn_observations_turns_and_the_drivers_turn_limit_reach_the_server(service):
    env = remote(service, "gsm8k_multi_turn", extras={**GSM8K_ROW, "max_turns": 5})
    assert env.max_turns == 5 and not env.max_turns_is_default
    env.init(PROMPT)
    env.max_turns = 2  # what the episode driver does: the server's env must end the episode at turn 2
    first = env.step("I think 70")
    assert first["done"] is False and first["observations"][0]["role"] == "user" and env.turns == 1
    second = env.step("#### 70")
    assert second["done"] is True and env.turns == 2
    assert env.get_metrics() == {"steps": 2}
    env.close()


def test_a_retried_step_is_applied_once(service):
    """The same request id twice (a client that retried after losing the answer) gets the first answer."""
    env = remote(service, COUNTER_ID, extras={"max_turns": 5})
    env.init([])
    url, headers = f"{service.url}/sessions/{env.session_id}/step", {"Authorization": f"Bearer {TOKEN}"}
    body = {"action": "good", "request_id": "step-1"}
    first = requests.post(url, json=body, headers=headers, timeout=30).json()
    again = requests.post(url, json=body, headers=headers, timeout=30).json()
    assert first == again and first["output"]["metadata"]["applied_steps"] == 1
    assert env.step("good")["metadata"]["applied_steps"] == 2  # a new request id is a new step
    env.close()


def test_a_step_slower_than_the_client_timeout_is_waited_for_not_applied_again(service):
    env = remote(service, COUNTER_ID, extras={"max_turns": 5}, timeout_s=0.3, attempts=10, retry_delay_s=0.05)
    env.init([])
    output = env.step("sleep:1.2")  # times out 2-4 times; each retry carries the same request id
    assert output["metadata"]["applied_steps"] == 1 and env.turns == 1
    assert env.step("good")["metadata"]["applied_steps"] == 2
    env.close()


def test_async_steps_on_one_loop(service):
    async def episode(i: int) -> list:
        env = remote(service, COUNTER_ID, extras={"max_turns": 3})
        env.init([{"role": "user", "content": f"episode {i}"}])
        rewards = [(await env.astep(action))["reward"] for action in ("good", "bad", "good")]
        env.close()
        return rewards

    async def main() -> list:
        try:
            return await asyncio.gather(*(episode(i) for i in range(16)))
        finally:
            await RemoteEnv.close_async_sessions()

    assert asyncio.run(main()) == [[1.0, 0.0, 1.0]] * 16


def test_the_episode_driver_plays_a_remote_env_and_an_env_error_becomes_an_episode_error(service):
    async def play(actions):
        return await run_episode(
            lambda: remote(service, COUNTER_ID, extras={"max_turns": 3}),
            [],
            ScriptedPolicy(actions),
            env_class="remote",
        )

    ok = asyncio.run(play(["good", "good", "bad"]))
    assert (
        ok.error is None
        and [s.reward for s in ok.steps] == [1.0, 1.0, 0.0]
        and ok.env_metrics == {"applied_steps": 3}
    )
    failed = asyncio.run(play(["good", "raise"]))
    assert failed.error_method == "step" and "ValueError: asked to raise" in failed.error
    assert service.wait_for(lambda h: h["sessions"] == 0)["sessions"] == 0  # the driver closed both sessions


def test_bad_input_gets_a_clear_error(service):
    with pytest.raises(RemoteEnvError, match="no env registered with id 'gsm8kk'.*Did you mean: 'gsm8k'"):
        remote(service, "gsm8kk", extras=GSM8K_ROW)
    with pytest.raises(DataError, match="reward_spec field is required"):  # the row is at fault, as locally
        remote(service, "gsm8k", extras={})
    with pytest.raises(RemoteEnvError, match="needs the service's url"):
        RemoteEnv(env_id="gsm8k")
    # env_config is the remote's spec only without url= and env_id=: a half of each said only "needs the url"
    with pytest.raises(RemoteEnvError, match=r"env_config\['url'\] was not read: .* env_id= was, .* pass url="):
        RemoteEnv(env_id="gsm8k", env_config={"url": service.url})
    with pytest.raises(RemoteEnvError, match=r"env_config\['env_id'\] was not read: .* url= was"):
        RemoteEnv(url=service.url, env_config={"env_id": "gsm8k"})
    with pytest.raises(RemoteEnvError, match="url must start with http:// or https://, got '127.0.0.1:8010'"):
        RemoteEnv(url="127.0.0.1:8010", env_id="gsm8k")  # was requests' InvalidSchema at the first call
    headers = {"Authorization": f"Bearer {TOKEN}"}
    not_json = requests.post(service.url + "/sessions", data=b"{nope", headers=headers, timeout=10)
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["error"]
    no_id = requests.post(service.url + "/sessions", json={"extras": {}}, headers=headers, timeout=10)
    assert no_id.status_code == 422 and "env_id is required" in no_id.json()["error"]
    env = remote(service, extras=GSM8K_ROW)
    no_action = requests.post(
        f"{service.url}/sessions/{env.session_id}/step", json={}, headers=headers, timeout=10
    )
    assert no_action.status_code == 422 and "action is required" in no_action.json()["error"]
    env.close()
    with pytest.raises(RemoteEnvError, match="session was closed"):
        env.step("#### 72")
    gone = requests.post(
        f"{service.url}/sessions/{env.session_id}/step", json={"action": "x"}, headers=headers, timeout=10
    )
    assert gone.status_code == 404 and "closed, expired" in gone.json()["error"]


def test_a_missing_or_wrong_token_is_refused(service):
    with pytest.raises(RemoteEnvError, match="HTTP 401.*bearer token.*this client sends the token given as token="):
        skyrl_gym.make("remote", url=service.url, env_id="gsm8k", extras=GSM8K_ROW, token="wrong")
    assert requests.get(service.url + "/health", timeout=10).status_code == 401


def test_close_ends_the_session_and_sessions_left_open_are_closed_at_exit(service):
    before = service.health()["sessions"]
    env = remote(service, extras=GSM8K_ROW)
    assert service.health()["sessions"] == before + 1
    env.close()
    env.close()  # twice is fine
    assert service.health()["sessions"] == before
    script = (
        f"import skyrl_gym; env = skyrl_gym.make('remote', url={service.url!r}, env_id='gsm8k', "
        f"extras={GSM8K_ROW!r}, token={TOKEN!r}); env.init([]); print(env.session_id)"
    )
    leaked = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert leaked.returncode == 0, leaked.stderr
    assert service.health()["sessions"] == before  # the exiting process closed it


def test_limits_on_sessions_body_size_and_idle_time():
    with env_service("--max-sessions", "2", "--max-body-bytes", "4096", "--idle-timeout", "0.5") as small:
        first = skyrl_gym.make("remote", url=small.url, env_id=COUNTER_ID, extras={}, attempts=1)
        second = skyrl_gym.make("remote", url=small.url, env_id=COUNTER_ID, extras={}, attempts=1)
        with pytest.raises(RemoteEnvError, match="HTTP 429.*limit \\(--max-sessions 2\\)") as full:
            skyrl_gym.make("remote", url=small.url, env_id=COUNTER_ID, extras={}, attempts=1)
        assert full.value.status == 429  # the last try's status, once the tries are spent (was None)
        with pytest.raises(RemoteEnvError, match="HTTP 413.*over 4096 bytes"):
            first.step("x" * 10_000)
        # both sessions stay unused: the sweeper closes them once they are idle for 0.5 s
        assert small.wait_for(lambda h: h["sessions"] == 0)["sessions_expired"] == 2
        with pytest.raises(RemoteEnvError, match="HTTP 404.*expired after 0.5 s idle"):
            second.step("good")
        first.close(), second.close()  # already gone on the server: fine
        third = skyrl_gym.make(
            "remote", url=small.url, env_id=COUNTER_ID, extras={}, attempts=1
        )  # room again
        third.close()
        orphan = skyrl_gym.make("remote", url=small.url, env_id=COUNTER_ID, extras={}, attempts=1)
    orphan.close()  # the server is gone: close does not raise, and says why
    assert "cannot connect" in orphan.close_error
    with pytest.raises(RemoteEnvError, match=r"cannot connect.*\(is `skyrl-gym serve-env` running at http") as gone:
        skyrl_gym.make("remote", url=small.url, env_id=COUNTER_ID, extras={}, attempts=1)
    assert gone.value.status is None


def test_serving_beyond_loopback_needs_a_token():
    result = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "serve-env", "--host", "0.0.0.0", "--port", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in __import__("os").environ.items() if k != "SKYRL_GYM_ENV_SERVICE_TOKEN"},
    )
    assert result.returncode == 2 and "without a bearer token" in result.stderr


def test_the_remote_can_be_described_by_env_config_as_a_trainer_section_would(service):
    config = {"url": service.url, "env_id": "gsm8k", "token": TOKEN, "env_config": {}}
    with skyrl_gym.make("remote", env_config=config, extras=GSM8K_ROW) as env:
        env.init(PROMPT)
        assert env.step("#### 72")["reward"] == 1.0 and env.env_id == "gsm8k"


def test_the_served_envs_env_config_is_not_warned_of_as_unread(service):
    """With url= and env_id= given, env_config is the served env's own (its server checks it): make() warned that
    its keys were "ignored" while the server applied them (a new operator's cold run)."""
    import warnings

    from skyrl_gym import registration

    registration._CHECKED_CONFIGS.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with remote(service, "multiply", extras={"reward_spec": {"ground_truth": "6"}, "max_turns": 1},
                    env_config={"boxed_wrong_reward": 0.5}) as env:
            env.init([{"role": "user", "content": "2 * 3?"}])
            assert env.step("\\boxed{7}")["reward"] == 0.5  # applied by the server's env
    assert not [w for w in caught if "env_config key" in str(w.message)], [str(w.message) for w in caught]


def test_the_listening_line_says_how_clients_authenticate_and_what_is_served(service):
    assert service.listening_line.endswith("(bearer token required; serving every registered env)")
    with env_service("--envs", "gsm8k,math") as named:
        assert named.listening_line.endswith("(no token; serving gsm8k, math)"), named.listening_line


def test_serve_env_refuses_ids_that_are_not_registered():
    result = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "serve-env", "--envs", "gsm8k,nosuch,gsm8"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "no env registered with id 'nosuch'." in result.stderr, result.stderr
    assert "no env registered with id 'gsm8'. Did you mean: 'gsm8k'?" in result.stderr  # as every command says it


def test_values_json_has_no_type_for_arrive_as_their_nearest_json(service):
    import math

    with remote(service, COUNTER_ID, extras={"max_turns": 2, "note": float("nan")}) as env:
        env.init([])
        metadata = env.step("odd values")["metadata"]
    assert metadata["tags"] == ["only"] and metadata["pair"] == [1, 2] and metadata["raw"] == "bytes"
    assert math.isnan(metadata["ratio"])


def test_the_environments_token_goes_only_to_the_service_it_names(service, monkeypatch):
    import http.server
    import threading

    seen = []

    class Collector(http.server.BaseHTTPRequestHandler):  # a service a config or a row might point at
        def do_POST(self):
            seen.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    monkeypatch.setenv("SKYRL_GYM_ENV_SERVICE_TOKEN", TOKEN)
    monkeypatch.setenv("SKYRL_GYM_ENV_SERVICE_URL", service.url)
    try:
        with skyrl_gym.make("remote", env_id="gsm8k", extras=GSM8K_ROW) as env:  # the named service: a token
            env.init(PROMPT)
        elsewhere = f"http://127.0.0.1:{collector.server_address[1]}"
        with pytest.raises(RemoteEnvError, match="SKYRL_GYM_ENV_SERVICE_URL"):
            skyrl_gym.make("remote", url=elsewhere, env_id="gsm8k", extras=GSM8K_ROW)
        assert seen and not any(seen), seen
    finally:
        collector.shutdown()
        collector.server_close()


def test_a_hostile_service_cannot_fill_the_clients_memory_or_break_it_with_odd_answers():
    """A service that answered a step with 3 GB took the trainer's process to 9.2 GB before it failed; an answer
    that is not an object (or has no output) was an AttributeError or a KeyError. Now the client reads at most
    ``max_reply_bytes`` of an answer, on the sync and the async path, and names what the server got wrong."""
    import http.server
    import json
    import threading

    answers = {}

    class Hostile(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/sessions":
                body = json.dumps({"session_id": "s", "env_id": "gsm8k", "max_turns": 1}).encode()
            else:
                body = answers["step"]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if not answers.get("chunked"):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: what it should do
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        env = RemoteEnv(url=url, env_id="gsm8k", attempts=1, max_reply_bytes=1024 * 1024)
        for chunked in (False, True):  # a declared length over the cap, and a body that streams past it
            answers.update(step=b'{"output": "' + b"x" * (4 * 1024 * 1024) + b'"}', chunked=chunked)
            with pytest.raises(RemoteEnvError, match="answered more than 1048576 bytes"):
                env.step("#### 72")
            with pytest.raises(RemoteEnvError, match="answered more than 1048576 bytes"):
                asyncio.run(env.astep("#### 72"))
        answers["chunked"] = False
        for odd, what in ((b"[1, 2]", "a JSON list, not an object"), (b'{"turns": 1}', "an object without output")):
            answers["step"] = odd
            with pytest.raises(RemoteEnvError, match=what):
                env.step("#### 72")
            with pytest.raises(RemoteEnvError, match=what):
                asyncio.run(env.astep("#### 72"))
    finally:
        server.shutdown()
        server.server_close()
