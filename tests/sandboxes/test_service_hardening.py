"""The service as an attacker meets it: a real ``skygym-sandboxes serve`` on 127.0.0.1 fed malformed
bodies, hostile limits, rejected files, duplicate fetches, clients that vanish, floods, and (off
loopback) requests without the token."""

from __future__ import annotations

import base64
import concurrent.futures
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
import requests

from skygym_sandboxes import Limits, Status
from skygym_sandboxes.remote import RemoteSandbox
from tests.sandboxes.remote_support import (
    REPO,
    assert_slow_clients_cut_off,
    free_port,
    peak_rss_mib,
    HeldParse,
    post_chunked,
    start_in_thread,
    start_server,
)

pytestmark = pytest.mark.slow
MAX_BODY = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def served():
    box = start_server(
        Limits(wall_s=5, cpu_s=5, output_bytes=100_000),
        max_concurrency=2,
        extra_args=["--output-bytes", "100000", "--max-body-bytes", str(MAX_BODY), "--client-timeout", "1"],
    )
    yield box
    box.close()


def post(served, body, **kwargs):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(
        f"{served.url}/run_code", data=data, headers={"Content-Type": "application/json"}, timeout=30, **kwargs
    )


def wait_for(condition, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def assert_still_serving(served) -> None:
    result = served.run("print('still here')")
    assert result.stdout == "still here\n", result


MALFORMED = [
    ("[]", "JSON object"),
    ('"code"', "JSON object"),
    ({"code": "1", "files": [1]}, "files"),
    ({"code": "1", "files": {"a": 5}}, "files"),
    ({"code": "1", "files": {"a": "not base64!"}}, "files"),
    ({"code": "1", "files": {"../a": ""}}, "relative path"),
    ({"code": "1", "files": {"/etc/x": ""}}, "relative path"),
    ({"code": "1", "fetch_files": "out.txt"}, "fetch_files"),
    ({"code": "1", "fetch_files": [1]}, "fetch_files"),
    ({"code": "1", "stdin": 5}, "stdin"),
    ({"code": "1", "argv": [1]}, "argv"),
    ({"command": "ls"}, "command"),
    ({"command": []}, "command"),
    ({"code": None}, "code"),
    ({"code": "1", "language": "cobol"}, "cobol"),
    ({"code": "1", "limits": "fast"}, "limits"),
    ({"code": "1", "limits": {"wall_s": "fast"}}, "wall_s"),
    ({"code": "1", "limits": {"walltime": 1}}, "walltime"),
    ({"code": "1", "limits": {"wall_s": -1}}, "wall_s"),
    ('{"code": "1", "limits": {"wall_s": NaN}}', "wall_s"),
    ('{"code": "1", "limits": {"wall_s": Infinity}}', "wall_s"),
    ('{"code": "1", "run_timeout": -Infinity}', "run_timeout"),
    ({"code": "1", "run_timeout": "10"}, "run_timeout"),
    ({"code": "1", "memory_limit_MB": "lots"}, "memory_limit_MB"),
    ({"code": "1", "fetch_files": [f"f{i}" for i in range(65)]}, "at most 64"),
    # refused at the 65th name: 40,000 were compared one by one for 43 s, the service's body parsers held meanwhile
    ({"code": "1", "fetch_files": [f"f{i}" for i in range(40_000)]}, "at most 64"),
    ({"code": "1", "fetch_files": ["a.txt"] * 40_000}, "at most 64"),
    ({"code": "1", "files": {f"f{i}": "" for i in range(1025)}}, "at most 1024 may be written"),
    # 400-digit integers: valid JSON no float holds (float() raised OverflowError, a 500)
    ('{"code": "1", "limits": {"wall_s": 1%s}}' % ("0" * 400), "limits.wall_s"),
    ('{"code": "1", "limits": {"memory_mb": -1%s}}' % ("0" * 400), "limits.memory_mb"),
    ('{"code": "1", "run_timeout": 1%s}' % ("0" * 400), "run_timeout"),
    ('{"code": "1", "memory_limit_MB": 1%s}' % ("0" * 400), "memory_limit_MB"),
]


@pytest.mark.parametrize("body,reason", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_bodies_get_4xx_with_the_reason(served, body, reason):
    response = post(served, body)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert reason in response.json()["message"], response.json()


def test_broken_json_is_400_and_the_service_keeps_serving(served):
    for raw in (b"{not json", b"\xff\xfe", b"", b"{" * 100000):
        response = post(served, raw)
        assert response.status_code == 400, (raw[:10], response.status_code, response.text[:200])
    assert_still_serving(served)


def test_null_limits_mean_the_service_defaults_never_no_limit(served):
    flood = "import sys\nsys.stdout.write('x' * 1_000_000)"
    for limits in (None, {"output_bytes": None, "wall_s": None}):
        data = post(served, {"code": flood, "limits": limits, "run_timeout": None, "memory_limit_MB": None}).json()
        assert data["sandbox"]["status"] == "output_limit", data["sandbox"]
        assert len(data["run_result"]["stdout"]) == 100_000


@pytest.mark.parametrize(
    "body,key",
    [
        ({"limits": {"wall_s": 6}}, "limits.wall_s"),
        ({"limits": {"cpu_s": 1e10}}, "limits.cpu_s"),
        ({"limits": {"memory_mb": 1025}}, "limits.memory_mb"),
        ({"limits": {"processes": 65}}, "limits.processes"),
        ({"limits": {"output_bytes": 100_001}}, "limits.output_bytes"),
        ({"run_timeout": 5.5}, "run_timeout"),
        ({"memory_limit_MB": 4096}, "memory_limit_MB"),
    ],
)
def test_the_operators_limits_are_ceilings_a_request_cannot_raise(served, body, key):
    """The service runs with --wall-s 5 --output-bytes 100000 (and the default 1024 MB, 64 processes): a
    request asking for more is refused with a 422 naming the key, never run with more."""
    response = post(served, {"code": "print('ran')", **body})
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert key in message and "never raise" in message, message


def test_a_request_may_lower_the_limits_and_replies_stay_paired(served):
    markers = [uuid.uuid4().hex for _ in range(8)]

    def one(index: int):
        limits = {"wall_s": 2, "cpu_s": 2} if index % 2 else {"output_bytes": 1000}
        return post(served, {"code": f"print({markers[index]!r})", "limits": limits}).json()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(one, range(len(markers))))
    assert [reply["run_result"]["stdout"] for reply in replies] == [m + "\n" for m in markers]
    lowered = post(served, {"code": "print('x' * 5000)", "limits": {"output_bytes": 100}}).json()
    assert lowered["sandbox"]["status"] == "output_limit" and len(lowered["run_result"]["stdout"]) == 100


def test_responses_carry_output_and_files_once(served):
    big = "".join(uuid.uuid4().hex for _ in range(1500))  # 48 kB that repeats nowhere
    code = f"print({big!r})\nopen('out.txt', 'w').write({big!r})"
    raw = post(served, {"code": code, "fetch_files": ["out.txt"]}).content
    assert raw.count(big.encode()) == 1  # stdout once (it was twice: run_result and sandbox)
    assert raw.count(base64.b64encode(big.encode())) == 1  # the file once
    result = served.run(code)  # the remote backend puts the typed result back together
    assert result.stdout == big + "\n" and result.status == Status.OK


def test_bodies_are_limited_while_they_stream_chunked_ones_too(served):
    port = int(served.url.rsplit(":", 1)[1])
    declared = post(served, b" " * (MAX_BODY + 1))  # Content-Length over the limit: refused before reading
    assert declared.status_code == 413, declared.text
    before = peak_rss_mib(served.server.pid)
    assert post_chunked(port, "/run_code", 300 * 1024 * 1024) == 413
    grown = peak_rss_mib(served.server.pid) - before
    assert grown < 64, f"a 300 MiB chunked body took the service's peak memory up {grown:.0f} MiB (limit: 4)"
    assert_still_serving(served)


def test_a_lone_surrogate_is_a_400_not_a_broken_worker(served):
    """`"stdin": "\\ud800"` (JSON can say it; UTF-8 cannot) raised in the worker as it encoded the run: the worker
    was torn down and respawned, and the client got a 200 SandboxError."""
    for field, value in (("stdin", '"a\\ud800"'), ("code", '"print(\\udfff)"'), ("argv", '["\\ud83d"]')):
        raw = '{"code": "print(1)", "' + field + '": ' + value + "}"
        response = post(served, raw)
        assert response.status_code == 400, (field, response.status_code, response.text[:200])
        assert "lone surrogate" in response.json()["message"], response.json()
    response = post(served, {"code": "print(input())", "stdin": "\U0001F600 fine"})  # a whole pair is text
    assert response.status_code == 200 and response.json()["run_result"]["stdout"] == "\U0001F600 fine\n"
    assert_still_serving(served)


def test_slow_clients_are_cut_off_and_others_still_served(served):
    """Slowloris: uvicorn alone kept an idle connection, a half-sent head and a half-sent body open forever
    (each holding a file descriptor); with --client-timeout 1 each is closed, the body with a 408."""
    assert_slow_clients_cut_off(int(served.url.rsplit(":", 1)[1]), "/run_code")
    assert_still_serving(served)


def test_a_100000_deep_body_is_a_400_naming_the_nesting(served):
    for field in ("files", "argv", "limits"):
        raw = '{"code": "1", "' + field + '": ' + "[" * 100_000 + "]" * 100_000 + "}"
        response = post(served, raw)
        assert response.status_code == 400, (field, response.status_code, response.text[:200])
        assert "nests" in response.json()["message"], response.json()
    deep_but_parsable = '{"code": "1", "argv": ' + "[" * 500 + "]" * 500 + "}"
    response = post(served, deep_but_parsable)
    assert response.status_code == 400 and "levels deep" in response.json()["message"]
    assert_still_serving(served)


def test_files_of_a_rejected_or_failed_request_never_reach_a_later_run(served):
    secret = base64.b64encode(b"left behind").decode()
    assert post(served, {"code": "1", "files": {"leak.txt": secret}, "limits": {"wall_s": "x"}}).status_code == 422
    # Accepted, but it cannot be prepared: "a" is a file, so "a/b" cannot be written.
    failed = post(served, {"code": "1", "files": {"leak.txt": secret, "a": secret, "a/b": secret}}).json()
    assert failed["status"] == "SandboxError", failed
    for _ in range(3):
        seen = served.run("import os\nprint(sorted(os.listdir('.')), os.listdir('/tmp'))")
        assert seen.stdout == "['main.py'] []\n", seen


def test_fetch_files_are_normalised_and_capped(served):
    code = "open('out.txt', 'w').write('y' * 200_000)\nimport os\nos.mkdir('d')\nopen('d/z', 'w').write('z')"
    spellings = ["out.txt", "./out.txt", ".//out.txt", "out.txt/.", "out.txt//", "d/z", "d//z", "./d/./z"]
    data = post(served, {"code": code, "fetch_files": spellings}).json()
    assert data["status"] == "Success", data
    assert sorted(data["files"]) == ["d/z", "out.txt"]
    assert len(base64.b64decode(data["files"]["out.txt"])) == 100_000  # cut to the output limit


def test_a_client_that_disconnects_frees_its_slot(served):
    def health():
        return requests.get(f"{served.url}/health", timeout=5).json()

    cancelled_before = health()["cancelled"]
    body = json.dumps({"code": "import time\ntime.sleep(60)"}).encode()
    port = int(served.url.rsplit(":", 1)[1])
    clients = []
    for _ in range(2):  # both slots of a service that runs 2 at a time
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(
            b"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        clients.append(client)
    assert wait_for(lambda: health()["running"] == 2), health()
    for client in clients:
        client.close()
    assert wait_for(lambda: health()["running"] == 0 and health()["cancelled"] >= cancelled_before + 2), health()
    result = served.run("print('slot free')")
    assert result.status == Status.OK and result.stdout == "slot free\n", result


def test_a_full_queue_answers_429():
    """With one run at a time and ``--max-queue 1``, a request past the one running and the one waiting is a 429,
    and the waiting one is still served. The run is held until its client goes away (four 1.5 s runs posted at once
    raced a loaded machine: the posts could arrive one after another, each once the last had finished)."""
    box = start_server(Limits(wall_s=600, cpu_s=10), max_concurrency=1, extra_args=["--max-queue", "1"])

    def health():
        return requests.get(f"{box.url}/health", timeout=30).json()

    port = int(box.url.rsplit(":", 1)[1])
    body = json.dumps({"code": "import time\ntime.sleep(600)"}).encode()
    running = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        running.sendall(
            b"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert wait_for(lambda: health()["running"] == 1, 60), health()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(requests.post, f"{box.url}/run_code", json={"code": "print('done')"}, timeout=300)
            assert wait_for(lambda: health()["waiting"] == 1, 60), health()
            codes = [post(box, {"code": "print('refused')"}).status_code for _ in range(2)]
            assert codes == [429, 429], codes
            running.close()  # the held run is cancelled and the waiting one runs
            answer = waiting.result()
        assert answer.status_code == 200 and answer.json()["run_result"]["stdout"] == "done\n", answer.text[:300]
        assert post(box, {"code": "print(1)"}).status_code == 200
    finally:
        running.close()
        box.close()


def test_concurrency_defaults_to_the_cpu_count():
    box = start_server(Limits(wall_s=5), max_concurrency=None)
    try:
        health = requests.get(f"{box.url}/health", timeout=5).json()
        assert health["max_concurrency"] == os.cpu_count()
    finally:
        box.close()


def test_off_loopback_the_service_needs_a_token():
    refused = subprocess.run(
        [sys.executable, "-m", "skygym_sandboxes.cli", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "SKYGYM_SANDBOX_TOKEN": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "without a bearer token" in refused.stderr, refused.stderr
    token = uuid.uuid4().hex
    box = start_server(Limits(wall_s=5), host="0.0.0.0", env={"SKYGYM_SANDBOX_TOKEN": token}, token=token)
    try:
        assert box.run("print('with token')").stdout == "with token\n"
        assert post(box, {"code": "print(1)"}).status_code == 401
        wrong = requests.post(
            f"{box.url}/run_code", json={"code": "print(1)"}, headers={"Authorization": "Bearer nope"}, timeout=10
        )
        assert wrong.status_code == 401
        assert requests.get(f"{box.url}/health", timeout=5).status_code == 401
        for page in ("/docs", "/redoc", "/openapi.json"):  # FastAPI's own pages answered without the token
            assert requests.get(box.url + page, timeout=5).status_code == 404, page
    finally:
        box.close()


def test_isolation_none_needs_the_operators_explicit_flag():
    refused = subprocess.run(
        [sys.executable, "-m", "skygym_sandboxes.cli", "serve", "--port", str(free_port())]
        + ["--option", "isolation=none"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "--allow-no-isolation" in refused.stderr, refused.stderr


class _Collector(http.server.BaseHTTPRequestHandler):
    """An attacker's HTTP server: it records the Authorization header of every request it gets."""

    seen: list = []

    def _answer(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def test_the_sandbox_token_goes_only_to_the_operators_service(monkeypatch):
    token = uuid.uuid4().hex
    box = start_server(Limits(wall_s=5), env={"SKYGYM_SANDBOX_TOKEN": token}, token=token)
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("SKYGYM_SANDBOX_TOKEN", token)
        monkeypatch.setenv("SKYGYM_SANDBOX_URL", box.url)
        with RemoteSandbox(limits=Limits(wall_s=5)) as operators:  # the operator's URL: the token goes along
            assert operators.run("print('with the token')").stdout == "with the token\n"
        elsewhere = f"http://127.0.0.1:{attacker.server_address[1]}"
        with RemoteSandbox(url=elsewhere, limits=Limits(wall_s=5)) as chosen:  # a URL from a config or client
            chosen.run("print(1)")
        assert _Collector.seen and not any(_Collector.seen), _Collector.seen
        # a URL that urllib.parse reads as the operator's and requests sends to the attacker: the host ends at the
        # backslash for requests, at the `@` for urllib.parse (all three tokens went this way)
        _Collector.seen.clear()
        forged = f"{elsewhere}\\@{box.url.removeprefix('http://')}"
        with RemoteSandbox(url=forged, limits=Limits(wall_s=5)) as chosen:
            chosen.run("print(1)")
        assert _Collector.seen and not any(_Collector.seen), _Collector.seen
        with RemoteSandbox(url=box.url.replace("127.0.0.1", "localhost"), limits=Limits(wall_s=5)) as other:
            refused = other.run("print(1)")  # another spelling, another origin: no token, and the reason why
        assert refused.status == Status.SANDBOX_ERROR and "SKYGYM_SANDBOX_URL" in refused.message, refused
    finally:
        attacker.shutdown()
        attacker.server_close()
        box.close()


def test_connections_that_send_nothing_cannot_lock_clients_out():
    """The protocol every server runs under, with room for 3 connections. 4,100 connections that sent nothing
    locked every client out of all three servers (no token needed): now a new connection takes the place of the
    one that has waited longest without a request under way, and the client is answered. When every connection
    has a request under way, a new one is closed at once (its file descriptor freed). The slow requests hold until
    the extra connection has been refused (2 s ones with a 0.7 s sleep raced a loaded machine)."""
    pytest.importorskip("uvicorn", reason="the service needs fastapi and uvicorn (extra: sandbox-service)")
    import asyncio

    from fastapi import FastAPI

    under_way, released = [], threading.Event()

    async def slow() -> dict:
        under_way.append(True)
        await asyncio.to_thread(released.wait, 60)
        return {"status": "slow"}

    app = FastAPI()
    app.add_api_route("/health", lambda: {"status": "ok"}, methods=["GET"])
    app.add_api_route("/slow", slow, methods=["GET"])
    server, port, stop = _guarded_server(app, client_timeout_s=30, max_connections=3)
    try:
        held = []
        for _ in range(3):  # idle, oldest first
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            time.sleep(0.1)
        with requests.Session() as client:
            assert client.get(f"http://127.0.0.1:{port}/health", timeout=10).json() == {"status": "ok"}
        assert held[0].recv(100) == b""  # the longest idle one was closed for it, without an answer
        for sock in held:
            sock.close()
        time.sleep(0.3)  # the server counts the closed ones out
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            busy = [pool.submit(requests.get, f"http://127.0.0.1:{port}/slow", timeout=90) for _ in range(3)]
            try:
                assert wait_for(lambda: len(under_way) == 3, 60), "the three requests never got under way"
                extra = socket.create_connection(("127.0.0.1", port), timeout=10)
                assert extra.recv(100) == b""  # no connection to give way: closed at once
                extra.close()
            finally:
                released.set()
            assert [f.result().json() for f in busy] == [{"status": "slow"}] * 3  # never cut
    finally:
        released.set()
        stop()


def _guarded_server(app, client_timeout_s: float, max_connections: int, **options):
    """``app`` under uvicorn with the servers' protocol, in a thread; returns (server, port, stop)."""
    from skygym_sandboxes.http_bodies import guarded_http_protocol

    return start_in_thread(app, http=guarded_http_protocol(client_timeout_s=client_timeout_s,
                                                           max_connections=max_connections, **options))


def test_clients_that_do_not_read_their_answers_are_cut_and_cannot_lock_others_out():
    """An attacker's second pass: 40 requests for large answers, never read, held a retriever's memory (1 GB)
    past the client timeout (a closed transport waits for its buffer to drain), and pipelined requests whose
    answers nobody read kept connections "under way" for ever, locking out a client with the token. Now such a
    connection gives way at the cap and is aborted once it has not read for the client timeout; a request whose
    body never comes gives way too."""
    pytest.importorskip("uvicorn", reason="the service needs fastapi and uvicorn (extra: sandbox-service)")
    from fastapi import FastAPI, Request, Response

    big = b"x" * (16 * 1024 * 1024)
    app = FastAPI()
    app.add_api_route("/health", lambda: {"status": "ok"}, methods=["GET"])
    app.add_api_route("/big", lambda: Response(big, media_type="application/octet-stream"), methods=["GET"])

    async def echo(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    app.add_api_route("/echo", echo, methods=["POST"])
    server, port, stop = _guarded_server(app, client_timeout_s=2, max_connections=3)
    try:
        readers = []
        for _ in range(2):  # large answers, never read
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            readers.append(sock)
        stalled = socket.create_connection(("127.0.0.1", port), timeout=10)  # a body that never comes
        stalled.sendall(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n")
        time.sleep(0.5)
        with requests.Session() as client:  # at the cap: one of them gives way
            assert client.get(f"http://127.0.0.1:{port}/health", timeout=10).json() == {"status": "ok"}
        # past the client timeout every connection that did not read is gone, its answer freed
        assert wait_for(lambda: len(server.server_state.connections) == 0, timeout_s=15), \
            len(server.server_state.connections)
        for sock in [*readers, stalled]:
            sock.close()
    finally:
        stop()


def test_answers_waiting_to_be_read_are_bounded_all_connections_together():
    """Each unread answer is cut after the client timeout, but 4096 of them within one timeout would hold 100 GB
    of a retriever's answers: past the budget the answer unread longest is cut at once."""
    pytest.importorskip("uvicorn", reason="the service needs fastapi and uvicorn (extra: sandbox-service)")
    from fastapi import FastAPI, Response

    big = b"x" * (16 * 1024 * 1024)
    app = FastAPI()
    app.add_api_route("/big", lambda: Response(big, media_type="application/octet-stream"), methods=["GET"])
    server, port, stop = _guarded_server(app, client_timeout_s=60, max_connections=100,
                                         max_unsent_bytes=24 * 1024 * 1024)
    try:
        readers = []
        for _ in range(3):  # 3 answers of 16 MB, never read, against a budget of 24 MB
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            readers.append(sock)
            time.sleep(0.3)
        # long before the 60 s client timeout, only one unread answer is left
        assert wait_for(lambda: len(server.server_state.connections) == 1, timeout_s=10), \
            len(server.server_state.connections)
        for sock in readers:
            sock.close()
    finally:
        stop()


def test_requests_from_web_pages_are_refused(served):
    """Any page the operator opened could post code to the sandbox service on their machine (a text/plain POST
    needs no preflight), and one re-pointed at 127.0.0.1 could read the output: a browser's request (Origin,
    Sec-Fetch-Mode) is a 403, and this server, which has no token, answers only loopback names."""
    body = json.dumps({"code": "print('ran')"})
    port = served.url.rsplit(":", 1)[1]
    for headers in ({"Origin": "http://attacker.example", "Content-Type": "text/plain;charset=UTF-8"},
                    {"Sec-Fetch-Mode": "no-cors"}, {"Host": f"attacker.example:{port}"}):
        refused = requests.post(f"{served.url}/run_code", data=body, headers=headers, timeout=30)
        assert refused.status_code == 403 and "ran" not in refused.text, (headers, refused.text[:300])
    assert "127.0.0.1 or localhost" in refused.json()["message"]
    answer = requests.post(f"{served.url}/run_code", data=body, headers={"Host": f"localhost:{port}"}, timeout=30)
    assert answer.status_code == 200 and answer.json()["run_result"]["stdout"] == "ran\n", answer.text[:300]


def test_a_body_is_parsed_off_the_event_loop(monkeypatch):
    """The service parsed a body (and read its files) on its event loop: a body of millions of tiny files held
    every client for seconds. Here the parse of one body waits until a health check has been answered, which only
    a parse off the event loop lets happen."""
    pytest.importorskip("uvicorn", reason="the service needs fastapi and uvicorn (extra: sandbox-service)")
    from tests.sandboxes.conftest import _make_local

    from skygym_sandboxes import service

    held = HeldParse(monkeypatch, service, "parse_json_object")
    box = _make_local("local-bwrap-cold")
    try:
        _server, port, stop = start_in_thread(service.create_app(box))
    except BaseException:
        box.close()
        raise
    try:
        answer = held.post_beside_a_health_check(f"http://127.0.0.1:{port}", "/run_code",
                                                 # over BodyParsers.INLINE_BYTES (a small body is parsed at once)
                                                 {"code": "print(6 * 7)" + " " * 20_000, "language": "python"})
        assert answer.status_code == 200 and answer.json()["run_result"]["stdout"] == "42\n", answer.text[:300]
    finally:
        stop()  # the service closes the sandbox as it stops


def test_bodies_held_all_connections_together_are_bounded():
    """Bodies waited whole for a parser slot or a run, without a bound over the connections together: 12 bodies of
    40 MB took a service from 62 MB to 1.1 GB (an attacker's pass). Here the largest bodies four times over are
    held while they wait and run; one more is a 503 as it arrives, a small request still gets in, and once the
    others are answered a large one does again."""
    pytest.importorskip("uvicorn", reason="the service needs fastapi and uvicorn (extra: sandbox-service)")
    from tests.sandboxes.conftest import _make_local

    from skygym_sandboxes import service

    box = _make_local("local-bwrap-cold")
    megabyte = 1024 * 1024
    # The first run holds until the fifth body was refused (a 1.5 s run and a 0.7 s sleep raced a loaded machine:
    # the bodies could arrive late, or the runs end early)
    released, run = threading.Event(), box.run

    def held_run(request, *args, **kwargs):
        released.wait(timeout=60)
        return run(request, *args, **kwargs)

    box.run = held_run
    try:
        _server, port, stop = start_in_thread(service.create_app(box, max_concurrency=1, max_body_bytes=megabyte))
    except BaseException:
        box.close()
        raise
    url = f"http://127.0.0.1:{port}/run_code"

    def send(code):
        return requests.post(url, json={"code": code}, timeout=120)

    def health():
        return requests.get(f"http://127.0.0.1:{port}/health", timeout=30).json()

    large = "print('large')\n#" + "x" * (megabyte - 100)
    try:
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            held = [pool.submit(send, large) for _ in range(4)]
            assert wait_for(lambda: (lambda h: (h["running"], h["waiting"]) == (1, 3))(health()), 60), health()
            refused = send(large)  # the four have arrived: one runs, three wait
            assert refused.status_code == 503 and "bytes of requests' bodies" in refused.text, refused.text[:300]
            small = pool.submit(send, "print(6 * 7)")
            assert wait_for(lambda: health()["waiting"] == 4, 60), health()  # it got in beside them
            released.set()
            assert [answer.result().status_code for answer in held] == [200] * 4
            assert small.result().json()["run_result"]["stdout"] == "42\n"
        again = send(large)
        assert again.status_code == 200 and again.json()["run_result"]["stdout"] == "large\n", again.text[:300]
    finally:
        released.set()
        stop()
