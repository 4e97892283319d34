"""serve-env as an attacker meets it: a real ``skyrl-gym serve-env`` on 127.0.0.1 whose clients try to take
the operator's powers (sandbox isolation, the judge's key, data folders, limits), send bodies built to exhaust
it, or stall other clients with a slow step."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

pytest.importorskip(
    "fastapi", reason="serve-env needs fastapi and uvicorn: pip install 'skyrl-gym[env-service]'"
)
pytest.importorskip(
    "uvicorn", reason="serve-env needs fastapi and uvicorn: pip install 'skyrl-gym[env-service]'"
)

import skyrl_gym  # noqa: E402
from skyrl_gym.remote import policy  # noqa: E402
from tests.sandboxes.remote_support import (  # noqa: E402
    assert_slow_clients_cut_off,
    peak_rss_mib,
    post_chunked,
)
from tests.skyrl_gym.remote.service_support import COUNTER_ID, REPO_ROOT, CounterEnv, env_service  # noqa: E402
from tests.skyrl_gym.rewards.test_judge import JudgeServer  # noqa: E402
from tests.tool_env_support import build_sample_databases  # noqa: E402

GSM8K_ROW = {"reward_spec": {"method": "rule", "ground_truth": "72"}}
JUDGE_KEY = "operator-judge-key-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def judge():
    server = JudgeServer(token=JUDGE_KEY)  # the operator's judge: it answers only requests that carry its key
    yield server
    server.stop()


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("operator-data")
    rows = build_sample_databases(folder)
    return folder, rows


@pytest.fixture(scope="module")
def service(judge, data_folder, tmp_path_factory):
    """A server whose operator set the judge (its key in the server's environment), a data folder for
    text2sql, and raised one ceiling (code_interpreter's timeout to 20 s)."""
    config = {
        "*": {"judge": {"base_url": judge.url, "model": "rule-judge", "attempts": 1}},
        "text2sql": {"db_path": str(data_folder[0])},
        "code_interpreter": {"timeout": 20},
        "swe": {"images": ["skyrl-gym-swe-"]},
    }
    path = tmp_path_factory.mktemp("operator") / "server.json"
    path.write_text(json.dumps(config))
    with env_service("--env-config", str(path), env={"SKYRL_GYM_JUDGE_API_KEY": JUDGE_KEY}) as running:
        yield running


def create(service, env_id, env_config=None, extras=None):
    body = {"env_id": env_id, "env_config": env_config, "extras": extras}
    return requests.post(service.url + "/sessions", json=body, timeout=60)


def refused_naming(response, *words):
    assert response.status_code == 422, (response.status_code, response.text)
    message = response.json()["error"]
    assert all(word in message for word in words), message
    return message


# ----- 1. operator settings and client settings -------------------------------------------------------------
@pytest.mark.parametrize(
    "env_id,env_config,key",
    [
        ("code_interpreter", {"sandbox": {"backend": "local", "isolation": "none"}}, "env_config.sandbox"),
        ("humaneval", {"sandbox": {"backend": "remote", "url": "http://127.0.0.1:9"}}, "env_config.sandbox"),
        ("gsm8k", {"judge": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}, "env_config.judge"),
        ("text2sql", {"db_path": "/"}, "env_config.db_path"),
        ("search", {"search_url": "http://127.0.0.1:9/retrieve"}, "env_config.search_url"),
        ("swe", {"docker_host": "tcp://127.0.0.1:9"}, "env_config.docker_host"),
        ("search", {"log_requests": True}, "env_config.log_requests"),
    ],
)
def test_a_client_cannot_set_what_touches_the_host(service, env_id, env_config, key):
    extras = {"reward_spec": {"method": "rule", "ground_truth": "1"}}
    refused_naming(create(service, env_id, env_config, extras), key, "operator")


@pytest.mark.parametrize(
    "env_id,env_config,key",
    [
        (
            "code_interpreter",
            {"timeout": 21},
            "env_config.timeout",
        ),  # the operator raised it to 20, no further
        ("code_interpreter", {"verify_timeout": 1e9}, "env_config.verify_timeout"),
        ("lcb", {"memory_mb": 1_000_000}, "env_config.memory_mb"),
        ("text2sql", {"sql_timeout_s": 3600}, "env_config.sql_timeout_s"),
        ("search", {"retry_attempts": 1000}, "env_config.retry_attempts"),
        ("code_interpreter", {"timeout": float("nan")}, "env_config.timeout"),
        ("code_interpreter", {"timeout": -1}, "env_config.timeout"),
        ("code_interpreter", {"stateful": "yes"}, "env_config.stateful"),
    ],
)
def test_limits_and_timeouts_are_ceilings_a_client_cannot_raise(service, env_id, env_config, key):
    extras = {"reward_spec": {"method": "rule", "ground_truth": "1"}}
    raw = json.dumps({"env_id": env_id, "env_config": env_config, "extras": extras}, allow_nan=True)
    response = requests.post(service.url + "/sessions", data=raw, timeout=60)
    refused_naming(response, key)


def test_unknown_keys_are_refused_with_what_a_client_may_set(service):
    message = refused_naming(
        create(service, "gsm8k", {"python_path": "/tmp"}, GSM8K_ROW), "env_config.python_path"
    )
    assert "none" in message  # gsm8k has no client keys
    message = refused_naming(
        create(service, "code_interpreter", {"sandbox_config": {}}, {"reward_spec": {"ground_truth": "1"}}),
        "env_config.sandbox_config",
    )
    assert "timeout" in message and "max_turns" in message


def test_a_client_may_choose_within_the_bounds(service):
    extras = {"reward_spec": {"method": "rule", "ground_truth": "2"}}
    within = create(service, "code_interpreter", {"timeout": 15, "stateful": False, "max_turns": 2}, extras)
    assert within.status_code == 200, within.text
    assert within.json()["max_turns"] == 2


@pytest.mark.skipif(
    not shutil.which("bwrap"),
    reason="the code env's default sandbox needs bubblewrap: apt-get install bubblewrap",
)
def test_client_code_runs_in_the_operators_sandbox_not_on_the_host(service):
    marker = Path("/tmp") / f"client-wrote-{uuid.uuid4().hex}"
    extras = {"reward_spec": {"method": "rule", "ground_truth": "2"}, "max_turns": 3}
    session = create(service, "code_interpreter", None, extras).json()["session_id"]
    requests.post(
        f"{service.url}/sessions/{session}/init",
        json={"prompt": [{"role": "user", "content": "go"}]},
        timeout=30,
    )
    code = (
        f"import os\nopen({str(marker)!r}, 'w').write('x')\n"
        f"print(os.getuid(), os.path.exists({str(REPO_ROOT)!r}))"
    )
    step = requests.post(
        f"{service.url}/sessions/{session}/step",
        json={"action": f"<tool><python>{code}</python></tool>"},
        timeout=60,
    ).json()
    shown = step["output"]["observations"][0]["content"]
    assert "True" not in shown and not marker.exists(), (
        shown
    )  # no checkout inside, nothing written on the host


def test_a_server_refuses_to_start_with_isolation_off_unless_told(tmp_path):
    path = tmp_path / "server.json"
    path.write_text(json.dumps({"code_interpreter": {"sandbox": {"backend": "local", "isolation": "none"}}}))
    command = [sys.executable, "-m", "skyrl_gym.cli", "serve-env", "--port", "0", "--env-config", str(path)]
    refused = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--allow-no-isolation" in refused.stderr, refused.stderr


# A 400-digit integer is valid JSON that no float holds (math.isfinite raised OverflowError: a 500).
HUGE = "1" + "0" * 400


@pytest.mark.parametrize(
    "body,key",
    [
        ('{"env_id": "code_interpreter", "env_config": {"timeout": %s}}' % HUGE, "env_config.timeout"),
        ('{"env_id": "code_interpreter", "env_config": {"max_turns": -%s}}' % HUGE, "env_config.max_turns"),
        ('{"env_id": "reasoning_gym/leg_counting", "env_config": {"seed": %s}}' % HUGE, "env_config.seed"),
        # a row's max_turns is a client's setting too: within the bounds of env_config's (it was unbounded)
        ('{"env_id": "code_interpreter", "extras": {"max_turns": %s}}' % HUGE, "extras.max_turns"),
        ('{"env_id": "code_interpreter", "extras": {"max_turns": 1e400}}', "extras.max_turns"),
        ('{"env_id": "search", "extras": {"max_turns": 1000000000}}', "extras.max_turns"),
        (
            '{"env_id": "multiply", "extras": {"extra_info": {"max_turns": 1e9}}}',
            "extras.extra_info.max_turns",
        ),
        ('{"env_id": "code_interpreter", "extras": {"max_turns": [5]}}', "extras.max_turns"),
    ],
)
def test_numbers_no_float_holds_and_unbounded_row_settings_are_a_422_naming_the_key(service, body, key):
    refused_naming(requests.post(service.url + "/sessions", data=body, timeout=60), key)
    assert service.health()["status"] == "ok"


def test_a_rows_number_no_int_holds_is_a_422_not_a_500(service):
    pytest.importorskip(
        "reasoning_gym", reason="the row is a reasoning_gym one: pip install 'skyrl-gym[reasoning-gym]'"
    )
    spec = '{"method": "rule", "ground_truth": "1", "dataset": "leg_counting", "seed": 1e400, "index": 0}'
    body = '{"env_id": "reasoning_gym/leg_counting", "extras": {"reward_spec": %s}}' % spec
    refused_naming(requests.post(service.url + "/sessions", data=body, timeout=60), "OverflowError")


@pytest.mark.parametrize("max_turns", ["0", "-5", "1001", HUGE, "1e400", "2.5", "true", '"3"'])
def test_a_steps_max_turns_is_held_to_the_same_bounds(service, max_turns):
    session = create(service, COUNTER_ID, None, {"max_turns": 3}).json()["session_id"]
    response = requests.post(
        f"{service.url}/sessions/{session}/step",
        data='{"action": "a", "max_turns": %s}' % max_turns,
        timeout=30,
    )
    refused_naming(response, "max_turns")
    step = f"{service.url}/sessions/{session}/step"
    ok = requests.post(step, json={"action": "a", "max_turns": 2}, timeout=30)
    assert ok.status_code == 200 and ok.json()["turns"] == 1, ok.text


# ----- 2. secrets never follow a client-chosen URL ----------------------------------------------------------
def test_the_judge_key_never_reaches_a_client_chosen_url(service, judge):
    before = judge.stats()["requests"]
    attacker = JudgeServer()  # the client's own "judge": it would see the key in Authorization
    try:
        row = {"reward_spec": {"method": "judge", "ground_truth": "72"}}
        steered = create(service, "gsm8k", {"judge": {"base_url": attacker.url, "model": "rule-judge"}}, row)
        refused_naming(steered, "env_config.judge")
        assert attacker.stats()["requests"] == 0
        judged = create(service, "gsm8k", None, row).json()[
            "session_id"
        ]  # the operator's judge, with its key
        requests.post(f"{service.url}/sessions/{judged}/init", json={"prompt": []}, timeout=30)
        step = requests.post(
            f"{service.url}/sessions/{judged}/step", json={"action": "#### 72"}, timeout=60
        ).json()
        metadata = step["output"]["metadata"]
        assert "judge" in metadata and "judge_error" not in metadata, (
            metadata
        )  # the key went to the operator's judge
        assert judge.stats()["requests"] == before + 1 and attacker.stats()["requests"] == 0
    finally:
        attacker.stop()


# ----- 3. data paths stay inside their folders --------------------------------------------------------------
def test_rows_cannot_read_server_files(service, data_folder, tmp_path):
    folder, rows = data_folder
    secret = tmp_path / "secret.sqlite"
    secret.write_bytes((folder / rows[0]["db_file"]).read_bytes())
    for db_file in (str(secret), "/etc/passwd", "../../../../../../etc/passwd"):
        response = create(service, "text2sql", None, {**rows[0], "db_file": db_file})
        message = refused_naming(response, "outside the data folder")
        assert "root:" not in message and "SQLite format" not in message
    honest = create(service, "text2sql", None, rows[0])
    assert honest.status_code == 200, honest.text


def test_a_row_naming_a_missing_database_is_a_422_that_keeps_the_data_folder_to_itself(service, data_folder):
    folder, rows = data_folder
    for db_file in ("nowhere.sqlite", ".", ["a"], {"a": 1}):
        response = create(service, "text2sql", None, {**rows[0], "db_file": db_file})
        message = refused_naming(response, "db_file", "not found")  # was a 500 naming the server's path
        assert str(folder) not in message, message


def test_text2sql_needs_the_operators_data_folder():
    with env_service("--envs", "text2sql,test_service/sql_alias") as bare:
        for env_id in ("text2sql", "test_service/sql_alias"):  # the env's class needs it, under any id
            message = refused_naming(
                create(bare, env_id, None, {"db_file": "/etc/passwd"}), "db_path", "operator"
            )
            assert "root:" not in message


def test_serving_text2sql_without_its_data_folder_is_said_as_the_server_starts():
    """The server started silently, and every session of it was then refused."""
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:  # the server stops at its port, after what it says of its envs
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        done = subprocess.run([sys.executable, "-m", "skyrl_gym.cli", "serve-env", "--port", port, "--envs",
                               "gsm8k,text2sql"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "address is in use" in done.stderr, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "every session of 'text2sql' will be refused" in warnings[0], done.stderr
    assert 'serve-env --env-config FILE, where FILE holds {"text2sql": {"db_path": ...}}' in warnings[0]


# ----- 4. bounded servers -----------------------------------------------------------------------------------
def test_a_100000_deep_body_is_a_400_with_a_message(service):
    for field in ("env_config", "extras"):
        raw = '{"env_id": "gsm8k", "' + field + '": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}"
        response = requests.post(service.url + "/sessions", data=raw, timeout=60)
        assert response.status_code == 400 and "nests" in response.json()["error"], response.text[:300]
    assert create(service, "gsm8k", None, GSM8K_ROW).status_code == 200


def test_a_lone_surrogate_is_a_400_and_an_env_that_echoes_one_is_no_500(service):
    """An env_config key of `"\\ud800"` got an unhandled 500 with a traceback: the refusal's message, which names
    the key, had no UTF-8."""
    raw = '{"env_id": "gsm8k", "env_config": {"\\ud800": 1}}'
    response = requests.post(service.url + "/sessions", data=raw, timeout=60)
    assert response.status_code == 400 and "lone surrogate" in response.json()["error"], response.text[:300]
    from skyrl_gym.remote.wire import encode

    assert json.loads(encode({"echo": "a\ud800b"})) == {"echo": "a\ud800b"}  # what an env echoes travels
    assert create(service, "gsm8k", None, GSM8K_ROW).status_code == 200


def test_a_300_mib_chunked_body_is_refused_while_it_streams(tmp_path):
    with env_service("--max-body-bytes", str(1024 * 1024)) as small:
        port = int(small.url.rsplit(":", 1)[1])
        before = peak_rss_mib(small.process.pid)
        assert post_chunked(port, "/sessions", 300 * 1024 * 1024) == 413
        grown = peak_rss_mib(small.process.pid) - before
        assert grown < 64, (
            f"a 300 MiB chunked body took serve-env's peak memory up {grown:.0f} MiB (limit 1 MiB)"
        )
        assert small.health()["status"] == "ok"


def test_slow_clients_are_cut_off_and_others_still_served():
    """Slowloris: uvicorn alone kept an idle connection, a half-sent head and a half-sent body open forever
    (each holding a file descriptor); with --client-timeout 1 each is closed, the body with a 408."""
    with env_service("--client-timeout", "1", token="t") as guarded:
        port = int(guarded.url.rsplit(":", 1)[1])
        assert_slow_clients_cut_off(port, "/sessions", ["Authorization: Bearer t"])
        assert guarded.health()["status"] == "ok"
        refused = guarded.health()["refused"]
        for page in ("/docs", "/redoc", "/openapi.json"):  # FastAPI's own pages answered without the token
            assert requests.get(guarded.url + page, timeout=10).status_code == 404, page
        assert guarded.health()["refused"] == refused + 3  # counted with every other refusal


def test_a_slow_judged_step_does_not_stall_another_clients_health(service, tmp_path):
    """A judged env (the operator's judge) whose own step blocks until this test lets it go: /health must be
    answered meanwhile, and report the call under way (before, the blocking step held the event loop, so
    /health waited for the step, which waited for the test)."""
    release = tmp_path / "release"
    extras = {"max_turns": 1, "reward_spec": {"method": "judge", "ground_truth": "good"}}
    session = create(service, COUNTER_ID, None, extras).json()["session_id"]
    requests.post(f"{service.url}/sessions/{session}/init", json={"prompt": []}, timeout=30)
    answers = {}

    def slow_step():
        answers["step"] = requests.post(
            f"{service.url}/sessions/{session}/step", json={"action": f"wait:{release}"}, timeout=60
        ).json()

    stepping = threading.Thread(target=slow_step)
    stepping.start()
    try:
        health = service.wait_for(lambda h: h["calls_running"] >= 1, timeout_s=20)
        assert health["calls_running"] >= 1 and not release.exists(), health
    finally:
        release.touch()
        stepping.join()
    assert "judge" in answers["step"]["output"]["metadata"], answers  # the step was judged, as a real one


# ----- 5. the documented table is the policy ----------------------------------------------------------------
def test_every_registered_env_is_in_the_policy_and_the_docs_table_is_current():
    uncovered = [
        env_id
        for env_id in skyrl_gym.registry
        if not env_id.startswith("test") and not policy.covered(env_id)
    ]
    assert uncovered == [], f"add these ids to skyrl_gym/remote/policy.py CLIENT_KEYS: {uncovered}"
    page = (REPO_ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert policy.markdown_table() in page, (
        "docs/security.md's table of client keys is stale: paste the output of "
        "`python -c 'from skyrl_gym.remote.policy import markdown_table; print(markdown_table())'`"
    )


def test_answers_kept_for_retries_stay_within_a_memory_budget():
    """An env may echo an action into its answer (countdown puts the whole equation in its metadata), and the
    server keeps the last 8 answers of every session for retries: with thousands of sessions of 32 MB actions
    that had no bound. Past the budget the oldest answers give way to a 410 (a retry still never runs a call
    twice); the latest are answered as before."""
    from skyrl_gym.remote.server import create_app
    from tests.sandboxes.remote_support import serve_in_thread

    budget = 3 * 1024 * 1024
    url, stop = serve_in_thread(create_app(max_kept_bytes=budget))
    try:
        row = {"reward_spec": {"method": "rule", "ground_truth": {"target": 24, "numbers": [1, 2, 3, 4]}}}
        action = "<answer>" + "1+" * 250_000 + "1</answer>"  # a 0.5 MB equation, echoed in the answer
        steps = []
        for n in range(4):
            created = {"env_id": "countdown", "extras": row}
            session = requests.post(f"{url}/sessions", json=created, timeout=30)
            session_id = session.json()["session_id"]
            for m in range(3):
                body = {"action": action, "request_id": f"r{n}-{m}"}
                answer = requests.post(f"{url}/sessions/{session_id}/step", json=body, timeout=60)
                assert answer.status_code == 200, answer.text[:300]
                steps.append((session_id, body, answer.content))
        health = requests.get(f"{url}/health", timeout=10).json()
        assert health["kept_answer_bytes"] <= budget, health  # 12 answers of 0.5 MB were 6 MB
        first_id, first_body, _ = steps[0]
        dropped = requests.post(f"{url}/sessions/{first_id}/step", json=first_body, timeout=60)
        assert dropped.status_code == 410 and "applied once" in dropped.json()["error"], dropped.text[:300]
        last_id, last_body, last_answer = steps[-1]
        again = requests.post(f"{url}/sessions/{last_id}/step", json=last_body, timeout=60)
        assert again.status_code == 200 and again.content == last_answer
    finally:
        stop()


def _in_process_server(**options):
    """create_app(**options) served by uvicorn on a free port in this process (test envs registered here reach
    it); returns (url, stop)."""
    from skygym_sandboxes.http_bodies import guarded_http_protocol
    from skyrl_gym.remote.server import create_app
    from tests.sandboxes.remote_support import serve_in_thread

    return serve_in_thread(create_app(**options), http=guarded_http_protocol())


def test_what_a_session_is_sent_stays_within_its_budget_and_the_servers():
    """Envs keep a session's row and its actions (the search and SQL envs keep the chat history) for the
    session's life: 12 actions of 30 MB grew one session by 360 MB, and 4096 sessions of 32 MB rows had no bound.
    Past the session's budget a call is a 413; past the server's, a 503 until sessions close. A retried call is
    not counted twice."""
    megabyte = 1024 * 1024
    url, stop = _in_process_server(max_body_bytes=2 * megabyte, max_session_bytes=3 * megabyte,
                                   max_held_bytes=5 * megabyte)
    try:
        row = {**GSM8K_ROW, "junk": "j" * megabyte}  # a 1 MB row
        first = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID, "extras": row}, timeout=30).json()
        session = first["session_id"]
        step = {"action": "a" * megabyte, "request_id": "r1"}
        assert requests.post(f"{url}/sessions/{session}/step", json=step, timeout=30).status_code == 200
        held = requests.get(f"{url}/health", timeout=10).json()["held_bytes"]
        assert 2 * megabyte < held < 2.1 * megabyte
        assert requests.post(f"{url}/sessions/{session}/step", json=step, timeout=30).status_code == 200  # retry
        assert requests.get(f"{url}/health", timeout=10).json()["held_bytes"] == held
        step = {"action": "a" * megabyte, "request_id": "r2"}
        over = requests.post(f"{url}/sessions/{session}/step", json=step, timeout=30)
        assert over.status_code == 413, over.text[:300]
        assert "--max-session-bytes" in over.json()["error"] and "start a new session" in over.json()["error"]
        # the server's budget: new sessions may fill three quarters of it (3.75 MB), one more 1 MB session fits
        others = [requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID, "extras": row}, timeout=30)
                  for _ in range(2)]
        assert [r.status_code for r in others] == [200, 503], [r.text[:200] for r in others]
        assert "--max-held-bytes" in others[1].json()["error"] and "three quarters" in others[1].json()["error"]
        # the rest is the running sessions': a client creating sessions up to the limit had their steps refused
        running = others[0].json()["session_id"]
        answered = requests.post(f"{url}/sessions/{running}/step", json={"action": "a" * megabyte}, timeout=30)
        assert answered.status_code == 200, answered.text[:300]
        assert requests.get(f"{url}/health", timeout=10).json()["held_bytes"] > 4 * megabyte
        requests.delete(f"{url}/sessions/{session}", timeout=30)  # closing one makes room
        again = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID, "extras": row}, timeout=30)
        assert again.status_code == 200, again.text[:300]
    finally:
        stop()


