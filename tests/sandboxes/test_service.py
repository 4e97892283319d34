"""``skygym-sandboxes serve`` as a real HTTP server on 127.0.0.1, spoken to as SandboxFusion and through
the ``remote`` backend."""

from __future__ import annotations

import base64
import concurrent.futures
import http.server
import json
import socket
import struct
import threading
import time
from typing import List

import pytest
import requests

from skygym_sandboxes import Limits, RunRequest, Status, get_sandbox, origins, remote
from skygym_sandboxes.remote import RemoteSandbox, result_from_response
from tests.sandboxes.remote_support import free_port, start_server


@pytest.fixture(scope="module")
def served():
    box = start_server(Limits(wall_s=5, cpu_s=5), max_concurrency=2)
    yield box
    box.close()
    assert box.server.returncode is not None  # the server stopped on SIGTERM


def test_health(served):
    health = requests.get(f"{served.url}/health", timeout=5).json()
    assert (
        health["status"] == "ok"
        and health["backend"] == "local-bwrap-warm"
        and health["max_concurrency"] == 2
    )


def test_sandboxfusion_request_and_response_shape(served):
    body = {
        "code": "import sys\nprint(open('data.txt').read() + sys.stdin.read())",
        "language": "python",
        "stdin": "!",
        "compile_timeout": 10,
        "run_timeout": 5,
        "memory_limit_MB": -1,
        "files": {"data.txt": base64.b64encode(b"hello").decode()},
        "fetch_files": ["data.txt"],
    }
    data = requests.post(f"{served.url}/run_code", json=body, timeout=30).json()
    assert data["status"] == "Success" and data["compile_result"] is None
    run = data["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 0 and run["stdout"] == "hello!\n"
    assert run["stderr"] == "" and run["execution_time"] > 0
    assert data["files"] == {"data.txt": base64.b64encode(b"hello").decode()}


def test_failures_map_to_sandboxfusion_statuses(served):
    def post(**body):
        return requests.post(f"{served.url}/run_code", json={"language": "python", **body}, timeout=30).json()

    failed = post(code="raise SystemExit(2)")
    assert failed["status"] == "Failed" and failed["run_result"]["status"] == "Finished"
    assert failed["run_result"]["return_code"] == 2
    slow = post(code="import time\ntime.sleep(10)", run_timeout=0.5)
    assert slow["status"] == "Failed" and slow["run_result"]["status"] == "TimeLimitExceeded"
    bash = post(code="echo $((6 * 7))", language="bash")
    assert bash["run_result"]["stdout"] == "42\n"


def test_bad_requests_get_4xx_with_a_reason(served):
    response = requests.post(
        f"{served.url}/run_code", json={"code": "print(1)", "language": "cobol"}, timeout=10
    )
    assert response.status_code == 422 and "cobol" in response.json()["message"]
    response = requests.post(f"{served.url}/run_code", json={"code": 5}, timeout=10)
    assert response.status_code == 422 and "code must be a string" in response.json()["message"]
    response = requests.post(f"{served.url}/run_code", data=b"{not json", timeout=10)
    assert response.status_code == 400


def test_remote_backend_round_trip_and_concurrency_limit(served):
    result = served.run(RunRequest(code="print(input() * 2)", stdin="ab"))
    assert result.status == Status.OK and result.stdout == "abab\n"
    assert served.run(RunRequest(command=["sh", "-c", "exit 3"])).exit_code == 3
    # Four 0.5 s programs through a service that runs 2 at a time take at least two rounds.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(served.run, ["import time\ntime.sleep(0.5)\nprint('z')"] * 4))
    assert [r.stdout for r in results] == ["z\n"] * 4
    assert requests.get(f"{served.url}/health", timeout=5).json()["served"] >= 4


def test_unreachable_service_gives_a_sandbox_error():
    box = get_sandbox("remote", url=f"http://127.0.0.1:{free_port()}")
    try:
        result = box.run("print(1)")
        assert result.status == Status.SANDBOX_ERROR and "could not reach" in result.message
    finally:
        box.close()


class _DropsItsSecondRun(http.server.BaseHTTPRequestHandler):
    """A service whose kept-alive connection closes as the next run arrives on it, as a server's idle time-out
    closes one just as the client reuses it; a new connection is answered."""

    protocol_version = "HTTP/1.1"
    runs_seen: List[str] = []

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # /health: no ceilings listed, as SandboxFusion
        self._answer({})

    def do_POST(self) -> None:
        code = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["code"]
        type(self).runs_seen.append(code)
        if getattr(self, "answered_a_run", False):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True  # a reset, with nothing answered
            return
        self.answered_a_run = True
        stdout = code.split("'")[1] + "\n"
        self._answer({"status": "Success", "run_result": {"status": "Finished", "return_code": 0, "stdout": stdout}})

    def _answer(self, data) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.mark.parametrize("retries", [1, 0], ids=["sent-again", "without-the-retry"])
def test_a_run_whose_kept_alive_connection_drops_is_sent_again_on_a_new_one(retries, monkeypatch):
    monkeypatch.setattr(remote, "DROPPED_CONNECTION_RETRIES", retries)
    _DropsItsSecondRun.runs_seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DropsItsSecondRun)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    box = RemoteSandbox(url=f"http://127.0.0.1:{server.server_port}")
    try:
        assert box.run("print('one')").stdout == "one\n"
        second = box.run("print('two')")
    finally:
        box.close()
        server.shutdown()
        server.server_close()
    if retries:
        assert second.status == Status.OK and second.stdout == "two\n", second
        assert _DropsItsSecondRun.runs_seen == ["print('one')", "print('two')", "print('two')"]
    else:  # what the CI run met: the reward's run lost to the race, as a sandbox error
        assert second.status == Status.SANDBOX_ERROR and "could not reach" in second.message, second


