"""The HTTP retrieval service: ``POST /retrieve`` and ``GET /health`` (FastAPI + uvicorn).

Request (the Search-R1 shape, plus batches)::

    {"query": "who wrote hamlet", "topk": 3, "return_scores": true}
    {"queries": ["q1", "q2"], "topk": 3, "return_scores": true}      # or "query": ["q1", "q2"]

Response: one list of hits per query, best first::

    {"result": [[{"document": {"id": "7", "contents": "\\"Hamlet\\"\\n..."}, "score": 11.2}, ...]]}

(with ``return_scores: false`` each hit is the document itself, as Search-R1's server returns it).

Concurrent requests are gathered into one index call: whatever queries are waiting when the
index becomes free are searched together, which costs no latency when idle and amortises the
per-call overhead under load. The index runs in its own thread, so the event loop keeps
accepting requests while it works.
"""

# No "from __future__ import annotations": FastAPI must resolve the request model defined in create_app.

import asyncio
import concurrent.futures
import json
import socket
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from skygym_sandboxes.http_bodies import CLIENT_TIMEOUT_S

from skyrl_gym.retrieval.index import Hits, Retriever

MAX_QUERIES_PER_REQUEST = 1024
MAX_TOPK = 100
MAX_QUERY_CHARS = 4000  # a query is a few words; the search envs cut theirs to this
# All the queries of one request together: the index searches one batch at a time, so one request of 8 MB of
# query text held every other client for 5.7 s; 512 K characters take about 0.4 s.
MAX_REQUEST_QUERY_CHARS = 512_000
MAX_BODY_BYTES = 8 * 1024 * 1024  # 1024 queries of 8 KB each: far more than a search env sends
# Documents one answer may hold (queries x topk): 1024 one-word queries at topk 100 made a 9 KB request answer
# with 95 MB, encoded on the event loop. A search env's batch is its queries x 3.
MAX_HITS_PER_REQUEST = 10_000
TOKEN_ENV = "SKYRL_GYM_RETRIEVER_TOKEN"
# The service the search envs send $SKYRL_GYM_RETRIEVER_TOKEN to (default: skyrl_gym.tools.search's URL).
URL_ENV = "SKYRL_GYM_RETRIEVER_URL"


# What may wait for the index, all requests together: past either bound a request is a 503 that its client
# retries later. Without one, 4,096 requests of 512 K characters each would have waited in the queue for half an
# hour, holding every connection of the server, and run after their clients had gone. Characters bound long
# queries; the count bounds short ones, which cost a pass over the index each (20 requests of 1,024 two-letter
# queries held an honest one 84 s on a 100,000-document corpus; empty ones counted no characters at all).
MAX_QUEUED_QUERY_CHARS = 8 * MAX_REQUEST_QUERY_CHARS
MAX_QUEUED_QUERIES = 2 * MAX_QUERIES_PER_REQUEST


class Busy(Exception):
    """The batcher's queue holds as many queries, or query characters, as it may: the request is not queued."""