def test_a_body_of_many_small_values_is_counted_at_what_it_costs_to_hold():
    """A 9 MB row of 3 million empty objects took 1 GB once parsed while the budget counted 9 MB (an attacker's
    second pass: 42 MiB counted, 1,082 MiB held). A body now counts its bytes plus 80 per JSON value."""
    url, stop = _in_process_server(max_session_bytes=64 * 1024 * 1024, max_held_bytes=96 * 1024 * 1024)
    try:
        junk = "[" + ",".join(["{}"] * 400_000) + "]"  # 1.2 MB on the wire
        body = '{"env_id": "%s", "extras": {"reward_spec": {"ground_truth": "1"}, "junk": %s}}' % (COUNTER_ID, junk)
        created = requests.post(f"{url}/sessions", data=body, headers={"Content-Type": "application/json"},
                                timeout=60)
        assert created.status_code == 200, created.text[:300]
        held = requests.get(f"{url}/health", timeout=10).json()["held_bytes"]
        assert held >= 80 * 400_000 > 20 * len(body), held
    finally:
        stop()


def test_a_row_held_at_four_bytes_a_character_is_counted_at_four():
    """One emoji makes CPython store a whole string at 4 bytes a character: 4 sessions of 8 MiB rows grew the
    server by 128 MiB while the budgets counted 32 (an attacker's pass); the limits then allowed four times
    themselves."""
    megabyte = 1024 * 1024
    url, stop = _in_process_server(max_body_bytes=4 * megabyte)
    try:
        held = []
        for junk in ("a" * megabyte, "a" * megabyte + "\U0001F600"):
            row = {**GSM8K_ROW, "junk": junk}
            created = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID, "extras": row}, timeout=30)
            assert created.status_code == 200, created.text[:300]
            held.append(requests.get(f"{url}/health", timeout=10).json()["held_bytes"] - sum(held))
        ascii_row, wide_row = held
        assert megabyte < ascii_row < 1.1 * megabyte and 4 * megabyte < wide_row < 4.1 * megabyte, held
    finally:
        stop()


