"""The clients of the retriever and of the sandbox service read at most a cap of an answer: a hostile or broken
server that answers with gigabytes would otherwise fill the trainer's memory (an attacker's pass found both
reading whole answers). A real HTTP server sends the answers."""

from __future__ import annotations

import asyncio
import http.server
import threading
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
