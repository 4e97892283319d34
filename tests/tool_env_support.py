"""Helpers for the tool-env tests: a small corpus, the real retrieval server in a subprocess,
a misbehaving HTTP server (test double for fault tests), and the sample SQLite databases."""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO_ROOT = Path(__file__).resolve().parent.parent

CORPUS: List[Dict[str, str]] = [
    {"id": "0", "contents": '"Paris"\nParis is the capital and most populous city of France, on the river Seine.'},
    {"id": "1", "contents": '"Berlin"\nBerlin is the capital of Germany and its largest city.'},
    {"id": "2", "contents": '"Hamlet"\nHamlet is a tragedy written by William Shakespeare around 1600.'},
    {"id": "3", "contents": '"Mount Everest"\nMount Everest is the highest mountain above sea level, 8,849 metres tall.'},
    {"id": "4", "contents": '"Python (programming language)"\nPython was created by Guido van Rossum and released in 1991.'},
    {"id": "5", "contents": '"Marie Curie"\nMarie Curie was the first woman to win a Nobel Prize, in physics in 1903.'},
    {"id": "6", "contents": '"Great Wall of China"\nThe Great Wall of China is about 21,196 kilometres long.'},
    {"id": "7", "contents": '"Lisbon"\nLisbon is the capital of Portugal, on the Tagus estuary.'},
    {"title": "Amazon River", "text": "The Amazon River in South America carries more water than any other river."},
    {"title": "Jupiter", "text": "Jupiter is the largest planet in the Solar System and has 95 known moons."},
]


def write_corpus(path: Path, documents: List[Dict[str, str]] = CORPUS) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(json.dumps(document) + "\n")
    return path


class RetrieverProcess:
    """``python -m skyrl_gym.retrieval --corpus ... --port 0`` with the URL it printed."""

    def __init__(self, corpus: Path, *extra_args: str, timeout_s: float = 60.0) -> None:
        from tests.fixtures.extras import require_extra

        require_extra("search", ("bm25s", "fastapi", "uvicorn"))
        self.log_path = corpus.parent / f"retriever-{os.getpid()}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "w+", encoding="utf-8")
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "skyrl_gym.retrieval", "--corpus", str(corpus), "--port", "0", *extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO_ROOT),
        )
        self.url = self._wait_for_url(timeout_s)

    def _wait_for_url(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text(encoding="utf-8")
            for line in text.splitlines():
                if "listening on " in line:
                    return line.split("listening on ", 1)[1].strip()
            if self.process.poll() is not None:
                raise RuntimeError(f"retrieval server exited with {self.process.returncode}:\n{text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"retrieval server did not start within {timeout_s} s:\n{self.log_path.read_text()}")

    @property
    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no graceful shutdown."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


class MisbehavingServer:
    """A real HTTP server that answers ``/retrieve`` badly on purpose (a double for fault tests).

    ``fail_first``: answer HTTP 500 to that many requests, then answer well.
    ``fail_each_query_once``: answer HTTP 500 to the first request for each query, then answer it well (which
    request fails does not hang on the order a batch's requests arrive in).
    ``always_fail``: always HTTP 500.  ``hang_s``: sleep that long before answering.
    """

    def __init__(
        self, fail_first: int = 0, always_fail: bool = False, hang_s: float = 0.0, fail_each_query_once: bool = False
    ) -> None:
        self.fail_first = fail_first
        self.fail_each_query_once = fail_each_query_once
        self.always_fail = always_fail
        self.hang_s = hang_s
        self.requests = 0
        self.queries_seen: set = set()
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests += 1
                    number = server.requests
                    first_for_query = payload.get("query") not in server.queries_seen
                    server.queries_seen.add(payload.get("query"))
                if server.hang_s:
                    time.sleep(server.hang_s)
                if (
                    server.always_fail
                    or number <= server.fail_first
                    or (server.fail_each_query_once and first_for_query)
                ):
                    body, status = b'{"detail": "index exploded"}', 500
                else:
                    hit = {"document": {"id": "0", "contents": f"Result for {payload.get('query')}"}, "score": 1.0}
                    body, status = json.dumps({"result": [[hit]]}).encode(), 200
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 128  # a batch of clients connects at once; the default of 5 can drop SYNs

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/retrieve"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def unused_port_url() -> str:
    """A URL on a port where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/retrieve"


def load_sample_database_builder() -> Any:
    """``examples/text2sql/build_sample_databases.py`` as a module."""
    path = REPO_ROOT / "examples" / "text2sql" / "build_sample_databases.py"
    spec = importlib.util.spec_from_file_location("build_sample_databases", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def build_sample_databases(out_dir: Path, layout: str = "plain") -> List[Dict[str, Any]]:
    return load_sample_database_builder().build(str(out_dir), layout)


_shared_sample_dir: Optional[Path] = None


def shared_sample_databases() -> Path:
    """The sample databases built once per test process in a temporary folder (removed at exit)."""
    global _shared_sample_dir
    if _shared_sample_dir is None:
        import atexit
        import shutil
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="skyrl-sample-sql-"))
        atexit.register(shutil.rmtree, folder, True)
        build_sample_databases(folder)
        _shared_sample_dir = folder
    return _shared_sample_dir


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def search_config(url: str, **overrides: Any) -> Dict[str, Any]:
    config: Dict[str, Any] = {"search_url": url, "topk": 3, "timeout": 5.0, "retry_attempts": 3, "retry_delay_s": 0.05}
    config.update(overrides)
    return config


def first_observation(output: Dict[str, Any]) -> Optional[str]:
    return output["observations"][0]["content"] if output["observations"] else None


def names_a_limit_that_stops(text: str, limit: str) -> bool:
    """Whether ``text`` names ``limit`` as the one that stopped a query. Python 3.10's sqlite3 has no
    ``Connection.setlimit``, so no ``SQLITE_LIMIT_LENGTH``: there a value past ``max_value_bytes`` is stopped by the
    query's heap limit, the result's size limit or its timeout instead
    (``skyrl_gym.tools.sqlite_readonly.open_read_only``)."""
    names = [limit]
    if limit == "max_value_bytes" and sys.version_info < (3, 11):
        names += ["memory_bytes", "max_bytes", "timeout_s"]
    return any(f"(limit {name})" in text for name in names)
