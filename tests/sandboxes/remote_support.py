"""Start a real ``skygym-sandboxes serve`` process on 127.0.0.1 for the remote backend's tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import pytest
import requests

from skygym_sandboxes import Limits
from skygym_sandboxes.remote import RemoteSandbox

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_in_thread(app: Any, http: Any = None) -> Tuple[Any, int, Callable[[], None]]:
    """``app`` served by uvicorn on a free port in a thread of this process (so that what a test patches or
    registers here reaches it), with the ``http`` protocol class where given; returns ``(server, port, stop)``."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    if http is not None:
        config.http = http
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # only stops a broken test from hanging
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start within 30 s"

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=30)

    return server, config.port, stop


def serve_in_thread(app: Any, http: Any = None) -> Tuple[str, Callable[[], None]]:
    """:func:`start_in_thread`, as ``(url, stop)``."""
    _server, port, stop = start_in_thread(app, http)
    return f"http://127.0.0.1:{port}", stop


class HeldParse:
    """Makes ``module.name`` (what a server calls to parse or check a request's body) wait until a health check
    has been answered: only a server that parses bodies off its event loop can answer one meanwhile. Set it up
    before the app is made (a server may bind the name then)."""

    def __init__(self, monkeypatch: Any, module: Any, name: str) -> None:
        self.parsing, self.answered = threading.Event(), threading.Event()
        real = getattr(module, name)

        def held(*args: Any) -> Any:
            self.parsing.set()
            assert self.answered.wait(30), "the health check was not answered while a body was being parsed"
            return real(*args)

        monkeypatch.setattr(module, name, held)

    def post_beside_a_health_check(self, url: str, path: str, body: Any) -> requests.Response:
        """POST ``body`` to ``url + path``; while its body is held, GET ``/health``, which must answer; returns the
        POST's answer."""
        results: list = []
        sent = threading.Thread(target=lambda: results.append(requests.post(url + path, json=body, timeout=60)))
        sent.start()
        try:
            assert self.parsing.wait(30), "the server never parsed the body"
            health = requests.get(f"{url}/health", timeout=20)
        finally:
            self.answered.set()
            sent.join(60)
        assert health.status_code == 200, health.text[:300]
        assert results, "the request got no answer"
        return results[0]


class ServedSandbox(RemoteSandbox):
    """A remote sandbox that owns the server it talks to, and stops it on close."""

    def __init__(self, server: subprocess.Popen, url: str, limits: Limits, token: Optional[str] = None) -> None:
        super().__init__(url=url, limits=limits, token=token)
        self.server = server

    def close(self) -> None:
        super().close()
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)  # clean shutdown: uvicorn stops, the sandbox closes
            try:
                self.server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()


def start_server(
    limits: Limits,
    max_concurrency: Optional[int] = 2,
    extra_args: Sequence[str] = (),
    env: Optional[Dict[str, str]] = None,
    token: Optional[str] = None,
    host: str = "127.0.0.1",
) -> ServedSandbox:
    """A real ``skygym-sandboxes serve`` on ``host`` (a free port), healthy before this returns."""
    pytest.importorskip("fastapi", reason="the service needs fastapi and uvicorn (extra: sandbox-service)")
    pytest.importorskip("uvicorn", reason="the service needs fastapi and uvicorn (extra: sandbox-service)")
    if not shutil.which("bwrap"):
        pytest.skip("the service under test uses the local bubblewrap backend, which is not installed")
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "skygym_sandboxes.cli",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
        *(["--max-concurrency", str(max_concurrency)] if max_concurrency else []),
        *extra_args,
        "--wall-s",
        str(limits.wall_s),
        "--cpu-s",
        str(limits.cpu_s),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    server = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            output = server.stdout.read().decode("utf-8", "replace") if server.stdout else ""
            raise RuntimeError(f"skygym-sandboxes serve exited with {server.returncode}: {output[-2000:]}")
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            if requests.get(f"{url}/health", timeout=1, headers=headers).status_code == 200:
                return ServedSandbox(server, url, limits, token=token)
        except requests.RequestException:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("skygym-sandboxes serve did not become healthy within 60 s")


def make_remote_sandbox(limits: Limits) -> ServedSandbox:
    return start_server(limits)


def peak_rss_mib(pid: int) -> float:
    """The most memory process ``pid`` has held so far (VmHWM), in MiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def post_chunked(port: int, path: str, total_bytes: int, headers: Sequence[str] = ()) -> int:
    """POST ``total_bytes`` of JSON-ish body with ``Transfer-Encoding: chunked`` (no Content-Length) to
    127.0.0.1:``port``, as an attacker would; returns the HTTP status. A server that stops reading and answers
    early ends the upload (a refused or reset send is what it should do)."""
    chunk = 1 << 20
    piece = b"%x\r\n" % chunk + b"[" * chunk + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
                "Transfer-Encoding: chunked", *headers]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        try:
            for _ in range(total_bytes // chunk):
                sock.sendall(piece)
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed while we were still sending
        reply = b""
        try:
            while b"\r\n" not in reply:
                data = sock.recv(4096)
                if not data:
                    break
                reply += data
        except OSError:
            pass
    if not reply.startswith(b"HTTP/1.1 "):
        raise AssertionError(f"no HTTP answer to a chunked body of {total_bytes} bytes: {reply[:200]!r}")
    return int(reply.split()[1])


def slow_clients(port: int, path: str, headers: Sequence[str] = ()) -> Dict[str, bytes]:
    """Three slow clients of 127.0.0.1:``port``, as a slowloris attacker sends them: one that connects and
    sends nothing, one that sends half a request head, one that sends the head and half its body. Returns what
    each got back before the server closed its connection (20 s at most, so that a server that never closes
    them fails the caller's assertion instead of hanging it)."""
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", *headers]
    sends = {
        "idle": b"",
        "half a head": ("\r\n".join(head[:2]) + "\r\n").encode(),
        "half a body": ("\r\n".join([*head, "Content-Length: 100"]) + "\r\n\r\n" + '{"co').encode(),
    }
    sockets = {}
    for name, data in sends.items():
        sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        sock.sendall(data)
        sockets[name] = sock
    got: Dict[str, bytes] = {}
    for name, sock in sockets.items():
        reply = b""
        try:
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                reply += data
        except socket.timeout:
            reply += b"<still open after 20 s>"
        except OSError:
            pass  # reset by the server: closed too
        finally:
            sock.close()
        got[name] = reply
    return got


def assert_slow_clients_cut_off(port: int, path: str, headers: Sequence[str] = ()) -> None:
    got = slow_clients(port, path, headers)
    assert not any(b"still open" in reply for reply in got.values()), got
    assert got["idle"] == b"" and got["half a head"] == b"", got  # closed without an answer
    assert got["half a body"].startswith(b"HTTP/1.1 408"), got  # the body's deadline: a 408 saying so