def test_a_closed_sessions_kept_answers_leave_the_budget():
    """close() released a session's kept answers under its id instead of its key (client, id): nothing was
    released, so closed sessions' answers stayed counted until the budget dropped every other session's latest
    answer (a retry after a timeout got a 410, and that rollout's reward was lost), and each kept answer walked
    past every closed session (an attacker's pass: 20,000 closed sessions took an honest step from 2 ms to 170)."""
    url, stop = _in_process_server(max_kept_bytes=64 * 1024)
    try:
        prompt = [{"role": "user", "content": "x" * 40_000}]  # init answers with the prompt: a 40 KB answer
        for n in range(4):
            session = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, timeout=30).json()["session_id"]
            answer = requests.post(f"{url}/sessions/{session}/init", json={"prompt": prompt, "request_id": f"i{n}"},
                                   timeout=30)
            assert answer.status_code == 200, answer.text[:300]
            assert requests.get(f"{url}/health", timeout=10).json()["kept_answer_bytes"] > 40_000
            assert requests.delete(f"{url}/sessions/{session}", timeout=30).json()["closed"] is True
            assert requests.get(f"{url}/health", timeout=10).json()["kept_answer_bytes"] == 0
        # an open session's answer is still there for its retry: no closed session's bytes pushed it out
        session = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, timeout=30).json()["session_id"]
        body = {"prompt": prompt, "request_id": "mine"}
        first = requests.post(f"{url}/sessions/{session}/init", json=body, timeout=30)
        retried = requests.post(f"{url}/sessions/{session}/init", json=body, timeout=30)
        assert retried.status_code == 200 and retried.content == first.content, retried.text[:300]
    finally:
        stop()


def _health_until(url, predicate, headers=None):
    """The server's /health once ``predicate`` holds for it (30 s at most: only stops a broken test from hanging)."""
    import time

    deadline = time.monotonic() + 30
    while True:
        health = requests.get(f"{url}/health", headers=headers, timeout=10).json()
        if predicate(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.02)


