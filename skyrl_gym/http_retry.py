"""One HTTP request with retries and deadlines, for the clients of the core package (the LLM judge, the remote env).

Retries follow :class:`~skyrl_gym.tools.search.RetryPolicy` (exponential back-off with jitter, the search tool's):
a connection error, a time-out or a status in ``retryable`` is tried again; any other answer is returned to the
caller, who decides what it means. Only calls that are safe to repeat may use it (the remote env makes its calls
safe with request ids).

``timeout`` is a deadline for the whole attempt (connecting, sending, the headers and the whole body), not the
socket time-out of ``requests``, which starts again with every byte read: a server that trickles one byte a second
would otherwise hold a caller for as long as it likes. A watchdog shuts the attempt's socket when its deadline
passes, which ends the blocked read at once. ``deadline`` (a :func:`time.monotonic` instant) bounds every attempt
and back-off together.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from typing import Any, Callable, Collection, ContextManager, Dict, List, Optional, Tuple

from skyrl_gym.tools.search import RETRYABLE_STATUS, RetryPolicy


class RetriesExhausted(Exception):
    """Every attempt failed with a connection error, a time-out or a retryable status; ``reason`` says the last."""

    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(f"{reason}; gave up after {attempts} attempts")
        self.reason = reason
        self.attempts = attempts


class ReplyTooLarge(Exception):
    """The server's answer is longer than the caller's ``max_body_bytes`` (it was not read further)."""

    def __init__(self, url: str, limit: int, attempts: int) -> None:
        super().__init__(f"{url} answered more than {limit} bytes; the rest was not read")
        self.attempts = attempts


# ----- the watchdog ---------------------------------------------------------------------------------------------
_current = threading.local()  # the attempt under way in this thread (requests runs an attempt in its thread)


class _Watchdog:
    """Shuts the sockets of one attempt when its deadline passes: ``seconds`` after it starts (entering the
    context, after any wait for a slot), or at ``deadline`` if that comes first. Connections register themselves
    when they connect and when they send a request (a pooled connection is reused without connecting again)."""

    def __init__(self, seconds: float, deadline: Optional[float] = None) -> None:
        self.seconds, self.deadline = seconds, deadline
        self.expired = False
        self.done = False
        self.when = self.window = 0.0
        self._connections: List[Any] = []
        self._lock = threading.Lock()

    def __enter__(self) -> "_Watchdog":
        now = time.monotonic()
        self.when = now + self.seconds if self.deadline is None else min(now + self.seconds, self.deadline)
        self.window = max(0.001, self.when - now)  # what this attempt has
        _current.watchdog = self
        _alarms.add(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _current.watchdog = None
        with self._lock:
            self.done = True
            self._connections = []  # the alarm may outlive the attempt: it must not hold its connections

    def watch(self, connection: Any) -> None:
        with self._lock:
            self._connections.append(connection)
            expired = self.expired
        if expired:
            _shut(connection)

    def expire(self) -> None:
        with self._lock:
            if self.done:
                return
            self.expired = True
            connections = list(self._connections)
        for connection in connections:
            _shut(connection)


class _Alarms:
    """One daemon thread that expires the watchdogs whose deadline has passed: a thread per attempt would cost
    more than a fast request. Finished attempts leave the heap when they reach its top (or in a sweep)."""

    def __init__(self) -> None:
        self._heap: List[Tuple[float, int, _Watchdog]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: Optional[threading.Thread] = None

    def add(self, watchdog: _Watchdog) -> None:
        with self._wake:
            if len(self._heap) > 4096:  # many fast attempts with long deadlines: drop the finished ones
                self._heap = [entry for entry in self._heap if not entry[2].done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (watchdog.when, next(self._order), watchdog))
            if self._thread is None or not self._thread.is_alive():  # first use, or in a forked child
                self._thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _next_due(self) -> _Watchdog:
        with self._wake:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if self._heap and self._heap[0][0] <= time.monotonic():
                    return heapq.heappop(self._heap)[2]
                self._wake.wait(self._heap[0][0] - time.monotonic() if self._heap else None)

    def _run(self) -> None:
        while True:
            self._next_due().expire()


_alarms = _Alarms()


def _shut(connection: Any) -> None:
    sock = getattr(connection, "sock", None)
    if sock is None:
        return
    try:
        # the plain socket's shutdown, also under TLS: a blocked read in another thread returns at once
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _register(connection: Any) -> None:
    watchdog = getattr(_current, "watchdog", None)
    if watchdog is not None:
        watchdog.watch(connection)


_adapter_class: Any = None
_mount_lock = threading.Lock()


def _deadline_adapter_class() -> Any:
    """A ``requests`` adapter whose connections register with the attempt's watchdog (built once, on first use:
    ``import skyrl_gym`` stays light)."""
    global _adapter_class
    if _adapter_class is not None:
        return _adapter_class
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Watched:
        """Registers the connection when it connects and when it sends a request."""

        def connect(self) -> None:
            super().connect()  # type: ignore[misc]
            _register(self)

        def request(self, *args: Any, **kwargs: Any) -> None:
            _register(self)
            super().request(*args, **kwargs)  # type: ignore[misc]

    def watched_pool(pool: type, connection: type) -> type:
        watched = type("Watched" + connection.__name__, (Watched, connection), {})
        return type("Watched" + pool.__name__, (pool,), {"ConnectionCls": watched})

    pools = {
        "http": watched_pool(HTTPConnectionPool, HTTPConnection),
        "https": watched_pool(HTTPSConnectionPool, HTTPSConnection),
    }

    class DeadlineAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = dict(pools)

        def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **proxy_kwargs)
            if not proxy.lower().startswith("socks"):
                manager.pool_classes_by_scheme = dict(pools)
            return manager

    _adapter_class = DeadlineAdapter
    return DeadlineAdapter


def watch_deadlines(session: Any) -> Any:
    """``session`` (a ``requests.Session``) with adapters whose sockets the per-attempt deadline can shut, keeping
    the pool settings of the adapters it replaces. Idempotent; :func:`request_with_retries` calls it."""
    from requests.adapters import HTTPAdapter

    adapter_class = _deadline_adapter_class()
    with _mount_lock:
        for prefix in ("http://", "https://"):
            existing = session.adapters.get(prefix)
            if isinstance(existing, adapter_class):
                continue
            settings: Dict[str, Any] = {}
            if isinstance(existing, HTTPAdapter):  # keep the pool sizes and retries the caller chose
                settings = {
                    "pool_connections": existing._pool_connections,
                    "pool_maxsize": existing._pool_maxsize,
                    "pool_block": existing._pool_block,
                    "max_retries": existing.max_retries,
                }
            session.mount(prefix, adapter_class(**settings))
    return session


# ----- the request ----------------------------------------------------------------------------------------------
def _split(timeout: Any) -> Tuple[float, float]:
    """``(connect, whole attempt)`` seconds from a ``requests`` time-out: a number bounds both; a tuple
    ``(connect, read)`` bounds the attempt by their sum."""
    if isinstance(timeout, tuple):
        connect, read = float(timeout[0]), float(timeout[1])
        return connect, connect + read
    return float(timeout), float(timeout)


def _read_body(response: Any, max_body_bytes: Optional[int], url: str, attempt: int) -> None:
    """Reads the (streamed) body into the response, refusing one longer than ``max_body_bytes``."""
    from skygym_sandboxes.http_bodies import read_reply_capped

    if max_body_bytes is None:
        response.content  # noqa: B018 - reads it within the attempt's deadline
    elif not read_reply_capped(response, max_body_bytes):
        raise ReplyTooLarge(url, max_body_bytes, attempt)


async def read_capped(response: Any, max_body_bytes: int, url: str, attempt: int = 1) -> bytes:
    """The body of an aiohttp ``response``, refusing one longer than ``max_body_bytes`` with
    :class:`ReplyTooLarge` (a declared ``Content-Length`` before reading; the rest as it streams in), so a
    hostile server's endless answer never sits in memory whole."""
    from skygym_sandboxes.http_bodies import read_reply_capped_async

    body = await read_reply_capped_async(response, max_body_bytes)
    if body is None:
        raise ReplyTooLarge(url, max_body_bytes, attempt)
    return body


