"""The clients of the retriever and of the sandbox service read at most a cap of an answer: a hostile or broken
server that answers with gigabytes would otherwise fill the trainer's memory (an attacker's pass found both
reading whole answers). A real HTTP server sends the answers."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from typing import Iterator

import pytest

BIG = b'{"result": [[{"document": {"contents": "' + b"x" * (4 * 1024 * 1024) + b'"}}]]}'


class _Huge(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # http.server calls it by this name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()  # no Content-Length: the answer streams until the server closes
        try:
            self.wfile.write(BIG)
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading, as it should
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def huge_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Huge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_search_tool_reads_at_most_its_cap_of_an_answer(huge_server, monkeypatch):
    aiohttp = pytest.importorskip("aiohttp", reason="the async search path needs aiohttp (extra: search)")
    from skyrl_gym.tools import search

    monkeypatch.setattr(search, "MAX_REPLY_BYTES", 1024 * 1024)
    answer, error = search.call_search_api(huge_server + "/retrieve", "q")
    assert answer is None and "answered more than 1048576 bytes" in error, error

    async def asynchronous():
        async with aiohttp.ClientSession() as session:
            return await search.acall_search_api(huge_server + "/retrieve", "q", session)

    answer, error = asyncio.run(asynchronous())
    assert answer is None and "answered more than 1048576 bytes" in error, error
    monkeypatch.setattr(search, "MAX_REPLY_BYTES", 64 * 1024 * 1024)  # within the cap the same answer is read
    answer, error = search.call_search_api(huge_server + "/retrieve", "q")
    assert error is None and len(answer["result"][0][0]["document"]["contents"]) == 4 * 1024 * 1024


def test_the_remote_sandbox_reads_at_most_its_cap_of_an_answer(huge_server, monkeypatch):
    from skygym_sandboxes import Status, remote
    from skygym_sandboxes.remote import RemoteSandbox

    monkeypatch.setattr(remote, "MAX_REPLY_BYTES", 1024 * 1024)
    with RemoteSandbox(huge_server) as sandbox:
        result = sandbox.run("print(1)")
    assert result.status == Status.SANDBOX_ERROR and "answered more than 1048576 bytes" in result.message, result


class _Hostile(http.server.BaseHTTPRequestHandler):
    """`/trickle/...`: an answer of one byte every 0.2 s for two minutes (each read well within a socket time-out);
    `/endless/...`: a body that never ends, under the status the path names."""

    protocol_version = "HTTP/1.1"
    redirects = 0

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode, _, status = self.path.strip("/").partition("/")
        try:
            if mode == "redirect":  # to itself, with a body: requests read each hop's body whole, past every cap
                _Hostile.redirects += 1
                self.send_response(307)
                self.send_header("Location", self.path)
                self.send_header("Content-Length", "5")
                self.end_headers()
                self.wfile.write(b"moved")
            elif mode == "trickle":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "600")
                self.end_headers()
                for _ in range(600):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            else:
                self.send_response(int(status) if status.isdigit() else 200)  # /endless/health: 200
                self.send_header("Content-Type", "application/json")
                self.end_headers()  # no Content-Length: until the server closes
                while True:
                    self.wfile.write(b"x" * 65536)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up, as it should
            pass

    do_GET = do_POST = _answer  # http.server calls them by these names

    def log_message(self, *args):
        pass


@pytest.fixture
def hostile_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_server_that_trickles_its_answer_holds_no_client_past_its_deadline(hostile_server, monkeypatch):
    """`requests`' time-out starts again with every byte: the sandbox client (31 s) and the search tool (2 s) were
    still waiting after 100 s and 30 s of an answer that trickled in. Each now ends at its deadline."""
    from skygym_sandboxes import Limits, Status, remote
    from skygym_sandboxes.remote import RemoteSandbox

    from skyrl_gym.tools import search

    monkeypatch.setattr(remote, "HTTP_MARGIN_S", 1.0)
    started = time.monotonic()
    with RemoteSandbox(hostile_server + "/trickle", limits=Limits(wall_s=1), connect_timeout_s=1) as sandbox:
        result = sandbox.run("print(1)")
    assert result.status == Status.SANDBOX_ERROR and "no complete answer" in result.message, result
    assert "within 3 s" in result.message, result.message  # connecting, the wall limit and the margin
    answer, error = search.call_search_api(hostile_server + "/trickle", "q", timeout=1,
                                           retry=search.RetryPolicy(attempts=2, initial_delay_s=0.1))
    assert answer is None and "Timeout Error: no answer within 1 s on attempt 2/2" in error, error
    assert time.monotonic() - started < 60  # the answers would have trickled for two minutes each (60 s: load)


def test_endless_health_and_error_answers_are_read_to_a_cap(hostile_server):
    """`/health` and the retriever's error answers were read whole: a hostile server's endless one took the
    trainer's memory past 1.3 GB in seconds."""
    aiohttp = pytest.importorskip("aiohttp", reason="the async search path needs aiohttp (extra: search)")
    from skygym_sandboxes.remote import MAX_HEALTH_BYTES, RemoteSandbox

    from skyrl_gym.tools import search

    with RemoteSandbox(hostile_server + "/endless") as sandbox:
        with pytest.raises(ValueError, match=f"/health answered more than {MAX_HEALTH_BYTES} bytes"):
            sandbox.health()

    async def asynchronous():
        async with aiohttp.ClientSession() as session:
            return await search.acall_search_api(hostile_server + "/endless/400", "q", session)

    answer, error = asyncio.run(asynchronous())
    assert answer is None and error == "API Request Error: HTTP 400: (longer than the cap)", error
    answer, error = search.call_search_api(hostile_server + "/endless/400", "q")
    assert answer is None and "answered more than" in error, error