def test_a_session_closed_during_a_step_keeps_no_answer(tmp_path):
    """close() dropped the session's kept answers, then the step under way kept its own: bytes counted for a
    session that no longer exists, until the budget pushed out honest answers. The step holds until the close is
    under way (a sleep raced a loaded machine: the step could end before the close, or the close come first)."""
    import concurrent.futures

    url, stop = _in_process_server()
    gate = tmp_path / "gate"

    try:
        session = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, timeout=30).json()["session_id"]
        step = {"action": f"wait:{gate}", "request_id": "slow-step"}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            running = pool.submit(requests.post, f"{url}/sessions/{session}/step", json=step, timeout=30)
            _health_until(url, lambda h: h["calls_running"] == 1)
            closing = pool.submit(requests.delete, f"{url}/sessions/{session}", timeout=30)
            _health_until(url, lambda h: h["sessions"] == 0)  # closed; the close waits for the step under way
            gate.write_text("")
            assert closing.result().json()["closed"] is True
            running.result()
        assert requests.get(f"{url}/health", timeout=10).json()["kept_answer_bytes"] == 0
    finally:
        gate.write_text("")
        stop()


def test_a_session_runs_its_calls_one_at_a_time_and_refuses_a_queue_of_them(tmp_path):
    """4,100 connections, each with steps queued on one session, held every connection of the server (honest
    clients were cut), hours of sandbox work ran after their client left, and SIGTERM waited behind them; so did
    4,100 retries joining one step. Past two requests running, waiting or joining a call, a request is a 429;
    closing the session stops the waiting ones."""
    import concurrent.futures

    from skyrl_gym.remote.server import MAX_CALLS_PER_SESSION

    url, stop = _in_process_server()
    first_gate, second_gate = tmp_path / "first", tmp_path / "second"

    try:
        session = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID, "extras": {"max_turns": 9}},
                                timeout=30).json()["session_id"]
        steps = f"{url}/sessions/{session}/step"

        def step(action, request_id):
            return pool.submit(requests.post, steps, json={"action": action, "request_id": request_id}, timeout=30)

        def refused(response):
            assert response.status_code == 429, response.text[:200]
            return f"already has {MAX_CALLS_PER_SESSION} requests running or waiting" in response.json()["error"]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            first = step(f"wait:{first_gate}", "r1")
            _health_until(url, lambda h: h["calls_running"] == 1)
            retry = step(f"wait:{first_gate}", "r1")  # joins the call under way: it counts, and gets its answer
            _health_until(url, lambda h: h["calls_waiting"] == 1)
            # the cap counts the joining retry: another retry of it is refused too (4,100 of them locked clients out)
            assert refused(requests.post(steps, json={"action": "more", "request_id": "q0"}, timeout=30))
            assert refused(requests.post(steps, json={"action": f"wait:{first_gate}", "request_id": "r1"},
                                         timeout=30))
            first_gate.write_text("")
            assert first.result().status_code == 200 and retry.result().content == first.result().content
            assert first.result().json()["output"]["metadata"]["applied_steps"] == 1
            second = step(f"wait:{second_gate}", "r2")
            _health_until(url, lambda h: h["calls_running"] == 1 and h["calls_waiting"] == 0)
            third = step("third", "r3")
            _health_until(url, lambda h: h["calls_waiting"] == 1)
            assert all(refused(requests.post(steps, json={"action": "more", "request_id": f"q{n}"}, timeout=30))
                       for n in range(3))
            closing = pool.submit(requests.delete, f"{url}/sessions/{session}", timeout=30)
            _health_until(url, lambda h: h["sessions"] == 0)  # closed: the third waits for the second, then gives way
            second_gate.write_text("")
            assert second.result().status_code == 200, second.result().text[:300]
            assert third.result().status_code == 410, third.result().text[:300]
            assert "was closed before this step() ran; it did not run" in third.result().json()["error"]
            assert closing.result().json()["closed"] is True
        health = requests.get(f"{url}/health", timeout=10).json()
        assert health["calls_running"] == 0 and health["sessions"] == 0, health
    finally:
        first_gate.write_text("")
        second_gate.write_text("")
        stop()


_SLOW_BUILD_STARTED, _SLOW_BUILD_RELEASED = threading.Event(), threading.Event()


class _SlowToBuild(skyrl_gym.BaseTextEnv):
    """Its build holds until the test lets it go (20 s at most: a server that waited for it answers then)."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        _SLOW_BUILD_STARTED.set()
        _SLOW_BUILD_RELEASED.wait(timeout=20)

    def step(self, action):
        return {"observations": [], "reward": 0.0, "done": True, "metadata": {}}


def test_a_session_id_being_created_for_one_env_is_a_409_for_another():
    """A second create with the same session id but another env, while the first is still being built, got the
    first env's session (the env check came after the wait for the build)."""
    skyrl_gym.register("test_trust/slow_build", entry_point=_SlowToBuild)
    _SLOW_BUILD_STARTED.clear(), _SLOW_BUILD_RELEASED.clear()
    url, stop = _in_process_server()
    try:
        import concurrent.futures

        body = {"session_id": "shared-id", "env_id": "test_trust/slow_build"}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            building = pool.submit(requests.post, f"{url}/sessions", json=body, timeout=60)
            # the first create is building until released (a 0.3 s sleep raced a loaded machine: the second
            # create could arrive first)
            assert _SLOW_BUILD_STARTED.wait(timeout=30)
            try:
                other = requests.post(f"{url}/sessions", json={**body, "env_id": COUNTER_ID}, timeout=60)
            finally:
                _SLOW_BUILD_RELEASED.set()
            assert building.result().status_code == 200
        assert other.status_code == 409, other.text[:300]
        assert "is taken by a create with another env or row" in other.json()["error"]
        assert "slow_build" not in other.json()["error"]  # it named the other session's env
    finally:
        _SLOW_BUILD_RELEASED.set()
        stop()
        skyrl_gym.deregister("test_trust/slow_build")


def test_a_session_id_taken_with_another_row_is_not_handed_to_a_second_client():
    """Client B created 'rollout-7' with a ground truth of its choosing; A's later create of 'rollout-7' with its
    own row was answered as a retry, and A's right answer scored on B's row (an attacker's pass). A create of an
    id in use must ask for the same env and row as the one that made it; a real retry still gets the session."""
    url, stop = _in_process_server()
    try:
        squatter = {"session_id": "rollout-7", "env_id": "gsm8k", "extras": {"reward_spec": {"ground_truth": "999"}}}
        assert requests.post(f"{url}/sessions", json=squatter, timeout=30).json()["created"] is True
        honest = {**squatter, "extras": {"reward_spec": {"ground_truth": "72"}}}
        taken = requests.post(f"{url}/sessions", json=honest, timeout=30)
        assert taken.status_code == 409 and "is taken by a create with another env or row" in taken.json()["error"]
        retry = requests.post(f"{url}/sessions", json=squatter, timeout=30)
        assert retry.status_code == 200 and retry.json()["created"] is False
    finally:
        stop()


def test_requests_from_web_pages_are_refused(service):
    """Any page the operator opens could post to a server on the operator's machine, and one whose name was
    re-pointed at 127.0.0.1 (DNS rebinding) could read the answers: a request a browser sends (Origin,
    Sec-Fetch-Mode) is a 403, and a server without a token answers only requests addressed to a loopback name."""
    health = service.url + "/health"
    created = service.health()["sessions_created"]
    port = service.url.rsplit(":", 1)[1]
    for headers in ({"Origin": "http://attacker.example"}, {"Sec-Fetch-Mode": "cors"},
                    {"Host": f"attacker.example:{port}"}):
        refused = requests.post(service.url + "/sessions", json={"env_id": "gsm8k", "extras": GSM8K_ROW},
                                headers=headers, timeout=10)
        assert refused.status_code == 403, (headers, refused.text[:300])
    assert "addressed to 127.0.0.1 or localhost" in refused.json()["error"]
    assert requests.get(health, headers={"Host": f"localhost:{port}"}, timeout=10).status_code == 200
    assert service.health()["sessions_created"] == created  # none of them reached an env


def test_swe_is_served_only_with_the_operators_images(service):
    """A swe row names the image its container runs: without the operator's ``images`` a client could get a
    shell in any image of the host's engine. This server's operator allows skyrl-gym-swe-* only."""
    from skyrl_gym.remote.policy import PolicyError, effective_env_config

    row = {"instance_id": "x", "repo": "r", "base_commit": "c", "image_name": "private/credentials:latest",
           "problem_statement": "p", "patch": "diff", "test_patch": "diff", "FAIL_TO_PASS": ["t"], "PASS_TO_PASS": []}
    refused_naming(create(service, "swe", extras=row), "private/credentials:latest", "env_config.images")
    with pytest.raises(PolicyError, match="needs the operator's images"):
        effective_env_config({}, "swe", {})


