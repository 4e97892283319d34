"""``SearchToolGroup``: a ``search`` tool that asks a retrieval service over HTTP.

The client posts ``{"query", "topk", "return_scores"}`` to ``search_url`` (the API of
``skyrl-gym serve-retriever`` and of Search-R1's server), reuses pooled connections, and retries
with exponential back-off on 5xx answers, connection errors and time-outs. When the service
stays down the tool returns an error text for the model; it never raises.

Two paths with the same behaviour: ``search`` (``requests``, a pooled session shared per host)
for synchronous envs, and ``asearch`` (``aiohttp``, one pooled session per event loop) so that
hundreds of episodes can wait on the service at once without threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import logging
import random
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlparse

from skygym_sandboxes.http_bodies import read_reply_capped_async
from skygym_sandboxes.http_deadlines import AnswerCut, capped_answer

from skyrl_gym.retrieval.server import MAX_QUERY_CHARS  # a longer query is cut to it before it is sent
from skyrl_gym.tools.core import ToolGroup, tool

logger = logging.getLogger(__name__)

DEFAULT_SEARCH_URL = "http://127.0.0.1:8000/retrieve"


def _auth_headers(url: str) -> Dict[str, str]:
    """``$SKYRL_GYM_RETRIEVER_TOKEN`` as a bearer header, for the retriever the operator configured only
    (``$SKYRL_GYM_RETRIEVER_URL``, else the default URL): a ``search_url`` from elsewhere never gets it."""
    from skygym_sandboxes.origins import bound_token

    from skyrl_gym.retrieval.server import TOKEN_ENV, URL_ENV

    token, _hint = bound_token(url, TOKEN_ENV, URL_ENV, DEFAULT_SEARCH_URL)
    return {"Authorization": f"Bearer {token}"} if token else {}


DEFAULT_TIMEOUT = 30.0
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# The longest answer read from a retriever (the server sends at most 10,000 documents per request): a hostile
# one that answers with gigabytes would otherwise fill the trainer's memory.
MAX_REPLY_BYTES = 64 * 1024 * 1024
# The longest error answer read (its first 200 characters are shown).
MAX_ERROR_BYTES = 64 * 1024
# SkyRL-gym's names for the default retry policy of ``call_search_api`` (read at call time, so assigning
# them changes the default). Ours are 4 tries from 0.5 s; SkyRL-gym's are 10 from 1 s.
MAX_RETRIES = 4
INITIAL_RETRY_DELAY = 0.5

SearchResponse = Tuple[Optional[Dict[str, Any]], Optional[str]]


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; the wait before try n+1 is ``initial_delay_s * 2**(n-1)`` (capped,
    with up to 25 % jitter so that many clients do not retry in lockstep)."""

    attempts: int = 4
    initial_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay_s, self.initial_delay_s * (2 ** (attempt - 1)))
        return base * (1.0 + 0.25 * random.random())

    def longest_wait(self, attempts: Optional[int] = None) -> float:
        """The most time the back-offs between ``attempts`` tries (default: all) can take, jitter included."""
        tries = self.attempts if attempts is None else attempts
        return sum(min(self.max_delay_s, self.initial_delay_s * 2 ** (n - 1)) * 1.25 for n in range(1, tries))


# The retry policy of the SearchToolGroup that is calling: the tool calls ``call_search_api`` with
# SkyRL-gym's keyword arguments only, so that a replacement written for SkyRL-gym keeps working.
_active_retry: contextvars.ContextVar[Optional[RetryPolicy]] = contextvars.ContextVar("search_retry", default=None)


def _retry_policy(retry: Optional[RetryPolicy]) -> RetryPolicy:
    if retry is not None:
        return retry
    active = _active_retry.get()
    return active if active is not None else RetryPolicy(attempts=MAX_RETRIES, initial_delay_s=INITIAL_RETRY_DELAY)


def _payload(query: str, topk: int, return_scores: bool) -> Dict[str, Any]:
    return {"query": query, "topk": topk, "return_scores": return_scores}


def _log_prefix() -> str:
    return f"[search {uuid.uuid4().hex[:8]}] "


