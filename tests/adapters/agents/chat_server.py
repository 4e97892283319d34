"""A real OpenAI-compatible chat server on 127.0.0.1 whose replies a test scripts (a test double for a model
server, like the one in tests/adapters/test_openai_agents.py): ``/v1/models`` and ``/v1/chat/completions`` over
real HTTP, so the agent layer's client, timeouts and JSON handling are exercised for real."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Tuple

Reply = Tuple[Dict[str, Any], str]  # (assistant message, finish_reason)


@contextmanager
def chat_server(respond: Callable[[Dict[str, Any]], Any], model: str = "scripted-model") -> Iterator[Any]:
    """Serve ``respond(request_body)`` -> an assistant message dict, or ``(message, finish_reason)``, or
    ``("sleep", seconds, message)`` to answer late, or ``("status", code, text)`` to answer an HTTP error. Yields an
    object with ``url`` and ``requests``."""
    requests: List[Dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _send(self, payload: Dict[str, Any], status: int = 200) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                pass

        def do_GET(self) -> None:
            self._send({"object": "list", "data": [{"id": model, "object": "model"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            answer = respond(body)
            finish = "stop"
            if isinstance(answer, tuple) and answer and answer[0] == "status":
                self._send({"error": answer[2]}, status=answer[1])
                return
            if isinstance(answer, tuple) and answer and answer[0] == "sleep":
                time.sleep(answer[1])
                answer = answer[2]
            if isinstance(answer, tuple):
                answer, finish = answer
            if isinstance(answer, str):
                answer = {"role": "assistant", "content": answer}
            self._send(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [{"index": 0, "message": answer, "finish_reason": finish}],
                }
            )

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    class Handle:
        url = f"http://127.0.0.1:{server.server_port}"

    handle = Handle()
    handle.requests = requests  # type: ignore[attr-defined]
    try:
        yield handle
    finally:
        server.shutdown()
        server.server_close()