def test_one_clients_big_answers_push_out_its_own_kept_answers_not_another_clients():
    """Answers kept for retries went oldest first across sessions: a client filling the budget with big answers
    (an init echoes its prompt) pushed out another client's answer, whose retry of a step already applied then
    got a 410 and lost that rollout's reward. The session keeping the most bytes now gives way first."""
    megabyte = 1024 * 1024
    url, stop = _in_process_server(max_kept_bytes=3 * megabyte, max_body_bytes=2 * megabyte)
    try:
        def session():
            created = requests.post(f"{url}/sessions", json={"env_id": "gsm8k", "extras": GSM8K_ROW}, timeout=30)
            return created.json()["session_id"]

        victim = session()
        step = {"action": "#### 72", "request_id": "v1"}
        first = requests.post(f"{url}/sessions/{victim}/step", json=step, timeout=30)
        assert first.status_code == 200 and first.json()["output"]["reward"] == 1.0, first.text[:300]
        attacker = [session() for _ in range(2)]
        for n in range(8):  # 8 answers of 0.75 MB: twice the budget
            prompt = [{"role": "user", "content": "p" * (3 * megabyte // 4)}]
            body = {"prompt": prompt, "request_id": f"a{n}"}
            answer = requests.post(f"{url}/sessions/{attacker[n % 2]}/init", json=body, timeout=30)
            assert answer.status_code == 200, answer.text[:300]
        health = requests.get(f"{url}/health", timeout=10).json()
        assert health["kept_answer_bytes"] <= 3 * megabyte, health
        retried = requests.post(f"{url}/sessions/{victim}/step", json=step, timeout=30)
        assert retried.status_code == 200 and retried.content == first.content, retried.text[:300]
        dropped = requests.post(f"{url}/sessions/{attacker[0]}/init", json={"prompt": [], "request_id": "a0"},
                                timeout=30)
        assert dropped.status_code == 410 and "applied once" in dropped.json()["error"], dropped.text[:300]
    finally:
        stop()


def test_a_client_spreading_answers_over_sessions_does_not_push_out_another_clients():
    """With a token per client, answers went from the session keeping the most bytes: a client spreading its
    answers over many sessions, each smaller than another client's one answer, made that answer the one to go (its
    retry got a 410, its reward was lost). The client keeping the most gives way first (an attacker's pass)."""
    tokens = {"alice": "a" * 24, "bob": "b" * 24}
    alice, bob = ({"Authorization": f"Bearer {tokens[name]}"} for name in ("alice", "bob"))
    megabyte = 1024 * 1024
    url, stop = _in_process_server(client_tokens=tokens, max_kept_bytes=3 * megabyte, max_body_bytes=2 * megabyte)
    try:
        def init(headers, size, request_id):
            created = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, headers=headers, timeout=30)
            session = created.json()["session_id"]
            body = {"prompt": [{"role": "user", "content": "p" * size}], "request_id": request_id}  # echoed back
            answer = requests.post(f"{url}/sessions/{session}/init", json=body, headers=headers, timeout=30)
            assert answer.status_code == 200, answer.text[:300]
            return session, body, answer.content

        kept, body, first = init(bob, megabyte // 2, "b1")
        for n in range(8):  # 8 answers of 0.4 MB, each in a session of its own: past the budget
            init(alice, 2 * megabyte // 5, f"a{n}")
        retried = requests.post(f"{url}/sessions/{kept}/init", json=body, headers=bob, timeout=30)
        assert retried.status_code == 200 and retried.content == first, retried.text[:300]
        assert requests.get(f"{url}/health", headers=bob, timeout=10).json()["kept_answer_bytes"] <= 3 * megabyte
    finally:
        stop()


def test_a_clients_requests_under_way_leave_the_others_room_to_connect():
    """A request under way holds its connection: two clients' sessions (2,048 each at the defaults) with two slow
    steps each under way held all 4,096 connections, and the other client's new connections were closed (an
    attacker's pass). A client's requests under way are bounded by its share of the connections, leaving room
    for one client more."""
    tokens = {"alice": "a" * 24, "bob": "b" * 24}
    alice, bob = ({"Authorization": f"Bearer {tokens[name]}"} for name in ("alice", "bob"))
    url, stop = _in_process_server(client_tokens=tokens, max_connections=6)  # 2 requests under way a client
    try:
        sessions = [requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, headers=alice, timeout=30)
                    .json()["session_id"] for _ in range(3)]
        for session in sessions:
            requests.post(f"{url}/sessions/{session}/init", json={}, headers=alice, timeout=30)
        slow = [threading.Thread(target=requests.post, args=(f"{url}/sessions/{session}/step",),
                                 kwargs={"json": {"action": "sleep:3"}, "headers": alice, "timeout": 30})
                for session in sessions[:2]]
        for thread in slow:
            thread.start()
        deadline = time.monotonic() + 10
        while requests.get(f"{url}/health", headers=bob, timeout=10).json()["calls_running"] < 2:
            assert time.monotonic() < deadline, "the two slow steps never ran"
            time.sleep(0.05)
        third = requests.post(f"{url}/sessions/{sessions[2]}/step", json={"action": "x"}, headers=alice, timeout=30)
        assert third.status_code == 429, third.text[:300]
        assert "client 'alice' has 2 requests under way, its share of the server's 6 connections" in third.text
        assert requests.get(f"{url}/health", headers=bob, timeout=10).status_code == 200  # bob's count is his own
        for thread in slow:
            thread.join(30)
        again = requests.post(f"{url}/sessions/{sessions[2]}/step", json={"action": "x"}, headers=alice, timeout=30)
        assert again.status_code == 200, again.text[:300]  # answered requests give their place back
    finally:
        stop()


def test_one_clients_slow_bodies_leave_the_others_their_share_of_the_body_budget():
    """Bodies are counted from their first bytes until answered, against a budget of four largest bodies for the
    server: one client's slow large bodies filled it, and every other client's large body was a 503 until they were
    answered (an attacker's pass). Each client's bodies now hold at most its share, with room for one client more."""
    import socket

    kib = 1024
    tokens = {"alice": "a" * 24, "bob": "b" * 24}
    url, stop = _in_process_server(client_tokens=tokens, max_body_bytes=256 * kib)  # 1 MiB in all, 341 KiB a client
    host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
    held = []
    try:
        for _ in range(5):  # each 250 KiB of a 256 KiB body (186 KiB counted), never finished
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(f"POST /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tokens['alice']}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: {256 * kib}\r\n\r\n".encode()
                         + b" " * (250 * kib))
            held.append(sock)
        time.sleep(0.5)  # the server reads what was sent
        refused = []
        for sock in held:
            sock.settimeout(0.5)
            try:
                refused.append(sock.recv(1000).decode(errors="replace"))
            except socket.timeout:
                refused.append("")
        # at most one of alice's bodies fits her share (two do not): the others passed it and were refused as they
        # arrived (which ones, and whether all, depends on the order the server read their bytes in)
        assert refused.count("") <= 1, refused
        said = [r for r in refused if r]
        assert all(" 503 " in r.split("\r\n")[0] and "client 'alice''s requests' bodies" in r for r in said), said
        body = {"env_id": "gsm8k", "extras": {**GSM8K_ROW, "extra_info": {"note": "x" * (200 * kib)}}}
        answer = requests.post(f"{url}/sessions", json=body, timeout=30,
                               headers={"Authorization": f"Bearer {tokens['bob']}"})
        assert answer.status_code == 200, answer.text[:300]  # bob's large body still had room
    finally:
        for sock in held:
            sock.close()
        stop()


def test_a_small_body_is_not_parsed_behind_another_clients_big_ones(monkeypatch):
    """The two body parsers served bodies in arrival order: one client's 30 MB bodies (4 at a time) held another
    client's small create for 22 s (an attacker's pass). Small bodies are parsed at once, big ones in turns by
    client. Here every big body's parse is held until the other client's create has been answered."""
    from skygym_sandboxes import http_bodies

    release = threading.Event()
    real = http_bodies.held_bytes

    def held(value):
        if len(json.dumps(value)) > http_bodies.BodyParsers.INLINE_BYTES:
            assert release.wait(30), "a big body's parse was held for 30 s"
        return real(value)

    monkeypatch.setattr(http_bodies, "held_bytes", held)
    tokens = {"alice": "a" * 24, "bob": "b" * 24}
    alice, bob = ({"Authorization": f"Bearer {tokens[name]}"} for name in ("alice", "bob"))
    url, stop = _in_process_server(client_tokens=tokens)
    big = {"env_id": "gsm8k", "extras": {**GSM8K_ROW, "extra_info": {"note": "x" * 100_000}}}
    floods = [threading.Thread(target=requests.post, args=(f"{url}/sessions",),
                               kwargs={"json": big, "headers": alice, "timeout": 60}) for _ in range(4)]
    try:
        for thread in floods:
            thread.start()
        time.sleep(0.5)  # alice's bodies hold both parsers, two more wait
        created = requests.post(f"{url}/sessions", json={"env_id": "gsm8k", "extras": GSM8K_ROW}, headers=bob,
                                timeout=10)
        assert created.status_code == 200, created.text[:300]
    finally:
        release.set()
        for thread in floods:
            thread.join(60)
        stop()


def test_a_body_is_parsed_and_counted_off_the_event_loop(monkeypatch):
    """The checks of a body (its depth, its lone surrogates, what it holds) ran on the event loop: a 32 MB body of
    11 million empty objects held every other client for 21 s. Here the count of one body waits until a health
    check has been answered, which only a count off the event loop lets happen."""
    from skygym_sandboxes import http_bodies
    from tests.sandboxes.remote_support import HeldParse

    held = HeldParse(monkeypatch, http_bodies, "held_bytes")
    url, stop = _in_process_server()
    try:
        # over BodyParsers.INLINE_BYTES: a small body is parsed on the loop at once (a millisecond at most)
        row = {**GSM8K_ROW, "extra_info": {"note": "x" * (http_bodies.BodyParsers.INLINE_BYTES + 1)}}
        answer = held.post_beside_a_health_check(url, "/sessions", {"env_id": "gsm8k", "extras": row})
        assert answer.status_code == 200, answer.text[:300]
    finally:
        stop()


@pytest.mark.parametrize("extras, named", [
    ({**GSM8K_ROW, "extra_info": "not a dict"}, "extra_info"),
    ({"reward_spec": "72"}, "reward_spec"),
])
def test_row_fields_envs_read_as_dicts_are_a_422_when_they_are_not(service, extras, named):
    for env_id in ("gsm8k", "gsm8k_multi_turn", "multiply"):
        refused_naming(create(service, env_id, None, extras), named)
    assert service.health()["status"] == "ok"


def test_a_test_list_nested_past_what_json_reads_and_a_judge_the_server_lacks_are_422s():
    url, stop = _in_process_server()  # no judge configured
    try:
        deep = requests.post(f"{url}/sessions", json={"env_id": "lcb", "extras": {
            "reward_spec": {"ground_truth": "[" * 100_000}}}, timeout=30)
        assert deep.status_code == 422 and "too deep" in deep.json()["error"], deep.text[:300]
        judged = requests.post(f"{url}/sessions", json={"env_id": "gsm8k", "extras": {
            "reward_spec": {"method": "judge", "ground_truth": "72"}}}, timeout=30)
        assert judged.status_code == 422 and "no judge endpoint is configured" in judged.json()["error"], \
            judged.text[:300]
    finally:
        stop()


def test_generator_settings_that_would_build_a_huge_question_are_a_422(service):
    """Two 200-byte creates of rotate_matrix (n = 1500 and 1200) grew the server from 57 to 290 MB, and n = 20000
    would have taken 16 GB on one of its threads (an attacker's pass): settings above the defaults are tried
    first in a bounded child process."""
    pytest.importorskip("reasoning_gym", reason="the env is a reasoning_gym one: pip install 'skyrl-gym[reasoning-gym]'")
    settings = {"settings": {"min_n": 1500, "max_n": 1500}}
    refused_naming(create(service, "reasoning_gym/rotate_matrix", settings), "at most 200,000")
    assert create(service, "reasoning_gym/rotate_matrix", {"settings": {"max_n": 6}}).status_code == 200


_BUILD_STARTED, _BUILD_RELEASED = threading.Event(), threading.Event()


class _WaitsToBuild(skyrl_gym.BaseTextEnv):
    """An env whose build waits until the test lets it go, as a create whose settings are being tried waits."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        _BUILD_STARTED.set()
        _BUILD_RELEASED.wait(timeout=60)

    def step(self, action):
        return {"observations": [], "reward": 0.0, "done": True, "metadata": {}}


class _WaitsToInit(_WaitsToBuild):
    """An env whose ``init`` waits, as the swe env's does while it starts its container."""

    def __init__(self, env_config=None, extras=None):
        skyrl_gym.BaseTextEnv.__init__(self, env_config, extras)

    def init(self, prompt=None):
        _BUILD_STARTED.set()
        _BUILD_RELEASED.wait(timeout=60)
        return super().init(prompt)


@pytest.mark.parametrize("waits_in", ["create", "init"])
def test_creates_and_inits_that_wait_never_hold_the_threads_that_step_running_sessions(waits_in):
    """A create waits up to three minutes for a reasoning-gym setting to be tried; creates with ever new settings
    held every env thread, so the steps of other clients' running sessions waited behind them (an attacker's
    pass). Builds have threads of their own: with one env thread and one build thread, a step is answered while
    two creates wait. The swe env starts its container in ``init``, which ran on the env threads too: it runs on
    the build threads."""
    import concurrent.futures

    env_id = f"test_trust/waits_in_{waits_in}"
    skyrl_gym.register(env_id, entry_point=_WaitsToBuild if waits_in == "create" else _WaitsToInit)
    _BUILD_STARTED.clear(), _BUILD_RELEASED.clear()
    try:
        url, stop = _in_process_server(env_threads=1, build_threads=1)
    except BaseException:
        skyrl_gym.deregister(env_id)
        raise
    try:
        session = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, timeout=30).json()["session_id"]
        assert requests.post(f"{url}/sessions/{session}/init", json={}, timeout=30).status_code == 200
        made = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, timeout=30).json()["session_id"]
        if waits_in == "create":
            slow = [(f"{url}/sessions", {"env_id": env_id})] * 2
        else:
            slow = [(f"{url}/sessions/{name}/init", {}) for name in (
                requests.post(f"{url}/sessions", json={"env_id": env_id}, timeout=30).json()["session_id"]
                for _ in range(2))]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(requests.post, where, json=body, timeout=90) for where, body in slow]
            try:
                assert _BUILD_STARTED.wait(timeout=30)  # a build or an init holds its thread
                step = requests.post(f"{url}/sessions/{session}/step", json={"action": "a"}, timeout=10)
                assert step.status_code == 200, step.text[:300]
                if waits_in == "create":  # nor does the init of a session already made (a review)
                    init = requests.post(f"{url}/sessions/{made}/init", json={}, timeout=10)
                    assert init.status_code == 200, init.text[:300]
                assert not any(call.done() for call in waiting)  # the step did not wait for them
            finally:
                _BUILD_RELEASED.set()
            assert [call.result().status_code for call in waiting] == [200, 200]
    finally:
        _BUILD_RELEASED.set()
        stop()
        skyrl_gym.deregister(env_id)