def _too_late(url: str, seconds: float, attempt_s: float) -> str:
    if seconds >= attempt_s:
        return f"no complete answer from {url} within {attempt_s:g} s"
    return f"no complete answer from {url} before the deadline ({seconds:.2g} s were left)"


def request_with_retries(
    session: Any,
    method: str,
    url: str,
    policy: RetryPolicy,
    timeout: Any,
    retryable: Collection[int] = RETRYABLE_STATUS,
    attempts: Optional[int] = None,
    *,
    deadline: Optional[float] = None,
    max_body_bytes: Optional[int] = None,
    slot: Optional[Callable[[], ContextManager[Any]]] = None,
    **request_options: Any,
) -> Tuple[Any, int]:
    """``(response, attempts it took)`` for the first answer whose status is not in ``retryable``, its body read, or
    :class:`RetriesExhausted`.

    ``session`` is a ``requests.Session``; ``timeout`` (seconds, or ``(connect, read)``) is the deadline of each
    attempt, headers and body included; ``deadline`` (a :func:`time.monotonic` instant) the deadline of all attempts
    and back-offs; ``max_body_bytes`` refuses a longer answer with :class:`ReplyTooLarge`; ``slot()`` is held while
    an attempt is on the wire (a concurrency limit), not during back-off. Other errors of ``requests`` (an invalid
    URL, say) are raised at once."""
    import requests

    watch_deadlines(session)
    attempts = attempts or policy.attempts
    connect_s, attempt_s = _split(timeout)
    reason = "no attempt was made"
    made = 0
    for attempt in range(1, attempts + 1):
        if deadline is not None and deadline <= time.monotonic():
            reason = f"{reason}; the deadline passed" if made else f"no time was left to ask {url}"
            break
        made = attempt
        watchdog = _Watchdog(attempt_s, deadline)
        try:
            with slot() if slot is not None else contextlib.nullcontext(), watchdog:
                window = watchdog.window
                response = session.request(
                    method, url, timeout=(min(connect_s, window), window), stream=True, **request_options
                )
                try:
                    _read_body(response, max_body_bytes, url, attempt)
                except BaseException:
                    response.close()
                    raise
        except ReplyTooLarge:
            raise
        except requests.exceptions.RequestException as exc:
            if watchdog.expired or isinstance(exc, requests.exceptions.Timeout):
                reason = _too_late(url, watchdog.window, attempt_s)
            elif isinstance(exc, requests.exceptions.ConnectionError):
                reason = f"cannot connect to {url} ({type(exc).__name__})"
            elif isinstance(exc, requests.exceptions.ChunkedEncodingError):
                reason = f"the answer from {url} broke off ({type(exc).__name__})"
            else:
                raise
        else:
            if watchdog.expired:  # cut mid-headers, http.client may take what came for a whole (empty) answer
                response.close()
                reason = _too_late(url, watchdog.window, attempt_s)
            elif response.status_code not in retryable:
                return response, attempt
            else:
                reason = f"{url} answered HTTP {response.status_code}: {response.text[:200]!r}"
        if attempt < attempts:
            pause = policy.delay(attempt)
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
    raise RetriesExhausted(reason, made)


__all__ = ["ReplyTooLarge", "RetriesExhausted", "read_capped", "request_with_retries", "watch_deadlines"]
