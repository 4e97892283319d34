"""One HTTP request with retries and deadlines, for the clients of the core package (the LLM judge, the remote env).

Retries follow :class:`~skyrl_gym.tools.search.RetryPolicy` (exponential back-off with jitter, the search tool's):
a connection error, a time-out or a status in ``retryable`` is tried again; any other answer is returned to the
caller, who decides what it means. Only calls that are safe to repeat may use it (the remote env makes its calls
safe with request ids).

``timeout`` is a deadline for the whole attempt (connecting, sending, the headers and the whole body), not the
socket time-out of ``requests``, which starts again with every byte read: a server that trickles one byte a second
would otherwise hold a caller for as long as it likes. A watchdog (``skygym_sandboxes.http_deadlines``) shuts the
attempt's socket when its deadline passes, which ends the blocked read at once. ``deadline`` (a :func:`time.monotonic` instant) bounds every attempt
and back-off together.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Collection, ContextManager, Optional, Tuple

from skygym_sandboxes.http_deadlines import AttemptDeadline, watch_deadlines
from skyrl_gym.tools.search import RETRYABLE_STATUS, RetryPolicy


class RetriesExhausted(Exception):
    """Every attempt failed with a connection error, a time-out or a retryable status; ``reason`` says the last,
    ``status`` its HTTP status (None when it got no answer)."""

    def __init__(self, reason: str, attempts: int, status: Optional[int] = None) -> None:
        super().__init__(f"{reason}; gave up after {attempts} attempts")
        self.reason = reason
        self.attempts = attempts
        self.status = status


class ReplyTooLarge(Exception):
    """The server's answer is longer than the caller's ``max_body_bytes`` (it was not read further)."""

    def __init__(self, url: str, limit: int, attempts: int) -> None:
        super().__init__(f"{url} answered more than {limit} bytes; the rest was not read")
        self.attempts = attempts


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
    # requests reads every redirect's body whole (decompressed) before the next hop, where no cap reaches: a 3xx
    # is an answer like any other, read to the cap, and the caller decides what it means
    request_options.setdefault("allow_redirects", False)
    attempts = attempts or policy.attempts
    connect_s, attempt_s = _split(timeout)
    reason, status = "no attempt was made", None
    made = 0
    for attempt in range(1, attempts + 1):
        if deadline is not None and deadline <= time.monotonic():
            reason = f"{reason}; the deadline passed" if made else f"no time was left to ask {url}"
            break
        made, status = attempt, None
        watchdog = AttemptDeadline(attempt_s, deadline)
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
                status = response.status_code
        if attempt < attempts:
            pause = policy.delay(attempt)
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
    raise RetriesExhausted(reason, made, status)


__all__ = ["ReplyTooLarge", "RetriesExhausted", "read_capped", "request_with_retries", "watch_deadlines"]