class _SaysWhoseTurn(skyrl_gym.BaseTextEnv):
    """An env whose step says whose work the pools' turns count it as (what a math check or sandbox run sees)."""

    def step(self, action):
        from skygym_sandboxes.turns import turn_key

        return {"observations": [], "reward": 0.0, "done": True, "metadata": {"turn_key": turn_key.get()}}


_HELD_STEPS_RELEASED = threading.Event()
_STEP_ORDER = []


class _TakesTurns(CounterEnv):
    """The counter env, noting whose step ran when (in the env's thread); 'hold' blocks until the test releases it."""

    def step(self, action):
        from skygym_sandboxes.turns import turn_key

        if action == "hold":
            _HELD_STEPS_RELEASED.wait(timeout=30)
        _STEP_ORDER.append(turn_key.get())
        return super().step(action)


@pytest.mark.parametrize("judged", [False, True])
def test_a_clients_one_step_waits_for_one_free_thread_not_for_another_clients_queue(judged, judge, monkeypatch):
    """The env threads went to steps in arrival order: a client that queued many slow steps made another client's
    one step wait behind all of them. They go to clients in turns: with one env thread, one client's four steps
    (held until all five are in) and then another's quick step, the quick step runs second, not fifth. The client's name reaches
    the env's thread, where the math helpers and the sandbox pool take turns by it too. Judged steps too: the
    judge's wrapper stepped on the loop, its blocking step in threads of asyncio's, outside the env threads, and
    they held up the parsing of every other request's body (an attacker's pass)."""
    import concurrent.futures

    tokens = {"busy": "b" * 24, "light": "l" * 24}
    headers = {name: {"Authorization": f"Bearer {token}"} for name, token in tokens.items()}
    skyrl_gym.register("test_trust/whose_turn", entry_point=_SaysWhoseTurn)
    skyrl_gym.register("test_trust/takes_turns", entry_point=_TakesTurns)
    monkeypatch.setenv("SKYRL_GYM_JUDGE_API_KEY", JUDGE_KEY)
    operator = {"*": {"judge": {"base_url": judge.url, "model": "rule-judge", "attempts": 1}}}
    url, stop = _in_process_server(client_tokens=tokens, env_threads=1, operator_config=operator)
    busy_row = {"max_turns": 1, "reward_spec": {"method": "judge", "ground_truth": "good"}} if judged else None

    def session(client, env_id="test_trust/takes_turns", extras=None):
        made = requests.post(f"{url}/sessions", json={"env_id": env_id, "extras": extras}, headers=headers[client],
                             timeout=30)
        name = made.json()["session_id"]
        assert requests.post(f"{url}/sessions/{name}/init", json={}, headers=headers[client], timeout=30).ok
        return name

    def step(client, name, action):
        answer = requests.post(f"{url}/sessions/{name}/step", json={"action": action}, headers=headers[client],
                               timeout=60)
        assert answer.status_code == 200, answer.text[:300]
        return answer.json()

    try:
        whose = session("light", "test_trust/whose_turn")
        assert step("light", whose, "a")["output"]["metadata"] == {"turn_key": "light"}
        busy, light = [session("busy", extras=busy_row) for _ in range(4)], session("light")
        # The busy steps hold until all five are in (sleeps raced a loaded machine: a step could end before the
        # last one arrived); the order is the env thread's, not that of the answers reaching their clients.
        _HELD_STEPS_RELEASED.clear()
        _STEP_ORDER.clear()

        def wait_for_waiting(count, what):
            health = _health_until(url, lambda h: h["calls_waiting_for_threads"] >= count, headers["busy"])
            assert health["calls_waiting_for_threads"] >= count, what

        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            queued = [pool.submit(step, "busy", name, "hold") for name in busy]
            wait_for_waiting(3, "the four steps never reached the server")  # one step runs, three wait
            quick = pool.submit(step, "light", light, "a")
            wait_for_waiting(4, "the quick step never reached the server")
            _HELD_STEPS_RELEASED.set()
            for call in queued + [quick]:
                call.result(timeout=60)
        assert sorted(_STEP_ORDER) == ["busy"] * 4 + ["light"], _STEP_ORDER
        assert _STEP_ORDER.index("light") == 1, _STEP_ORDER
    finally:
        _HELD_STEPS_RELEASED.set()
        stop()
        skyrl_gym.deregister("test_trust/whose_turn")
        skyrl_gym.deregister("test_trust/takes_turns")


