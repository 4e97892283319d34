"""One HTTP request with retries, for the clients of the core package (the LLM judge, the remote env).

Retries follow :class:`~skyrl_gym.tools.search.RetryPolicy` (exponential back-off with jitter, the search tool's):
a connection error, a time-out or a status in ``retryable`` is tried again; any other answer is returned to the
caller, who decides what it means. Only calls that are safe to repeat may use it (the remote env makes its calls
safe with request ids).
"""

from __future__ import annotations

import time
from typing import Any, Collection, Optional, Tuple

from skyrl_gym.tools.search import RETRYABLE_STATUS, RetryPolicy


class RetriesExhausted(Exception):
    """Every attempt failed with a connection error, a time-out or a retryable status; ``reason`` says the last."""

    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(f"{reason}; gave up after {attempts} attempts")
        self.reason = reason
        self.attempts = attempts


def request_with_retries(
    session: Any,
    method: str,
    url: str,
    policy: RetryPolicy,
    timeout: Any,
    retryable: Collection[int] = RETRYABLE_STATUS,
    attempts: Optional[int] = None,
    **request_options: Any,
) -> Tuple[Any, int]:
    """``(response, attempts it took)`` for the first answer whose status is not in ``retryable``, or
    :class:`RetriesExhausted`. ``session`` is a ``requests.Session``; ``timeout`` is given to it as is; other
    errors of ``requests`` (an invalid URL, say) are raised at once."""
    import requests

    attempts = attempts or policy.attempts
    seconds = timeout[1] if isinstance(timeout, tuple) else timeout
    reason = "no attempt was made"
    for attempt in range(1, attempts + 1):
        try:
            response = session.request(method, url, timeout=timeout, **request_options)
        except requests.exceptions.Timeout:
            reason = f"no answer from {url} within {seconds:g} s"
        except requests.exceptions.ConnectionError as exc:
            reason = f"cannot connect to {url} ({type(exc).__name__})"
        else:
            if response.status_code not in retryable:
                return response, attempt
            reason = f"{url} answered HTTP {response.status_code}: {response.text[:200]!r}"
        if attempt < attempts:
            time.sleep(policy.delay(attempt))
    raise RetriesExhausted(reason, attempts)


__all__ = ["RetriesExhausted", "request_with_retries"]