def call_search_api(
    retrieval_service_url: str,
    query: str,
    topk: int = 3,
    return_scores: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    log_requests: bool = False,
    session: Any = None,
    retry: Optional[RetryPolicy] = None,
) -> SearchResponse:
    """POST one query; ``(response_json, None)`` on success, ``(None, error_message)`` otherwise.

    ``retry``: the policy; by default the calling ``SearchToolGroup``'s, else ``MAX_RETRIES`` tries."""
    import requests

    retry = _retry_policy(retry)
    prefix = _log_prefix()
    own_session = session is None
    session = session or requests.Session()
    last_error = "no attempt was made"
    try:
        for attempt in range(1, retry.attempts + 1):
            try:
                if log_requests:
                    logger.info("%sattempt %d/%d: POST %s", prefix, attempt, retry.attempts, retrieval_service_url)
                # the whole answer within `timeout`, not each read of it; no redirects
                response, whole = capped_answer(session, "POST", retrieval_service_url, timeout, MAX_REPLY_BYTES,
                                                json=_payload(query, topk, return_scores), timeout=timeout)
                if not whole:
                    return None, f"API Response Error: the retriever answered more than {MAX_REPLY_BYTES} bytes"
                if response.status_code in RETRYABLE_STATUS:
                    last_error = f"Server Error ({response.status_code}) on attempt {attempt}/{retry.attempts}"
                elif response.status_code >= 400:
                    return None, f"API Request Error: HTTP {response.status_code}: {response.text[:200]}"
                elif response.status_code >= 300:
                    return None, (f"API Request Error: HTTP {response.status_code} (redirects are not followed: "
                                  "point search_url at the retriever itself)")
                else:
                    try:
                        return response.json(), None
                    except ValueError as exc:
                        return None, f"API Response JSON Decode Error: {exc}; response starts {response.text[:200]!r}"
            except (AnswerCut, requests.exceptions.RequestException) as exc:
                if isinstance(exc, (AnswerCut, requests.exceptions.Timeout)):
                    last_error = f"Timeout Error: no answer within {timeout:g} s on attempt {attempt}/{retry.attempts}"
                elif isinstance(exc, requests.exceptions.ConnectionError):
                    last_error = f"Connection Error on attempt {attempt}/{retry.attempts}: {type(exc).__name__}"
                else:
                    return None, f"API Request Error: {exc}"
            _log_failed_attempt(prefix, last_error, retrieval_service_url)
            if attempt < retry.attempts:
                time.sleep(retry.delay(attempt))
    finally:
        if own_session:
            session.close()
    return None, f"{last_error}; gave up after {retry.attempts} attempts"


def _log_failed_attempt(prefix: str, error: str, url: str) -> None:
    """The log line of a failed attempt: the error the model sees, and for the operator where it went (the
    observation leaves the URL out)."""
    hint = " (no retrieval server there? `skyrl-gym serve-retriever` starts one)" if error.startswith(
        "Connection Error") else ""
    logger.warning("%s%s: POST %s%s", prefix, error, url, hint)


async def acall_search_api(
    retrieval_service_url: str,
    query: str,
    session: Any,
    topk: int = 3,
    return_scores: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    log_requests: bool = False,
    retry: RetryPolicy = RetryPolicy(),
) -> SearchResponse:
    """The asynchronous :func:`call_search_api` over an ``aiohttp.ClientSession``."""
    import aiohttp

    prefix = _log_prefix()
    last_error = "no attempt was made"
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    for attempt in range(1, retry.attempts + 1):
        try:
            if log_requests:
                logger.info("%sattempt %d/%d: POST %s", prefix, attempt, retry.attempts, retrieval_service_url)
            async with session.post(
                retrieval_service_url, json=_payload(query, topk, return_scores), timeout=client_timeout
            ) as response:
                if response.status in RETRYABLE_STATUS:
                    last_error = f"Server Error ({response.status}) on attempt {attempt}/{retry.attempts}"
                elif response.status >= 400:  # its body capped too: an endless 400 filled the trainer's memory
                    text = await read_reply_capped_async(response, MAX_ERROR_BYTES)
                    shown = "(longer than the cap)" if text is None else text[:200].decode("utf-8", "replace")
                    return None, f"API Request Error: HTTP {response.status}: {shown}"
                else:
                    body = await read_reply_capped_async(response, MAX_REPLY_BYTES)
                    if body is None:
                        return None, f"API Response Error: the retriever answered more than {MAX_REPLY_BYTES} bytes"
                    try:
                        return json.loads(body), None
                    except ValueError as exc:
                        return None, f"API Response JSON Decode Error: {exc}; response starts {body[:200]!r}"
        except asyncio.TimeoutError:
            last_error = f"Timeout Error: no answer within {timeout:g} s on attempt {attempt}/{retry.attempts}"
        except aiohttp.ClientConnectionError as exc:
            last_error = f"Connection Error on attempt {attempt}/{retry.attempts}: {type(exc).__name__}"
        except aiohttp.ClientError as exc:
            return None, f"API Request Error: {exc}"
        _log_failed_attempt(prefix, last_error, retrieval_service_url)
        if attempt < retry.attempts:
            await asyncio.sleep(retry.delay(attempt))
    return None, f"{last_error}; gave up after {retry.attempts} attempts"


def passages_to_string(retrieval_result: List[Any]) -> str:
    """``Doc 1: ...`` lines for one query's hits (each a ``{"document": doc, "score": s}`` or a doc)."""
    lines = []
    for index, item in enumerate(retrieval_result, start=1):
        document = item.get("document", item) if isinstance(item, dict) else {}
        content = str(document.get("contents", document.get("text", ""))).strip()
        lines.append(f"Doc {index}: {content}\n")
    return "".join(lines)