class QueryBatcher:
    """Feeds queries from many concurrent requests to the index in batches, one batch at a time; at most
    ``max_queued`` queries and ``max_queued_chars`` of query text wait (a request arriving at an empty queue is
    always taken)."""

    def __init__(self, retriever: Retriever, max_batch: int = 256,
                 max_queued_chars: int = MAX_QUEUED_QUERY_CHARS, max_queued: int = MAX_QUEUED_QUERIES) -> None:
        self._retriever = retriever
        self._max_batch = max_batch
        self.max_queued_chars, self.max_queued = max_queued_chars, max_queued
        self.queued_chars = self.queued = 0
        self._queue: "asyncio.Queue[Tuple[List[str], int, asyncio.Future]]" = asyncio.Queue()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever")
        self._task: Optional[asyncio.Task] = None
        self.batches = 0
        self.queries = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def search(self, queries: List[str], k: int) -> List[Hits]:
        """The hits of ``queries``, or :class:`Busy` when they would pass the queue's bound."""
        chars = sum(len(q) for q in queries)
        if self.queued and (self.queued_chars + chars > self.max_queued_chars
                            or self.queued + len(queries) > self.max_queued):
            raise Busy(f"the retriever has {self.queued} queries ({self.queued_chars} characters) waiting, its "
                       "bound; retry shortly")
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.queued_chars += chars
        self.queued += len(queries)
        self._queue.put_nowait((queries, k, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            items = [await self._queue.get()]
            count = len(items[0][0])
            while count < self._max_batch and not self._queue.empty():
                item = self._queue.get_nowait()
                items.append(item)
                count += len(item[0])
            all_queries = [q for queries, _, _ in items for q in queries]
            self.queued_chars -= sum(len(q) for q in all_queries)
            self.queued -= len(all_queries)
            k = max(item[1] for item in items)
            try:
                hits = await loop.run_in_executor(self._executor, self._retriever.search, all_queries, k)
            except Exception as exc:  # an index failure fails these requests, not the server
                for _, _, future in items:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.batches += 1
            self.queries += len(all_queries)
            start = 0
            for queries, item_k, future in items:
                if not future.done():
                    future.set_result([row[:item_k] for row in hits[start : start + len(queries)]])
                start += len(queries)


def create_app(
    retriever: Retriever,
    documents: Sequence[Dict[str, Any]],
    default_topk: int = 3,
    name: str = "bm25",
    token: Optional[str] = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    client_timeout_s: float = CLIENT_TIMEOUT_S,
) -> Any:
    """The FastAPI application serving ``retriever`` over ``documents`` (same order as the index).

    With ``token``, every route needs ``Authorization: Bearer <token>`` (401 otherwise). Bodies are read as
    the other two servers read them (:mod:`skygym_sandboxes.http_bodies`): over ``max_body_bytes`` is a 413
    while the body streams in, chunked ones too; not JSON or nested too deep is a 400; a wrong field a 422."""
    import contextlib

    from fastapi import FastAPI, HTTPException, Request, Response
    from fastapi.exceptions import RequestValidationError
    from pydantic import BaseModel, ConfigDict, ValidationError
    from skygym_sandboxes.http_bodies import (
        NO_PUBLIC_DOCS,
        BodyBudget,
        BodyError,
        BodyParsers,
        parse_json_object,
        refusal,
    )

    class RetrieveRequest(BaseModel):
        # strict: a wrong type is a 422, not read as something else ("topk": true was 1, "return_scores": "yes" True)
        model_config = ConfigDict(strict=True)

        query: Optional[Any] = None
        queries: Optional[List[str]] = None
        topk: Optional[int] = None
        return_scores: bool = False

    state: Dict[str, QueryBatcher] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any):
        batcher = QueryBatcher(retriever)
        batcher.start()
        state["batcher"] = batcher
        yield
        await batcher.stop()

    app = FastAPI(title="skyrl-gym retriever", lifespan=lifespan, **NO_PUBLIC_DOCS)

    def authorise(request: Request) -> None:
        why = refusal(request, token, TOKEN_ENV)
        if why:
            raise HTTPException(*why)

    @app.get("/health")
    async def health(request: Request) -> Dict[str, Any]:
        authorise(request)
        batcher = state.get("batcher")
        return {
            "status": "ok",
            "retriever": name,
            "documents": len(documents),
            "batches": batcher.batches if batcher else 0,
            "queries": batcher.queries if batcher else 0,
            "queued_queries": batcher.queued if batcher else 0,
            "queued_query_chars": batcher.queued_chars if batcher else 0,
            "max_body_bytes": max_body_bytes,
        }

    parsers = BodyParsers()
    bodies = BodyBudget(max_body_bytes)  # the bodies being read and parsed, all connections together

    @app.post("/retrieve")
    async def retrieve(raw: Request) -> Response:
        authorise(raw)
        try:  # parsed in a thread (BodyParsers): a body of millions of small values held the event loop for seconds
            async with bodies.body(raw, max_body_bytes, "--max-body-bytes", client_timeout_s) as body_bytes:
                body = await parsers.run(parse_json_object, body_bytes, size=len(body_bytes))
        except BodyError as exc:
            raise HTTPException(exc.status, exc.message) from None
        try:
            request = RetrieveRequest.model_validate(body)
        except ValidationError as exc:
            # without the inputs: a client's NaN or infinity in the answer would make it a 500
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            raise RequestValidationError(errors) from None
        if request.queries is not None:
            queries, batched = request.queries, True
        elif isinstance(request.query, list):
            queries, batched = request.query, True
        elif isinstance(request.query, str):
            queries, batched = [request.query], False
        else:
            raise HTTPException(400, 'send "query" (a string or a list of strings) or "queries" (a list of strings)')
        if not all(isinstance(q, str) for q in queries):
            raise HTTPException(400, "every query must be a string")
        if len(queries) > MAX_QUERIES_PER_REQUEST:
            raise HTTPException(400, f"at most {MAX_QUERIES_PER_REQUEST} queries per request, got {len(queries)}")
        longest = max((len(q) for q in queries), default=0)
        if longest > MAX_QUERY_CHARS:
            raise HTTPException(
                400, f"a query may be at most {MAX_QUERY_CHARS} characters, got one of {longest}"
            )
        total = sum(len(q) for q in queries)
        if total > MAX_REQUEST_QUERY_CHARS:
            raise HTTPException(
                400,
                f"the queries of one request may hold at most {MAX_REQUEST_QUERY_CHARS} characters, "
                f"got {total}",
            )
        topk = default_topk if request.topk is None else request.topk
        if not 1 <= topk <= MAX_TOPK:
            raise HTTPException(400, f"topk must be between 1 and {MAX_TOPK}, got {topk}")
        if len(queries) * topk > MAX_HITS_PER_REQUEST:
            raise HTTPException(400, f"one request may ask for at most {MAX_HITS_PER_REQUEST} documents (queries x "
                                     f"topk), got {len(queries)} x {topk}; split it")
        try:
            hits = await state["batcher"].search(list(queries), topk) if queries else []
        except Busy as exc:  # the search tool retries a 503 after a back-off
            raise HTTPException(503, str(exc)) from None

        def encoded() -> bytes:  # in a thread: a large answer does not hold the event loop while it is written
            result = [
                [{"document": documents[p], "score": s} if request.return_scores else documents[p] for p, s in row]
                for row in hits
            ]
            return json.dumps({"result": result, "batched": batched}, ensure_ascii=False).encode("utf-8")

        return Response(await asyncio.to_thread(encoded), media_type="application/json")

    return app


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket; ``port=0`` picks a free port (read it back with ``getsockname``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto says
    # TCP, and without it every keep-alive response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def check_bind(host: str, token: Optional[str]) -> None:
    """``ValueError`` unless ``host`` is a loopback address or a bearer ``token`` guards the service."""
    from skygym_sandboxes.http_bodies import is_loopback

    if not token and not is_loopback(host):
        raise ValueError(
            f"refusing to serve the corpus on {host} without a bearer token: anyone who can reach it could "
            f"query it. Set {TOKEN_ENV} (or pass --token), or bind 127.0.0.1"
        )


def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    token: Optional[str] = None,
    client_timeout_s: float = CLIENT_TIMEOUT_S,
) -> None:
    """Serve ``app`` until interrupted; prints the URL (with the real port) once listening. Binding anything
    but a loopback address needs the bearer ``token`` the app was built with. A client has
    ``client_timeout_s`` to send each request's head (and, in the app, its body)."""
    check_bind(host, token)
    # the URL ends the line: tests and scripts read it from there
    run_server(
        app, host, port, log_level, 30, client_timeout_s, lambda url: f"retriever listening on {url}/retrieve"
    )


def wildcard_hint(host: str, port: int) -> str:
    """For a server bound to every address (``0.0.0.0``, ``::``), the line that says which URL a client uses: the
    banner's URL names no address another machine can reach."""
    import ipaddress

    try:
        unspecified = host == "" or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:  # a host name
        return ""
    if not unspecified:
        return ""
    return (f"  (listening on every address of this machine: clients use one of its addresses, "
            f"e.g. http://{socket.gethostname()}:{port})")


def run_server(
    app: Any,
    host: str,
    port: int,
    log_level: str,
    timeout_keep_alive: int,
    client_timeout_s: float,
    banner: Callable[[str], str],
    max_connections: Optional[int] = None,
) -> None:
    """Serve ``app`` on ``host:port`` (``port=0``: a free one) with uvicorn, slow clients cut off after
    ``client_timeout_s`` and at most ``max_connections`` open (default
    :data:`~skygym_sandboxes.http_bodies.MAX_CONNECTIONS`; :func:`skygym_sandboxes.http_bodies.guarded_http_protocol`),
    until interrupted; prints ``banner(url)`` once listening. Shared by serve-retriever and serve-env."""
    import uvicorn
    from skygym_sandboxes.http_bodies import MAX_CONNECTIONS, guarded_http_protocol

    sock = bind_socket(host, port)
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        app,
        log_level=log_level,
        backlog=2048,
        timeout_keep_alive=timeout_keep_alive,
        http=guarded_http_protocol(client_timeout_s, max_connections=max_connections or MAX_CONNECTIONS),
    )
    server = uvicorn.Server(config)
    print(banner(f"http://{shown}:{sock.getsockname()[1]}"), flush=True)
    hint = wildcard_hint(host, sock.getsockname()[1])
    if hint:
        print(hint, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        sys.stdout.flush()
