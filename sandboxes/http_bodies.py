"""Requests read the way a server facing hostile clients must: the bearer token compared in constant time,
requests from web pages refused (and, on a server without a token, requests addressed to any name but a
loopback one: DNS rebinding), the size limit holding while the body streams in (a chunked body without
``Content-Length`` included), a deadline on sending the request (a slow client's connection is closed, its body a
408), a cap on open connections that idle ones cannot fill, and JSON nested deeper than a server will ever need
refused with a message instead of a ``RecursionError``. Shared by the sandbox service, ``skyrl-gym serve-env``
and ``skyrl-gym serve-retriever``."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import hashlib
import hmac
import ipaddress
import json
import sys
from typing import Any, AsyncIterator, Callable, Dict, Mapping, Optional, Tuple, Union

from skygym_sandboxes.turns import Turns

# Deeper than any run request or env row needs; far below the depth at which Python's own recursion (the JSON
# decoder, deepcopy, the encoder) would fail.
MAX_JSON_DEPTH = 64
# Seconds a client has to send a request's head (from connecting, or from its previous answer) and, again, its
# body; uvicorn itself waits forever for both, so slow clients could hold every file descriptor.
CLIENT_TIMEOUT_S = 60.0
# Open connections at most (below the usual file-descriptor limits). At the cap a new connection takes the place
# of the one that has waited longest without a request under way; with none, it is closed.
MAX_CONNECTIONS = 4096
# Answers written but not yet read by their clients, all connections together: past it the one unread longest is
# cut. 40 unread retriever answers held 1 GB; 4096 of them would hold 100 GB within one client timeout.
MAX_UNSENT_BYTES = 1024 * 1024 * 1024
# FastAPI's own pages (/docs, /redoc, /openapi.json) answer without the token: every server turns them off.
NO_PUBLIC_DOCS: Dict[str, Any] = {"docs_url": None, "redoc_url": None, "openapi_url": None}



class BodyError(ValueError):
    """A body the server will not read: ``status`` is the HTTP status to answer, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.1``, ``::1``, bracketed or not)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8000`` -> ``[::1]``)."""
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def refusal(request: Any, token: Optional[str], token_env: str,
            tokens: Optional["BearerTokens"] = None) -> Optional[Tuple[int, str]]:
    """Why a server will not answer the Starlette ``request``, as ``(status, message)``, or None. These servers
    answer programs, never web pages, and a page the operator opens could otherwise post to one on the
    operator's machine:

    * 403 for a request a browser sent (an ``Origin`` or ``Sec-Fetch-Mode`` header);
    * 403, on a server without a token (which listens on loopback only), for a request addressed to a name
      other than a loopback one: a page whose name was re-pointed at 127.0.0.1 (DNS rebinding);
    * 401 for a missing or wrong bearer token (:func:`bearer_matches`; with ``tokens``, a client's by name, one
      of those: :meth:`BearerTokens.owner`)."""
    headers = request.headers
    if "origin" in headers or "sec-fetch-mode" in headers:
        return 403, "requests from web pages are refused (the request carries an Origin or Sec-Fetch-Mode header)"
    host = headers.get("host")
    if tokens:
        return None if tokens.owner(request) is not None else (401, unauthorised_message(token_env, per_client=True))
    if not token and host is not None and not is_loopback(_host_name(host)):
        return 403, (f"this server has no token, so it answers only requests addressed to 127.0.0.1 or localhost, "
                     f"not to {host[:100]!r}; set {token_env} (or --token) to serve other names")
    if not bearer_matches(request, token):
        return 401, unauthorised_message(token_env)
    return None


def bearer_matches(request: Any, token: Optional[str]) -> bool:
    """True when ``token`` is unset, or the Starlette ``request`` carries ``Authorization: Bearer <token>``
    (compared in constant time, so the answer's timing tells nothing of the token)."""
    if not token:
        return True
    given = request.headers.get("authorization", "").encode("utf-8", "replace")
    return hmac.compare_digest(given, f"Bearer {token}".encode("utf-8"))


class BearerTokens:
    """Clients' bearer tokens (name -> token), for a server that tells its clients apart. A request's token is
    found by its SHA-256 digest, so the cost of a request does not grow with the clients (comparing each token took
    0.4 ms a request at 1,000 of them), and the lookup's timing depends only on a digest of what the request sent,
    which tells nothing of the tokens."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._names = {self._digest(f"Bearer {token}".encode("utf-8")): name for name, token in tokens.items()}

    def __bool__(self) -> bool:
        return bool(self._names)

    @staticmethod
    def _digest(header: bytes) -> bytes:
        return hashlib.sha256(header).digest()

    def owner(self, request: Any) -> Optional[str]:
        """The name whose token the Starlette ``request`` carries (``Authorization: Bearer <token>``), or None."""
        return self._names.get(self._digest(request.headers.get("authorization", "").encode("utf-8", "replace")))


def unauthorised_message(token_env: str, per_client: bool = False) -> str:
    """What a 401 says: the header expected, and where the server reads its token from (``per_client``: a token
    per client, from the operator's tokens file)."""
    where = ("this server gives each client a token of its own, from its operator's --tokens-file" if per_client
             else f"the server reads it from {token_env} or --token")
    return f"missing or wrong bearer token (Authorization: Bearer <token>; {where})"


def guarded_http_protocol(
    client_timeout_s: float = CLIENT_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
    max_unsent_bytes: int = MAX_UNSENT_BYTES,
) -> Any:
    """uvicorn's h11 protocol (pass it as ``http=``) with what it lacks against clients that stall it:

    * a connection that has not sent a whole request head within ``client_timeout_s`` of opening, or of its
      previous answer, is cut (an idle one, or one dripping its head a byte at a time);
    * a client that does not read its answer within ``client_timeout_s`` of the server's buffer filling is
      cut: 40 requests for large answers, never read, held 1 GB of a retriever's memory, and pipelined requests
      whose answers nobody read kept their connections "under way" for ever; and past ``max_unsent_bytes`` of
      answers waiting to be read, all connections together, the one waiting longest is cut at once;
    * past ``max_connections`` open connections, a new one takes the place of the connection whose client has
      been silent longest while the server waits on it (for a head, for the rest of a body, or for it to read an
      answer); with none, the new one is closed at once. Connections that send nothing, or read nothing, cannot
      lock clients out.

    Cut means aborted: a closed transport stays open until its answer is read, which such a client never does.
    A request under way is never cut while its client keeps up: its body has :func:`read_limited_body`'s
    deadline, its answer takes what it takes."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        last_heard = 0.0  # when its client last sent data or read some of its answer
        paused_at: Optional[float] = None  # when its answer stopped fitting in the buffers, unread

        def waiting_on_client(self) -> bool:
            cycle = self.cycle
            return (cycle is None or cycle.response_complete or self.paused_at is not None
                    or (not cycle.response_started and self.conn.their_state is h11.SEND_BODY))

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.last_heard = self.loop.time()
            if len(self.connections) > max_connections:
                waiting = [c for c in self.connections
                           if c is not self and getattr(c, "waiting_on_client", lambda: False)()]
                if not waiting:
                    transport.abort()
                    return
                min(waiting, key=lambda c: c.last_heard).transport.abort()
            self._await_next_head()

        def data_received(self, data: bytes) -> None:
            self.last_heard = self.loop.time()
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._await_next_head()

        def pause_writing(self) -> None:
            super().pause_writing()
            self.paused_at = paused_at = self.loop.time()

            def too_slow_to_read() -> None:
                if self.paused_at == paused_at:
                    self.transport.abort()

            self.loop.call_later(client_timeout_s, too_slow_to_read)
            unread = sorted((c for c in self.connections if getattr(c, "paused_at", None) is not None),
                            key=lambda c: c.paused_at)
            unsent = sum(c.transport.get_write_buffer_size() for c in unread)
            for connection in unread:  # the longest unread first, until the rest fit
                if unsent <= max_unsent_bytes:
                    break
                unsent -= connection.transport.get_write_buffer_size()
                connection.transport.abort()

        def resume_writing(self) -> None:
            self.paused_at, self.last_heard = None, self.loop.time()
            super().resume_writing()

        def timeout_keep_alive_handler(self) -> None:
            super().timeout_keep_alive_handler()
            if self.transport.get_write_buffer_size():  # closed, but its last answer is still unread
                self.transport.abort()

        def _await_next_head(self) -> None:
            waiting_after = self.cycle  # None, or the request just answered

            def too_slow() -> None:
                idle = self.cycle is None or self.cycle.response_complete
                if self.cycle is waiting_after and idle:  # closing or not: an unread answer keeps it open
                    self.transport.abort()

            self.loop.call_later(client_timeout_s, too_slow)

    return GuardedH11Protocol


async def read_limited_body(
    request: Any, max_bytes: int, option: str = "", timeout_s: float = CLIENT_TIMEOUT_S,
    on_size: Optional[Callable[[int], None]] = None,
) -> bytearray:
    """The body of a Starlette ``request``, refused (413) as soon as it passes ``max_bytes``: a declared
    ``Content-Length`` over the limit is refused before reading, and a chunked body stops being read at the
    limit, so memory never holds more than ``max_bytes`` of it. ``option`` names the setting that raises
    it. A body not all there within ``timeout_s`` is a 408. ``on_size(n)`` is told the body's size before each
    chunk is kept, and may refuse it by raising (:meth:`BodyBudget.body`)."""
    hint = f" ({option})" if option else ""
    too_large = BodyError(413, f"the body is over {max_bytes} bytes{hint}")
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise BodyError(400, f"Content-Length must be a whole number, got {declared[:40]!r}")
        if int(declared) > max_bytes:
            raise too_large
    body = bytearray()

    async def read() -> None:
        async for chunk in request.stream():
            if len(body) + len(chunk) > max_bytes:
                raise too_large
            if on_size is not None:
                on_size(len(body) + len(chunk))
            body.extend(chunk)

    try:
        await asyncio.wait_for(read(), timeout_s)
    except asyncio.TimeoutError:
        raise BodyError(408, f"the body did not arrive within {timeout_s:g} s (--client-timeout)") from None
    return body  # not copied into bytes: json.loads reads a bytearray as it is


def read_reply_capped(response: Any, max_bytes: int) -> bool:
    """Read the body of a streamed ``requests`` response (``stream=True``) into it, up to ``max_bytes``: False,
    with the connection closed, for an answer longer than that (a hostile server's endless answer never sits in
    the client's memory whole); True when it was read. The client side of the servers' body limit."""
    chunks, size = [], 0
    for chunk in response.iter_content(64 * 1024):
        size += len(chunk)
        if size > max_bytes:
            response.close()
            return False
        chunks.append(chunk)
    response._content = b"".join(chunks)  # what ``requests`` itself fills when it reads a body
    return True


async def read_reply_capped_async(response: Any, max_bytes: int) -> Optional[bytes]:
    """:func:`read_reply_capped` for an aiohttp ``response``: its body, or None, with the connection closed, for
    one longer than ``max_bytes`` (a declared ``Content-Length`` is refused before reading)."""
    declared = response.content_length
    if declared is not None and declared > max_bytes:
        response.close()
        return None
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        if len(body) + len(chunk) > max_bytes:
            response.close()
            return None
        body.extend(chunk)
    return bytes(body)


def json_shape(value: Any) -> Tuple[int, int]:
    """``(depth, values)`` of parsed JSON: how deep lists and objects nest, and how many values it holds (keys
    and members included). Iterative, so it cannot itself run out of stack."""
    depth, values, stack = 0, 1, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            values += 2 * len(item)
            children: Any = item.values()
        elif isinstance(item, list):
            values += len(item)
            children = item
        else:
            continue
        depth = max(depth, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return depth, values


# What one parsed JSON value costs in memory, at least (a Python object: an empty dict is 64 bytes, a short
# string 50): a body of 3 million empty objects is 9 MB on the wire and over 1 GB once parsed.
BYTES_PER_JSON_VALUE = 80


def held_bytes(value: Any) -> int:
    """What parsed JSON holds in memory, at least: BYTES_PER_JSON_VALUE for each value (keys and members
    included), and each string (keys too) at the width CPython stores it in, 1, 2 or 4 bytes a character, by its
    widest one: a body's length undercounted a row of ASCII and one emoji four times (8 MiB on the wire, 32 MiB
    held). Iterative, as :func:`json_shape`."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        total += BYTES_PER_JSON_VALUE
        if isinstance(item, str):
            total += sys.getsizeof(item)
        elif isinstance(item, dict):
            total += sum(BYTES_PER_JSON_VALUE + sys.getsizeof(key) for key in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """True when ``value`` (parsed JSON) nests lists and objects more than ``limit`` levels deep."""
    return json_shape(value)[0] > limit


class BodyBudget:
    """The bytes of request bodies a server holds while they arrive and while the server works on them, all
    connections together. Without it, bodies waiting for a parser slot or a run piled up: 12 bodies of 40 MB took a
    sandbox service from 62 MB to 1.1 GB (an attacker's pass), and 4096 connections may each send ``max_body_bytes``.
    The bound is :data:`LARGEST_AT_ONCE` bodies of the server's ``max_body_bytes``. Each body's first
    :data:`FREE_BYTES` are not counted, so small requests always get in (4096 connections hold 256 MB of those at
    most); a body that would pass the bound is refused with a 503 as it arrives.

    On a server of ``clients`` clients (a token each), one client's bodies hold at most its share of the bound, with
    room for one client more (and never less than one whole body): one client's slow large bodies filled the bound,
    and every other client's large body was a 503 until they were answered.

    >>> async with budget.body(request, max_body_bytes, "--max-body-bytes", client_timeout_s, client) as raw:
    ...     ...  # the bytes stay counted until the block ends
    """

    FREE_BYTES = 64 * 1024
    LARGEST_AT_ONCE = 4

    def __init__(self, max_body_bytes: int, clients: int = 0) -> None:
        self.max_bytes = self.LARGEST_AT_ONCE * max_body_bytes
        self.held = 0  # changed on the event loop only: no lock
        self.clients = clients
        self.client_share = max(max_body_bytes, self.max_bytes // (clients + 1))
        self.held_by: Dict[Any, int] = collections.defaultdict(int)  # a client's counted bytes, with clients only

    @contextlib.asynccontextmanager
    async def body(self, request: Any, max_bytes: int, option: str = "",
                   timeout_s: float = CLIENT_TIMEOUT_S, client: Any = None) -> AsyncIterator[bytearray]:
        """:func:`read_limited_body`, its bytes counted from when they arrive until the block ends, against
        ``client``'s share too where the server has clients."""
        counted = 0
        shared = self.clients > 0 and client is not None

        def charge(size: int) -> None:
            nonlocal counted
            extra = max(0, size - self.FREE_BYTES) - counted
            if extra <= 0:
                return
            if shared and self.held_by[client] + extra > self.client_share:
                raise BodyError(503, f"client {client!r}'s requests' bodies already hold {self.held_by[client]} "
                                     f"bytes, near its share of {self.client_share} (the server's {self.max_bytes} "
                                     f"over {self.clients} clients and room for one more); retry when some have "
                                     "been answered")
            if self.held + extra > self.max_bytes:
                raise BodyError(503, f"the server already holds {self.held} bytes of requests' bodies, near its "
                                     f"limit of {self.max_bytes}; retry when others have been answered")
            self.held += extra
            counted += extra
            if shared:
                self.held_by[client] += extra

        try:
            yield await read_limited_body(request, max_bytes, option, timeout_s, on_size=charge)
        finally:
            self.held -= counted
            if shared:
                self.held_by[client] -= counted
                if not self.held_by[client]:
                    del self.held_by[client]


class BodyParsers:
    """Runs a body's parse and checks in a thread, at most ``at_once`` at a time. On the event loop a 32 MB body of
    11 million empty objects held every other client for 21 s; in unbounded threads three such bodies at once
    grew a server by 3.8 GB (each expands to about 20 times its bytes before any budget can count it). The threads
    are the parsers' own (:data:`PARSE_THREADS`): on the loop's default executor, work that envs sent there (a
    judged step's) held up every other client's request body behind it. Clients take turns (:class:`Turns`, by the
    request's :data:`turn_key`): in arrival order, one client's queue of 30 MB bodies held another's small create
    for 22 s (an attacker's pass). A small body (``size`` up to :data:`INLINE_BYTES`: a millisecond of work at
    most) is parsed on the event loop at once: in turns, it still waited for one of those bodies (6 s)."""

    INLINE_BYTES = 16 * 1024

    def __init__(self, at_once: int = 2) -> None:
        self.at_once = at_once
        self._turns = Turns(at_once)

    async def run(self, fn: Any, *args: Any, size: Optional[int] = None) -> Any:
        """``fn(*args)``; ``size``: the bytes of the body it reads, where known."""
        if size is not None and size <= self.INLINE_BYTES:
            return fn(*args)
        return await self._turns.run_in_thread(PARSE_THREADS, fn, *args)


# One pool for the process, however many servers it builds (one per server, never shut down, kept each server's
# threads after it ended); each server's BodyParsers bounds what it runs there at once.
PARSE_THREADS = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="body-parse")


def parse_json_object(raw: Union[bytes, bytearray], max_depth: int = MAX_JSON_DEPTH) -> Dict[str, Any]:
    """``raw`` as a JSON object, or :class:`BodyError` (400) saying what is wrong: not JSON, not an object, or
    nested more than ``max_depth`` levels (a 100,000-deep body included, which the decoder itself cannot
    read)."""
    too_deep = BodyError(400, f"the body nests lists or objects more than {max_depth} levels deep")
    try:
        body = json.loads(raw)
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise BodyError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BodyError(400, f"the body must be a JSON object, got {type(body).__name__}")
    if json_depth_exceeds(body, max_depth):
        raise too_deep
    lone = _lone_surrogate(body)
    if lone is not None:
        raise BodyError(400, f"the body's strings must be Unicode text: {lone!r} is half of a UTF-16 pair (a lone "
                             "surrogate), which has no UTF-8 and broke what the server passed it to")
    return body


def _lone_surrogate(value: Any) -> Optional[str]:
    """The first lone surrogate (JSON's ``"\\ud800"``) in parsed JSON's strings and keys, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return item[exc.start]
    return None


__all__ = [
    "CLIENT_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "MAX_JSON_DEPTH",
    "NO_PUBLIC_DOCS",
    "BodyBudget",
    "BodyError",
    "bearer_matches",
    "guarded_http_protocol",
    "is_loopback",
    "refusal",
    "unauthorised_message",
    "json_depth_exceeds",
    "held_bytes",
    "json_shape",
    "BYTES_PER_JSON_VALUE",
    "parse_json_object",
    "read_limited_body",
    "read_reply_capped",
    "read_reply_capped_async",
]