def format_search_result(api_response: Optional[Dict[str, Any]], error_msg: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    """The tool's text (a JSON object ``{"result": ...}``, as SkyRL-gym returns it) and metadata."""
    metadata: Dict[str, Any] = {"status": "unknown", "total_results": 0, "api_request_error": error_msg}
    if error_msg:
        metadata["status"] = "api_error"
        return json.dumps({"result": f"Search error: {error_msg}"}), metadata
    if not isinstance(api_response, dict):
        metadata["status"] = "unknown_api_state"
        return json.dumps({"result": "Unknown API state (no response and no error message)."}), metadata
    try:
        raw_results = api_response.get("result", [])
        if not raw_results or not any(raw_results):
            metadata["status"] = "no_results"
            return json.dumps({"result": "No search results found."}), metadata
        pretty = [passages_to_string(hits) for hits in raw_results]
        metadata["status"] = "success"
        metadata["total_results"] = sum(len(hits) if isinstance(hits, list) else 1 for hits in raw_results)
        return json.dumps({"result": "\n---\n".join(pretty)}), metadata
    except Exception as exc:  # a malformed answer from the service becomes text, not a crash
        metadata["status"] = "processing_error"
        return json.dumps({"result": f"Error processing search results: {exc}"}), metadata


class SearchToolGroup(ToolGroup):
    """The ``search`` tool. Connections are pooled per host (sync) and per event loop (async)."""

    _session_pool: Dict[str, Any] = {}
    _session_lock = threading.Lock()
    _async_sessions: Dict[Tuple[int, str], Tuple[Any, Any]] = {}

    def __init__(
        self,
        search_url: str = DEFAULT_SEARCH_URL,
        topk: int = 3,
        timeout: float = DEFAULT_TIMEOUT,
        log_requests: bool = False,
        retry: RetryPolicy = RetryPolicy(),
        max_connections: int = 256,
    ) -> None:
        self.search_url = search_url
        self.topk = int(topk)
        self.timeout = float(timeout)
        self.log_requests = log_requests
        self.retry = retry
        self.max_connections = max_connections
        parsed = urlparse(search_url)
        self.base_url = f"{parsed.scheme}://{parsed.netloc}"
        self.last_metadata: Dict[str, Any] = {}
        super().__init__(name="SearchToolGroup")

    # ----- pooled sessions ------------------------------------------------------------------
    @classmethod
    def _get_shared_session(cls, base_url: str, max_connections: int = 256) -> Any:
        import requests
        from requests.adapters import HTTPAdapter

        headers = _auth_headers(base_url)
        key = f"{base_url} {headers}"  # a token set (or changed) later gets a session of its own
        with cls._session_lock:
            session = cls._session_pool.get(key)
            if session is None:
                session = requests.Session()
                session.headers.update(headers)
                adapter = HTTPAdapter(pool_connections=16, pool_maxsize=max_connections, max_retries=0)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
                cls._session_pool[key] = session
            return session

    def _get_async_session(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        key = (id(loop), self.base_url)
        entry = self._async_sessions.get(key)
        if entry is not None and entry[0] is loop and not entry[1].closed:
            return entry[1]
        # Drop sessions of loops that are gone, then open one for this loop.
        for stale_key, (stale_loop, _) in list(self._async_sessions.items()):
            if stale_loop.is_closed():
                del self._async_sessions[stale_key]
        connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=self.max_connections)
        session = aiohttp.ClientSession(connector=connector, headers=_auth_headers(self.base_url))
        self._async_sessions[key] = (loop, session)
        return session

    @classmethod
    async def close_async_sessions(cls) -> None:
        """Close the pooled sessions of the running event loop (call before the loop ends)."""
        loop = asyncio.get_running_loop()
        for key, (owner, session) in list(cls._async_sessions.items()):
            if owner is loop:
                del cls._async_sessions[key]
                await session.close()

    # ----- the tool -------------------------------------------------------------------------
    @tool
    def search(self, query: str) -> str:
        """Search the knowledge corpus and return the top passages.

        Args:
            query: what to look for, in a few words.
        """
        if query is None:
            return ""
        token = _active_retry.set(self.retry)
        try:  # SkyRL-gym's keyword arguments only: a replacement of call_search_api with its signature works
            api_response, error_msg = call_search_api(
                retrieval_service_url=self.search_url, query=query.strip()[:MAX_QUERY_CHARS], topk=self.topk,
                timeout=self.timeout, log_requests=self.log_requests,
                session=self._get_shared_session(self.base_url, self.max_connections),
            )
        except Exception as exc:  # ours never raises; a replacement may (SkyRL-gym's words for it)
            api_response, error_msg = None, f"API Request Exception during batch search: {exc}"
        finally:
            _active_retry.reset(token)
        text, self.last_metadata = format_search_result(api_response, error_msg)
        return text

    async def asearch(self, query: Optional[str]) -> str:
        """:meth:`search` on the event loop (aiohttp); falls back to a worker thread without aiohttp."""
        if query is None:
            return ""
        try:
            session = self._get_async_session()
        except ImportError:
            from skyrl_gym.tools.blocking import run_blocking

            return await run_blocking(self.search, query)
        api_response, error_msg = await acall_search_api(
            self.search_url, query.strip()[:MAX_QUERY_CHARS], session, topk=self.topk, timeout=self.timeout,
            log_requests=self.log_requests, retry=self.retry,
        )
        text, self.last_metadata = format_search_result(api_response, error_msg)
        return text