def test_no_client_follows_a_redirect(hostile_server):
    """requests follows up to 30 redirects and reads each one's body whole, decompressed, before the next hop, where
    no cap reaches: 20 KB gzip bodies took the sandbox client to 7.2 GB (an attacker's second pass). The clients
    now take a 3xx as the answer, say so, and never send a second request."""
    from skygym_sandboxes import Status
    from skygym_sandboxes.remote import RemoteSandbox

    from skyrl_gym.remote.client import RemoteEnv, RemoteEnvError
    from skyrl_gym.tools import search

    _Hostile.redirects = 0
    with RemoteSandbox(hostile_server + "/redirect") as sandbox:
        result = sandbox.run("print(1)")
        with pytest.raises(ValueError, match="answered HTTP 307"):
            sandbox.health()
    assert result.status == Status.SANDBOX_ERROR and "redirects are not followed" in result.message, result
    answer, error = search.call_search_api(hostile_server + "/redirect", "q")
    assert answer is None and "HTTP 307 (redirects are not followed" in error, error
    with pytest.raises(RemoteEnvError, match="307"):
        RemoteEnv(url=hostile_server + "/redirect", env_id="gsm8k", attempts=1).init([])
    assert _Hostile.redirects == 5  # run, /health twice (the run reads it first), search, create: one request each


def test_a_late_cut_never_reaches_the_next_request_on_the_same_connection():
    """The watchdog took an attempt's connections under its lock and shut them after: under load its thread was
    descheduled in between, the cut connection went back to the pool and connected again for the next request,
    and the late shut cut that request after its first byte (CI: 'IncompleteRead(1 bytes read)'). It shuts the
    sockets the attempt had."""
    import socket
    import threading

    from skygym_sandboxes.http_deadlines import AttemptDeadline

    cut_one, its_peer = socket.socketpair()
    next_one, next_peer = socket.socketpair()
    connection = type("Connection", (), {})()
    connection.sock = cut_one
    watchdog = AttemptDeadline(60)

    class ReconnectsOnRelease:  # the lock's release is where the watchdog's thread was descheduled
        def __init__(self):
            self.lock = threading.Lock()

        def __enter__(self):
            self.lock.acquire()

        def __exit__(self, *exc):
            self.lock.release()
            connection.sock = next_one  # meanwhile: back in the pool, connected again for the next request

    with watchdog:
        watchdog.watch(connection)
        watchdog._lock = ReconnectsOnRelease()
        watchdog.expire()
    next_peer.sendall(b"answer")
    assert next_one.recv(16) == b"answer"  # the next request's socket still reads
    assert cut_one.recv(16) == b""  # the cut attempt's was shut
    for sock in (cut_one, its_peer, next_one, next_peer):
        sock.close()
