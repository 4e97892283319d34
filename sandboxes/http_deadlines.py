"""Deadlines for whole HTTP attempts over ``requests``: connecting, sending, the headers and the whole body.

The time-out of ``requests`` is a socket time-out that starts again with every byte read: a server that trickles one
byte a second holds a caller for as long as it likes. Here a session's connections register with the attempt under
way in their thread (:func:`watch_deadlines`), and one daemon thread shuts their sockets when the attempt's deadline
passes (:class:`AttemptDeadline`), which ends a blocked read at once. Every HTTP client of the project that talks
to a server it does not control uses it (the sandbox client here; in the core package the judge, the remote env and
the search tool, through ``skyrl_gym.http_retry``).
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from typing import Any, Dict, List, Optional, Tuple


_current = threading.local()  # the attempt under way in this thread (requests runs an attempt in its thread)


class AttemptDeadline:
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

    def __enter__(self) -> "AttemptDeadline":
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
            # the sockets, not the connections: a connection cut here goes back to its pool and connects again for
            # the next request, and a shut that came late (this thread descheduled, under load) cut that request's
            # new socket after its first byte ('IncompleteRead(1 bytes read)' in CI)
            sockets = [getattr(connection, "sock", None) for connection in self._connections]
        for sock in sockets:
            _shut_socket(sock)


class _Alarms:
    """One daemon thread that expires the watchdogs whose deadline has passed: a thread per attempt would cost
    more than a fast request. Finished attempts leave the heap when they reach its top (or in a sweep)."""

    def __init__(self) -> None:
        self._heap: List[Tuple[float, int, AttemptDeadline]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: Optional[threading.Thread] = None

    def add(self, watchdog: AttemptDeadline) -> None:
        with self._wake:
            if len(self._heap) > 4096:  # many fast attempts with long deadlines: drop the finished ones
                self._heap = [entry for entry in self._heap if not entry[2].done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (watchdog.when, next(self._order), watchdog))
            if self._thread is None or not self._thread.is_alive():  # first use, or in a forked child
                self._thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _next_due(self) -> AttemptDeadline:
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
    _shut_socket(getattr(connection, "sock", None))


def _shut_socket(sock: Any) -> None:
    """Shut ``sock`` (a socket closed meanwhile refuses, which is fine: Python never reaches a reused descriptor)."""
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


class AnswerCut(Exception):
    """:func:`capped_answer`'s attempt passed its deadline before the whole answer came (``seconds``: what it had)."""

    def __init__(self, url: str, seconds: float) -> None:
        super().__init__(f"no complete answer from {url} within {seconds:g} s")
        self.seconds = seconds


def capped_answer(session: Any, method: str, url: str, seconds: float, max_bytes: int, **options: Any) -> Tuple[Any, bool]:
    """One request of a client to a server it does not control: ``(response, whole)``, the answer's body read into
    the response up to ``max_bytes`` (``whole`` False past it, the rest unread), headers and body within ``seconds``
    (:class:`AnswerCut` otherwise). Redirects are not followed: ``requests`` reads every hop's body whole,
    decompressed, before the next, where no cap reaches; a 3xx is the answer. ``options`` go to
    ``session.request`` (its ``timeout`` bounds connecting and each read within the deadline)."""
    import requests

    from skygym_sandboxes.http_bodies import read_reply_capped

    watch_deadlines(session)
    deadline = AttemptDeadline(seconds)
    try:
        with deadline:
            response = session.request(method, url, stream=True, allow_redirects=False, **options)
            whole = read_reply_capped(response, max_bytes)
    except requests.RequestException:
        if deadline.expired:  # the shut socket surfaces as whatever the read was doing
            raise AnswerCut(url, deadline.window) from None
        raise
    if deadline.expired:  # cut mid-answer: what came is not the answer
        response.close()
        raise AnswerCut(url, deadline.window)
    return response, whole