def test_plain_sandboxfusion_responses_are_understood():
    timeout = {
        "status": "Failed",
        "message": "",
        "run_result": {
            "status": "TimeLimitExceeded",
            "execution_time": 1.0,
            "return_code": None,
            "stdout": "",
            "stderr": "",
        },
    }
    assert result_from_response(timeout).status == Status.TIMEOUT
    ok = {
        "status": "Success",
        "run_result": {"status": "Finished", "return_code": 0, "stdout": "1\n", "stderr": ""},
    }
    assert result_from_response(ok).stdout == "1\n"
    assert result_from_response({"status": "SandboxError", "message": "x"}).status == Status.SANDBOX_ERROR
    assert isinstance(get_sandbox("remote"), RemoteSandbox)


def test_the_service_never_runs_more_than_max_concurrency_programs(served):
    seen_running = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen_running.append(requests.get(f"{served.url}/health", timeout=5).json()["running"])
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            results = list(pool.map(served.run, ["import time\ntime.sleep(1)"] * 5))
    finally:
        done.set()
        watcher.join()
    assert all(r.status == Status.OK for r in results)
    assert max(seen_running) == 2  # the service's --max-concurrency, reached and never passed



@pytest.mark.parametrize("url", [
    "http://evil.example:9\\@127.0.0.1:8080",  # requests: evil.example; urllib.parse: 127.0.0.1
    "http://user@127.0.0.1:8080",
    "http://127.0.0.1:8080\t/run",
    "http://127.0.0.1 :8080",
    "http://127.0.0.1:8080\x00",
    "http://127.0.0.1:80x0",
])
def test_a_url_that_clients_may_read_as_another_host_is_no_ones_origin(url, monkeypatch):
    """Every token (sandbox service, serve-env, retriever) is bound to the operator's origin; a URL that
    urllib.parse and the HTTP client read as different hosts must not match it."""
    assert origins.origin(url) is None and not origins.same_origin(url, "http://127.0.0.1:8080")
    monkeypatch.setenv("SOME_TOKEN", "secret")
    monkeypatch.setenv("SOME_URL", "http://127.0.0.1:8080")
    token, hint = origins.bound_token(url, "SOME_TOKEN", "SOME_URL")
    assert token is None and "$SOME_TOKEN is sent only to $SOME_URL" in hint and repr(url) in hint


def test_the_same_origin_spelled_otherwise_still_gets_its_token(monkeypatch):
    monkeypatch.setenv("SOME_TOKEN", "secret")
    monkeypatch.setenv("SOME_URL", "http://127.0.0.1:8080")
    for url in ("http://127.0.0.1:8080/run_code", "HTTP://127.0.0.1:8080", "http://127.0.0.1:8080/?q=a@b"):
        assert origins.bound_token(url, "SOME_TOKEN", "SOME_URL") == ("secret", ""), url
    assert origins.same_origin("https://h.example/v1", "https://H.example:443")
    assert not origins.same_origin("http://127.0.0.1:8081", "http://127.0.0.1:8080")


def test_a_servers_token_on_the_command_line_is_warned_of(capsys, monkeypatch):
    """`serve-env --token sekret` showed the token to every local user in `ps` (an attacker's pass): the three
    servers take it from their environment variable, and warn when it comes on the command line."""
    from skygym_sandboxes.origins import server_token

    monkeypatch.setenv("SKYRL_GYM_TEST_TOKEN", "from-env")
    assert server_token(None, "SKYRL_GYM_TEST_TOKEN") == "from-env"
    assert capsys.readouterr().err == ""
    assert server_token("on-the-line", "SKYRL_GYM_TEST_TOKEN") == "on-the-line"
    assert "--token is visible to every user of this machine" in capsys.readouterr().err
    monkeypatch.delenv("SKYRL_GYM_TEST_TOKEN")
    assert server_token("", "SKYRL_GYM_TEST_TOKEN") is None