def test_the_server_log_says_which_client_was_refused_and_why(caplog):
    """The log held only the listening line; at --log-level info, uvicorn's access lines name an address, not the
    client, nor the reason (a new operator's cold run)."""
    import logging

    tokens = {"worker-a": "a" * 24}
    url, stop = _in_process_server(client_tokens=tokens, max_body_bytes=4096)
    server_log = logging.getLogger("uvicorn.error")
    server_log.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="uvicorn.error")
    try:
        a = {"Authorization": "Bearer " + tokens["worker-a"]}
        assert requests.post(f"{url}/sessions", json={"env_id": "nope"}, headers=a, timeout=30).status_code == 404
        assert requests.get(f"{url}/health", headers={"Authorization": "Bearer " + "x" * 24}, timeout=30).status_code == 401
    finally:
        server_log.removeHandler(caplog.handler)
        stop()
    lines = [record.getMessage() for record in caplog.records if record.name == "uvicorn.error"]
    assert any(line.startswith("client 'worker-a': refused (404): ") and "'nope'" in line for line in lines), lines
    assert any(line.startswith("client (no valid token): refused (401)") for line in lines), lines


def test_an_unknown_path_or_method_is_an_error_like_every_other():
    """FastAPI answered them {"detail": ...}; the protocol's errors are {"error": ...} (a new operator's cold run)."""
    url, stop = _in_process_server()
    try:
        for method, path, status, message in (("get", "/sessions", 405, "Method Not Allowed"),
                                              ("get", "/docs", 404, "Not Found")):
            answer = requests.request(method, url + path, timeout=10)
            assert (answer.status_code, answer.json()) == (status, {"error": message}), answer.text[:200]
    finally:
        stop()


def test_reading_a_sessions_metrics_does_not_keep_it_alive():
    """A metrics read reset the idle timer: 11 s of reads every 10 minutes kept 4,096 sessions, and with them every
    slot of the server, from expiring (an attacker's pass). Only an init or a step that runs touches a session."""
    import time

    url, stop = _in_process_server(idle_timeout_s=0.5)
    try:
        session = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, timeout=30).json()["session_id"]
        deadline = time.monotonic() + 60  # only stops a broken test from reading for ever: it expires in 0.5 s
        while time.monotonic() < deadline:
            read = requests.get(f"{url}/sessions/{session}/metrics", timeout=10)
            if read.status_code != 200:
                break
            time.sleep(0.1)
        assert read.status_code == 404 and "expired after 0.5 s idle" in read.json()["error"], read.text[:300]
    finally:
        stop()


