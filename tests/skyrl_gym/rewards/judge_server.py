"""A deterministic judge that speaks the OpenAI chat API, run as a real process by the judge tests.

No judge model runs on the test machines, so this server follows a rule instead of a model: it reads the
``<reference-F>``, ``<rubric-F>`` and ``<response-F>`` sections of the judge request (the hub's prompt; ``F`` is the
request's random fence, taken from its first tag) and answers

* ``SCORE: 1`` when the reference (lower-cased, spaces squeezed) appears in the response, else ``SCORE: 0``;
* ``VERDICT: CORRECT`` / ``INCORRECT`` when the rubric says "answer with a verdict";
* ``Score: 10/10`` / ``0/10`` when the rubric says "out of 10"; ``SCORE: 10`` / ``0`` for "bare 0-10";
* a JSON object ``{"reason": ..., "score": 1|0}`` in a code fence when the rubric says "answer in json".

The ``model`` of the request chooses a behaviour, so one server serves every case: ``rule-judge`` (the rule),
``flaky-judge`` (503 the first time it sees a request, then the rule), ``slow-judge`` (sleeps 3 s first),
``rambling-judge`` (an answer without a score), ``quoting-judge`` (quotes the response in its reasoning, as judges
do, then gives the rule's verdict), ``truncated-judge`` (quotes the response and is cut off there:
``finish_reason: length``), ``trickle-judge`` (the rule's answer, one byte of the body every 50 ms) and
``trickle-headers-judge`` (the headers one byte every 50 ms), ``redirect-judge`` (a 307 to ``--redirect-to``),
``huge-judge`` (a 4 MB answer); any other model is answered 404 like a server that does not have it.
``GET /stats`` gives the requests seen, the most that were in flight at once, the ``Authorization`` headers received
(``authorizations``) and the trickled answers whose client hung up before the end (``trickles_cut``).

    python tests/skyrl_gym/rewards/judge_server.py [--port 0] [--token T] [--redirect-to URL] [--tls-cert C --tls-key K]
    # prints the port, then serves
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict

MODELS = (
    "rule-judge",
    "flaky-judge",
    "slow-judge",
    "rambling-judge",
    "quoting-judge",
    "truncated-judge",
    "trickle-judge",
    "trickle-headers-judge",
    "redirect-judge",
    "huge-judge",
)
TRICKLE_INTERVAL_S = 0.05


def _section(text: str, name: str) -> str:
    """The section ``name`` of the request, found by the fence of its first tag, as a reader of its structure
    would (an unfenced request, as the hub sent before fences: the first ``<name>`` section)."""
    fence = re.match(r"<question-([0-9a-f]+)>\n", text)
    if not fence:
        found = re.search(rf"<{name}>\n(.*?)\n</{name}>", text, re.DOTALL)
        return found.group(1) if found else ""
    opening, closing = f"<{name}-{fence.group(1)}>\n", f"\n</{name}-{fence.group(1)}>"
    start = text.find(opening)
    end = text.find(closing, start + len(opening)) if start >= 0 else -1
    return text[start + len(opening) : end] if end >= 0 else ""


def _user_message(body: Dict[str, Any]) -> str:
    return next(
        (m.get("content", "") for m in reversed(body.get("messages") or []) if m.get("role") == "user"), ""
    )


def _squeeze(text: str) -> str:
    return " ".join(text.lower().split())


def rule_answer(body: Dict[str, Any], quote: bool = False) -> str:
    user = _user_message(body)
    reference, rubric, response = (
        _section(user, "reference"),
        _section(user, "rubric"),
        _section(user, "response"),
    )
    agrees = bool(_squeeze(reference)) and _squeeze(reference) in _squeeze(response)
    reasoning = (
        f"The reference is {reference!r}; the response {'contains' if agrees else 'does not contain'} it."
    )
    if quote:  # judges often quote what they grade
        reasoning = f"The response reads:\n{response}\n\n{reasoning}"
    if "answer in json" in rubric.lower():
        verdict = json.dumps({"reason": reasoning, "score": 1 if agrees else 0})
        return f"{reasoning}\n```json\n{verdict}\n```"
    if "answer with a verdict" in rubric.lower():
        return f"{reasoning}\nVERDICT: {'CORRECT' if agrees else 'INCORRECT'}"
    if "out of 10" in rubric.lower():
        return f"{reasoning}\nScore: {10 if agrees else 0}/10"
    if "bare 0-10" in rubric.lower():
        return f"{reasoning}\nSCORE: {10 if agrees else 0}"
    return f"{reasoning}\nSCORE: {1 if agrees else 0}"


def make_handler(token: str, stats: Dict[str, Any], lock: threading.Lock, redirect_to: str = "") -> type:
    seen_by_flaky: set = set()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, payload: Any, status: int = 200) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                pass

        def _authorised(self) -> bool:
            if token and self.headers.get("Authorization") != f"Bearer {token}":
                self._send({"error": {"message": "missing or wrong bearer token"}}, 401)
                return False
            return True

        def do_GET(self) -> None:
            if not self._authorised():
                return
            if self.path == "/stats":
                with lock:
                    self._send(dict(stats))
            else:
                self._send({"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                stats["authorizations"].append(self.headers.get("Authorization"))
            if not self._authorised():
                return
            if not self.path.endswith("/v1/chat/completions"):
                self._send({"error": {"message": f"no route {self.path}"}}, 404)
                return
            with lock:
                stats["requests"] += 1
                stats["in_flight"] += 1
                stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
            try:
                self._answer(raw)
            finally:
                with lock:
                    stats["in_flight"] -= 1

        def _answer(self, raw: bytes) -> None:
            body = json.loads(raw)
            model = body.get("model")
            if model not in MODELS:
                self._send({"error": {"message": f"the model {model!r} does not exist"}}, 404)
                return
            time.sleep(0.05)  # long enough for concurrent requests to overlap
            if model == "flaky-judge":
                digest = hashlib.sha256(raw).hexdigest()
                with lock:
                    first_time = digest not in seen_by_flaky
                    seen_by_flaky.add(digest)
                if first_time:
                    self._send({"error": {"message": "overloaded, try again"}}, 503)
                    return
            if model == "slow-judge":
                time.sleep(3.0)
            if model == "redirect-judge":
                self.send_response(307)
                self.send_header("Location", redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            finish = "stop"
            if model == "rambling-judge":
                content = "I would need to think about this more."
            elif model == "truncated-judge":
                content = "The response reads:\n" + _section(_user_message(body), "response")
                finish = "length"
            elif model == "huge-judge":
                content = "x" * 4_000_000 + "\n" + rule_answer(body)
            else:
                content = rule_answer(body, quote=model == "quoting-judge")
            completion = {
                "id": "judge-1",
                "object": "chat.completion",
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
                ],
            }
            if model in ("trickle-judge", "trickle-headers-judge"):
                completion["padding"] = " " * 400  # about 30 s of trickle in all
                self._trickle(json.dumps(completion).encode(), headers=model == "trickle-headers-judge")
            else:
                self._send(completion)

        def _trickle(self, data: bytes, headers: bool) -> None:
            """The answer, one byte every 50 ms: of the headers too, or of the body only. Each byte comes well within
            any read time-out, so only a deadline on the whole attempt stops a client from waiting for all of it."""
            head = (
                f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                + "".join(f"X-Padding-{i}: {'y' * 20}\r\n" for i in range(20))
                + "\r\n"
            ).encode()
            slow, fast = (head + data, b"") if headers else (data, head)
            try:
                self.wfile.write(fast)
                self.wfile.flush()
                for i in range(len(slow)):
                    self.wfile.write(slow[i : i + 1])
                    self.wfile.flush()
                    time.sleep(TRICKLE_INTERVAL_S)
            except OSError:  # a broken pipe, a reset, a TLS end of file: the client hung up
                with lock:
                    stats["trickles_cut"] += 1
            self.close_connection = True

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="")
    parser.add_argument("--redirect-to", default="")
    parser.add_argument("--tls-cert", default="", help="serve HTTPS with this certificate (PEM) ...")
    parser.add_argument("--tls-key", default="", help="... and this key")
    args = parser.parse_args()
    stats = {"requests": 0, "in_flight": 0, "max_in_flight": 0, "authorizations": [], "trickles_cut": 0}
    handler = make_handler(args.token, stats, threading.Lock(), args.redirect_to)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    server.daemon_threads = True
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        # the handshake happens in the handler's thread, at its first read
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