def test_the_last_quarter_of_the_budget_is_for_sessions_within_their_share():
    """New sessions stopped at three quarters of --max-held-bytes, but a client's own steps could fill the rest, and
    then every other client's step was a 503 (a review). Past three quarters, only sessions holding less than their
    share of the budget may grow."""
    megabyte = 1024 * 1024
    url, stop = _in_process_server(max_body_bytes=2 * megabyte, max_session_bytes=3 * megabyte,
                                   max_held_bytes=4 * megabyte)
    try:
        row = {**GSM8K_ROW, "junk": "j" * megabyte}
        hers = [requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID, "extras": row}, timeout=30
                              ).json()["session_id"] for _ in range(2)]
        victim = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, timeout=30).json()["session_id"]
        grow = {"action": "a" * (9 * megabyte // 10)}
        first = requests.post(f"{url}/sessions/{hers[0]}/step", json=grow, timeout=30)
        assert first.status_code == 200, first.text[:300]  # 2.9 MB held: within three quarters
        second = requests.post(f"{url}/sessions/{hers[1]}/step", json=grow, timeout=30)
        assert second.status_code == 503 and "more than their share" in second.json()["error"], second.text[:300]
        step = requests.post(f"{url}/sessions/{victim}/step", json={"action": "a" * (megabyte // 2)}, timeout=30)
        assert step.status_code == 200, step.text[:300]  # past three quarters, within its share
        assert requests.get(f"{url}/health", timeout=10).json()["held_bytes"] > 3 * megabyte
    finally:
        stop()


def test_clients_with_tokens_of_their_own_reach_only_their_own_sessions():
    """With one shared token, a client that learnt another's session id could step it, read its metrics and close
    it, and one client could take every session slot (an attacker's pass). --tokens-file gives each client its
    own token: its sessions are its own, and it holds at most its share of --max-sessions."""
    tokens = {"worker-a": "a" * 24, "worker-b": "b" * 24}
    url, stop = _in_process_server(client_tokens=tokens, max_sessions=4)
    a, b = ({"Authorization": f"Bearer {tokens[name]}"} for name in ("worker-a", "worker-b"))
    try:
        mine = {"session_id": "rollout-7", "env_id": "gsm8k", "extras": {"reward_spec": {"ground_truth": "72"}}}
        assert requests.post(f"{url}/sessions", json=mine, headers=a, timeout=30).json()["created"] is True
        for method, path, body in (("post", "/init", {}), ("post", "/step", {"action": "#### 72"}),
                                   ("get", "/metrics", None)):
            other = requests.request(method, f"{url}/sessions/rollout-7{path}", json=body, headers=b, timeout=30)
            assert other.status_code == 404 and "no session 'rollout-7'" in other.json()["error"], path
        assert requests.delete(f"{url}/sessions/rollout-7", headers=b, timeout=30).json() == {"closed": False}
        # another client's create of the same id makes a session of its own: no 409 tells it the id is in use, and
        # its own row (here another ground truth) never reaches the first client's session
        squat = {**mine, "extras": {"reward_spec": {"ground_truth": "0"}}}
        theirs = requests.post(f"{url}/sessions", json=squat, headers=b, timeout=30)
        assert theirs.status_code == 200 and theirs.json()["created"] is True, theirs.text[:300]
        for headers, reward in ((a, 1.0), (b, 0.0)):
            assert requests.post(f"{url}/sessions/rollout-7/init", json={}, headers=headers, timeout=30).status_code == 200
            step = requests.post(f"{url}/sessions/rollout-7/step", json={"action": "#### 72"}, headers=headers,
                                 timeout=30)
            assert step.json()["output"]["reward"] == reward
        assert requests.delete(f"{url}/sessions/rollout-7", headers=b, timeout=30).json()["closed"] is True
        # each client holds at most half of the four sessions; the other's share stays free
        more = [requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, headers=a, timeout=30)
                for _ in range(2)]
        assert [r.status_code for r in more] == [200, 429]
        assert ("client 'worker-a' holds 2 sessions, its limit (2, its share of --max-sessions 4 over 2 clients; "
                "--max-sessions-per-client sets it)") in more[1].json()["error"]
        assert requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, headers=b, timeout=30).status_code == 200
        wrong = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID},
                              headers={"Authorization": "Bearer " + "c" * 24}, timeout=30)
        assert wrong.status_code == 401
    finally:
        stop()


def test_a_clients_token_is_found_whole_and_exact_among_a_thousand():
    """Tokens are looked up by digest (comparing each of 1,000 cost 0.4 ms a request): only the whole header
    ``Bearer <token>`` names its client; a prefix, a longer string, another case or spacing name nobody."""
    from types import SimpleNamespace

    from skygym_sandboxes.http_bodies import BearerTokens

    tokens = {f"worker-{i}": f"{i:04d}" + "t" * 20 for i in range(1000)}
    owners = BearerTokens(tokens)

    def owner(header):
        return owners.owner(SimpleNamespace(headers={} if header is None else {"authorization": header}))

    assert owner(f"Bearer {tokens['worker-617']}") == "worker-617"
    for wrong in (None, "", tokens["worker-617"], f"Bearer {tokens['worker-617'][:-1]}",
                  f"Bearer {tokens['worker-617']}x", f"bearer {tokens['worker-617']}", f"Bearer  {tokens['worker-617']}",
                  f"Bearer {tokens['worker-617']} ", "Bearer \udcff"):
        assert owner(wrong) is None, wrong
    assert not BearerTokens({}) and owners


def test_a_tokens_file_is_checked_before_the_server_starts(tmp_path):
    from skyrl_gym.cli.serve_env import read_tokens_file
    from skyrl_gym.remote.server import check_client_tokens

    path = tmp_path / "tokens.json"
    for content, message in (("[1]", "JSON object of client name -> token"), ("{", "not JSON"),
                             ('{"a": "short"}', "at least 16 characters"),
                             ('{"a": "%s", "b": "%s"}' % ("x" * 16, "x" * 16), "the same token")):
        path.write_text(content)
        with pytest.raises(ValueError, match=message):
            read_tokens_file(str(path))
    with pytest.raises(ValueError, match="cannot read it"):
        read_tokens_file(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="'default' is the single token's"):
        check_client_tokens({"default": "y" * 16}, "z" * 16)
    assert check_client_tokens({"a": "y" * 16}, "z" * 16) == {"a": "y" * 16, "default": "z" * 16}
    from skyrl_gym.cli import main

    path.write_text('{"a": "short"}')
    assert main(["serve-env", "--port", "0", "--tokens-file", str(path)]) == 2  # said, and nothing served


def test_what_an_operator_gets_wrong_in_its_files_is_said_at_start(tmp_path, monkeypatch, capsys):
    """From a new operator's cold run: an empty tokens file was "not a JSON object"; one others could read, a
    --token beside --tokens-file (told to use the variable, which is then not read) and a data folder that does
    not exist (every client then read "database file not found" as its row's fault) said nothing useful."""
    from skyrl_gym.cli import main
    from skyrl_gym.cli.serve_env import missing_paths, read_tokens_file

    path = tmp_path / "tokens.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match="it names no client: give each client a name and a token of its own"):
        read_tokens_file(str(path))
    path.write_text('{"worker-a": "%s"}' % ("a" * 24))
    path.chmod(0o644)
    assert read_tokens_file(str(path)) == {"worker-a": "a" * 24}
    assert f"can be read by other users of this machine (mode 644): chmod 600 {path}" in capsys.readouterr().err
    path.chmod(0o600)
    read_tokens_file(str(path))
    assert "other users" not in capsys.readouterr().err
    assert main(["serve-env", "--port", "0", "--tokens-file", str(path), "--token", "d" * 24,
                 "--max-sessions", "0"]) == 2
    said = capsys.readouterr().err
    assert 'give the client "default" its token in the file instead' in said and "set SKYRL_GYM" not in said
    operator = {"text2sql": {"db_path": str(tmp_path / "no-such-folder")}, "gsm8k": {}}
    assert missing_paths(operator, None) == [("text2sql", "db_path", str(tmp_path / "no-such-folder"))]
    assert missing_paths(operator, ["gsm8k"]) == []
    operator["text2sql"]["db_path"] = str(tmp_path)
    assert missing_paths(operator, ["text2sql"]) == []


def test_each_client_holds_at_most_its_share_of_the_byte_budget():
    """With tokens of their own, one client spread its rows and steps over many small sessions, each within the
    per-session share, filled --max-held-bytes and the other client's steps and creates were 503s (a review). Each
    client now holds at most the budget over the clients."""
    megabyte = 1024 * 1024
    tokens = {"worker-a": "a" * 24, "worker-b": "b" * 24}
    url, stop = _in_process_server(client_tokens=tokens, max_sessions=40, max_body_bytes=megabyte,
                                   max_session_bytes=megabyte, max_held_bytes=4 * megabyte)
    a, b = ({"Authorization": f"Bearer {tokens[name]}"} for name in ("worker-a", "worker-b"))
    try:
        victim = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID}, headers=a, timeout=30
                               ).json()["session_id"]
        row = {**GSM8K_ROW, "junk": "j" * (megabyte // 2)}
        answers = [requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID, "extras": row}, headers=b,
                                 timeout=30) for _ in range(5)]
        assert [r.status_code for r in answers] == [200, 200, 200, 503, 503]  # 2 MB: its half of 4
        assert "client 'worker-b' holds" in answers[3].json()["error"] and "its share" in answers[3].json()["error"]
        step = requests.post(f"{url}/sessions/{victim}/step", json={"action": "a" * (megabyte // 2)}, headers=a,
                             timeout=30)
        assert step.status_code == 200, step.text[:300]
        more = requests.post(f"{url}/sessions", json={"env_id": COUNTER_ID, "extras": row}, headers=a, timeout=30)
        assert more.status_code == 200, more.text[:300]
    finally:
        stop()


def test_the_listening_line_and_the_tokens_file_options(tmp_path, monkeypatch, capsys):
    from skyrl_gym.cli import main
    from skyrl_gym.remote.server import listening_auth

    assert listening_auth(None, {"b": "x", "a": "y"}) == "a bearer token per client: a, b"
    assert listening_auth("t", {"a": "y"}) == "a bearer token per client: a, default (--token)"
    assert listening_auth("t", None) == "bearer token required" and listening_auth(None, None) == "no token"
    assert main(["serve-env", "--port", "0", "--max-sessions-per-client", "2"]) == 2
    assert "--max-sessions-per-client needs --tokens-file" in capsys.readouterr().err
    path = tmp_path / "tokens.json"
    path.write_text('{"worker-a": "%s"}' % ("a" * 24))
    monkeypatch.setenv("SKYRL_GYM_ENV_SERVICE_TOKEN", "the-old-shared-token")
    assert main(["serve-env", "--port", "0", "--tokens-file", str(path), "--max-sessions", "0"]) == 2
    assert "with --tokens-file, $SKYRL_GYM_ENV_SERVICE_TOKEN is not read" in capsys.readouterr().err


@pytest.mark.parametrize("field", ["session_id", "request_id"])
def test_an_id_is_matched_whole_a_trailing_newline_included(service, field):
    """``^...$`` matched "nl\\n" (``$`` matches before a final newline): such an id reached the logs and the keys."""
    body = {"env_id": "gsm8k", "extras": GSM8K_ROW, field: "nl\n"}
    refused = requests.post(service.url + "/sessions", json=body, timeout=60)
    if field == "request_id":  # a create takes no request_id: the id goes to an init instead
        session = requests.post(service.url + "/sessions", json={"env_id": "gsm8k", "extras": GSM8K_ROW},
                                timeout=60).json()["session_id"]
        refused = requests.post(f"{service.url}/sessions/{session}/init", json={field: "nl\n"}, timeout=60)
    assert refused.status_code == 422 and f"{field} must be 1-128 characters" in refused.text, refused.text[:300]


def test_a_judged_row_played_through_make_remote_is_judged_by_the_server_alone(service, monkeypatch):
    """make("remote", extras=<a judged row>) also wrapped the client's env in a judge: a client with no judge of its
    own failed (no judge endpoint configured) while the server's session had one, and a client with one judged
    each episode twice."""
    from skyrl_gym.remote.client import RemoteEnv

    for name in ("SKYRL_GYM_JUDGE_URL", "SKYRL_GYM_JUDGE_API_KEY", "SKYRL_GYM_JUDGE_MODEL"):
        monkeypatch.delenv(name, raising=False)  # this client has no judge
    extras = {"max_turns": 1, "reward_spec": {"method": "judge", "ground_truth": "good"}}
    env = skyrl_gym.make("remote", url=service.url, env_id=COUNTER_ID, extras=extras)
    try:
        assert type(env) is RemoteEnv
        env.init([])
        output = env.step("an answer")
        assert "judge" in output["metadata"], output  # the server's judge scored it
    finally:
        env.close()


def test_serve_env_holds_the_connections_max_connections_gives(capsys):
    """``--max-connections``: the listener closes the idle connection open longest for a new one past it (and the
    per-client share of requests under way is reckoned from it); below 2 it is refused before anything is served."""
    import socket

    from skyrl_gym.cli import main

    with env_service("--max-connections", "3") as service:
        host, port = service.url.rsplit("//", 1)[1].rsplit(":", 1)
        held = []
        for _ in range(3):  # idle, oldest first
            held.append(socket.create_connection((host, int(port)), timeout=10))
            time.sleep(0.1)
        assert service.health()["status"] == "ok"  # a fourth connection
        assert held[0].recv(100) == b""  # the longest idle one was closed for it (at the default 4,096, it stays)
        for sock in held:
            sock.close()
    assert main(["serve-env", "--port", "0", "--max-connections", "1"]) == 2
    assert "--max-connections >= 2" in capsys.readouterr().err
