"""``RemoteEnv``: an env served by ``skyrl-gym serve-env``, driven like a local one.

>>> env = skyrl_gym.make("remote", url="http://127.0.0.1:8010", env_id="gsm8k", extras=row)
>>> observation, info = env.init(row["prompt"])
>>> output = env.step("#### 72")          # the server's gsm8k env scored it
>>> env.close()

Every call has a timeout. Calls are retried (exponential back-off with jitter, the search tool's
:class:`~skyrl_gym.tools.search.RetryPolicy`) on connection errors, time-outs, 429 and 502-504 only, and always with
the request id of the first try, which the server answers from the first try's result: a step is never applied
twice. A 4xx or an env that raised on the server becomes :class:`RemoteEnvError` with the server's message.
``close()`` ends the session on the server; sessions still open when the process exits are closed then.

``await env.astep(action)`` speaks to the server over ``aiohttp`` (one pooled session per event loop) so that
hundreds of episodes wait on one loop; without ``aiohttp`` it runs ``step`` on a worker thread.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import threading
import uuid
import weakref
from typing import Any, Dict, Optional, Tuple

from skyrl_gym.core import StepOutput
from skyrl_gym.errors import DataError, Error
from skyrl_gym.remote import TOKEN_ENV, URL_ENV
from skyrl_gym.remote.proxy import ProxyEnv
from skyrl_gym.remote.wire import encode
from skyrl_gym.tools.search import RetryPolicy

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
# The longest answer read from a service: a server may echo a 32 MB action in its observation (JSON escapes can
# make it several times longer); a hostile one that sends gigabytes would otherwise fill the trainer's memory.
MAX_REPLY_BYTES = 256 * 1024 * 1024
# The fields an answer to each call must have (a server that answers otherwise is named, not a KeyError).
_ANSWER_FIELDS = {"init": ("observation", "info"), "step": ("output",)}


class RemoteEnvError(Error):
    """The env service refused a call (the message is the server's), or could not be reached."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


class RemoteDataError(RemoteEnvError, DataError):
    """The service could not build the env from this row (a ``DataError`` on the server): the row is at fault."""


def _config_value(config: Any, key: str) -> Any:
    if config is None:
        return None
    getter = getattr(config, "get", None)
    if callable(getter):
        try:
            return getter(key, None)
        except Exception:
            return None
    return getattr(config, key, None)


_open_envs: "weakref.WeakSet[RemoteEnv]" = weakref.WeakSet()
_sync_sessions: Dict[Tuple[str, Optional[str]], Any] = {}
_sync_lock = threading.Lock()
_async_sessions: Dict[Tuple[int, str, Optional[str]], Tuple[Any, Any, Any]] = {}


async def _close_at_loop_shutdown(session: Any) -> Any:
    try:
        yield
    finally:
        if not session.closed:
            await session.close()


def _close_all_at_exit() -> None:
    for env in list(_open_envs):
        try:
            env.close(timeout_s=2.0)
        except Exception:
            pass


atexit.register(_close_all_at_exit)


def _spec_not_read(env_config: Any, missing: str, given: str) -> str:
    """Why ``env_config[missing]`` was not read: ``env_config`` is the remote's spec only when neither ``url=`` nor
    ``env_id=`` is passed; otherwise it is the served env's own settings."""
    if not hasattr(env_config, "get") or env_config.get(missing) is None:
        return ""
    return (f"; env_config[{missing!r}] was not read: env_config is the spec {{url, env_id, token, env_config}} "
            f"only when neither url= nor env_id= is passed, and {given}= was, so it is the served env's own "
            f"settings: pass {missing}= as well, or move {given} into env_config")


class RemoteEnv(ProxyEnv):
    """A session of ``env_id`` on the env service at ``url``; behaves like ``skyrl_gym.make(env_id, ...)``.

    ``url`` and ``env_id`` may also come from ``env_config`` (``{"url", "env_id", "token", "env_config"}``: the
    spelling a trainer's ``environment.skyrl_gym.remote`` section uses), ``url`` from ``SKYRL_GYM_ENV_SERVICE_URL``
    and ``token`` from ``SKYRL_GYM_ENV_SERVICE_TOKEN``, which is sent only to the service that
    ``SKYRL_GYM_ENV_SERVICE_URL`` names (never to a ``url`` from a config or a row: that one needs
    ``token=``). ``timeout_s`` bounds each HTTP call (a step that takes longer on the server is waited for by
    the retry, not applied again); ``attempts`` counts tries per call.
    """

    # make("remote", env_config={...}) (a trainer's environment.skyrl_gym.remote section): the service and the
    # env it serves; env_config is the served env's own.
    config_defaults = {"url": None, "env_id": None, "token": None, "env_config": None}

    def __init__(
        self,
        url: Optional[str] = None,
        env_id: Optional[str] = None,
        env_config: Any = None,
        extras: Optional[Dict[str, Any]] = None,
        token: Optional[str] = None,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        attempts: int = 4,
        retry_delay_s: float = 0.2,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        super().__init__()
        if url is None and env_id is None and env_config is not None:  # the remote described by env_config
            url, env_id = _config_value(env_config, "url"), _config_value(env_config, "env_id")
            token = token or _config_value(env_config, "token")
            env_config = _config_value(env_config, "env_config")
        url = url or os.environ.get(URL_ENV)
        if not url:
            raise RemoteEnvError(
                f"RemoteEnv needs the service's url (url=..., env_config['url'] or {URL_ENV}); "
                f"start one with `skyrl-gym serve-env`" + _spec_not_read(env_config, "url", "env_id")
            )
        if not isinstance(env_id, str) or not env_id:
            raise RemoteEnvError(
                "RemoteEnv needs env_id: the id of the env the service should build (e.g. 'gsm8k')"
                + _spec_not_read(env_config, "env_id", "url")
            )
        if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
            raise RemoteEnvError(f"RemoteEnv's url must start with http:// or https://, got {url!r:.200} "
                                 "(e.g. http://127.0.0.1:8010)")
        if hasattr(env_config, "items") and not isinstance(env_config, dict):  # an OmegaConf section
            env_config = {k: v for k, v in env_config.items()}
        self.url = str(url).rstrip("/")
        self.env_id = env_id
        self.token = token or None
        self._token_hint = ""
        if self.token is None:  # the environment's token, bound to its URL
            from skygym_sandboxes.origins import bound_token

            self.token, self._token_hint = bound_token(self.url, TOKEN_ENV, URL_ENV)
        self.timeout_s = float(timeout_s)
        self.max_reply_bytes = int(max_reply_bytes)
        self.connect_timeout_s = float(connect_timeout_s)
        self.retry = RetryPolicy(attempts=max(1, int(attempts)), initial_delay_s=float(retry_delay_s))
        self.session_id = uuid.uuid4().hex
        self._describe({})
        self._closed = False
        self.close_error: Optional[str] = None
        body = {"session_id": self.session_id, "env_id": env_id, "env_config": env_config, "extras": extras}
        # session_id is ours: a retried create finds the session made by the first try
        described = self._call("POST", "/sessions", body, what="create")
        self._describe(described)
        _open_envs.add(self)

    def __str__(self) -> str:
        return f"RemoteEnv<{self.env_id} at {self.url}>"

    # ----- HTTP ------------------------------------------------------------------------------------------------
    def _headers(self) -> Dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _sync_session(self) -> Any:
        import requests
        from requests.adapters import HTTPAdapter

        key = (self.url, self.token)
        with _sync_lock:
            session = _sync_sessions.get(key)
            if session is None:
                session = requests.Session()
                adapter = HTTPAdapter(pool_connections=4, pool_maxsize=256, max_retries=0)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
                _sync_sessions[key] = session
            return session

    def _failure(self, what: str, status: int, text: str) -> RemoteEnvError:
        error_type = None
        try:
            answer = json.loads(text)
            message, error_type = answer.get("error") or text, answer.get("error_type")
        except (ValueError, AttributeError):
            message = text
        kind = RemoteDataError if error_type in ("DataError", "MissingRewardSpec") else RemoteEnvError
        hint = ""
        if status == 401:  # the server's own message speaks to its operator; this one to the client's author
            hint = self._token_hint or (f" (this client sends the token given as token=, else ${TOKEN_ENV} when "
                                        f"${URL_ENV} names this server)")
        return kind(
            f"remote env {self.env_id!r} at {self.url}: {what} failed (HTTP {status}): {str(message)[:2000]}"
            + hint,
            status,
        )

    def _unreachable_hint(self, failure: str) -> str:
        if "onnect" not in failure:  # ConnectionError, "cannot connect": nothing answered at all
            return ""
        return f" (is `skyrl-gym serve-env` running at {self.url}, and reachable from here?)"

    def _call(
        self,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]],
        what: str,
        timeout_s: Optional[float] = None,
        attempts: Optional[int] = None,
    ) -> Dict[str, Any]:
        from skyrl_gym.http_retry import ReplyTooLarge, RetriesExhausted, request_with_retries

        try:
            response, _ = request_with_retries(
                self._sync_session(),
                method,
                self.url + path,
                self.retry,
                (self.connect_timeout_s, timeout_s or self.timeout_s),
                RETRYABLE_STATUS,
                attempts,
                data=None if body is None else encode(body),
                headers=self._headers(),
                max_body_bytes=self.max_reply_bytes,
            )
        except (RetriesExhausted, ReplyTooLarge) as exc:
            raise RemoteEnvError(f"remote env {self.env_id!r} at {self.url}: {what} failed: {exc}"
                                 + self._unreachable_hint(str(exc)), getattr(exc, "status", None)) from None
        if response.status_code >= 300:  # a redirect is not followed: the answer is the service's own or none
            raise self._failure(what, response.status_code, response.text)
        return self._parsed(response.text, what)

    def _parsed(self, text: str, what: str) -> Dict[str, Any]:
        """A successful answer: a JSON object with the fields ``what`` needs, else a :class:`RemoteEnvError`."""
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
            problem = "something that is not JSON"
        else:
            missing = [f for f in _ANSWER_FIELDS.get(what, ()) if f not in answer] if isinstance(answer, dict) else []
            problem = (f"a JSON {type(answer).__name__}, not an object" if not isinstance(answer, dict)
                       else f"an object without {', '.join(missing)}" if missing else "")
        if problem:
            raise RemoteEnvError(f"remote env {self.env_id!r} at {self.url}: {what} answered {problem}: "
                                 f"{text[:300]!r}")
        return answer

    async def _async_session(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        key = (id(loop), self.url, self.token)
        entry = _async_sessions.get(key)
        if entry is not None and entry[0] is loop and not entry[1].closed:
            return entry[1]
        for stale_key, (stale_loop, _, _) in list(_async_sessions.items()):
            if stale_loop.is_closed():
                del _async_sessions[stale_key]
        connector = aiohttp.TCPConnector(limit=1024, limit_per_host=1024)
        session = aiohttp.ClientSession(connector=connector, headers=self._headers())
        # The loop finalises its async generators when it shuts down (asyncio.run does): one that holds the
        # session closes it then, so a caller that never calls close_async_sessions() leaks nothing.
        keeper = _close_at_loop_shutdown(session)
        await keeper.__anext__()
        _async_sessions[key] = (loop, session, keeper)
        return session

    async def _acall(
        self, method: str, path: str, body: Optional[Dict[str, Any]], what: str
    ) -> Dict[str, Any]:
        import aiohttp

        from skyrl_gym.http_retry import ReplyTooLarge, read_capped

        session = await self._async_session()
        url = self.url + path
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, connect=self.connect_timeout_s)
        data = None if body is None else encode(body)
        last, last_status = "no attempt was made", None
        for attempt in range(1, self.retry.attempts + 1):
            last_status = None
            try:
                async with session.request(method, url, data=data, timeout=timeout) as response:
                    try:
                        text = (await read_capped(response, self.max_reply_bytes, url, attempt)).decode(
                            "utf-8", "replace")
                    except ReplyTooLarge as exc:
                        raise RemoteEnvError(f"remote env {self.env_id!r} at {self.url}: {what} failed: {exc}")
                    if response.status in RETRYABLE_STATUS:
                        last, last_status = f"HTTP {response.status}: {text[:300]}", response.status
                    elif response.status >= 400:
                        raise self._failure(what, response.status, text)
                    else:
                        return self._parsed(text, what)
            except asyncio.TimeoutError:
                last = f"no answer within {self.timeout_s:g} s"
            except aiohttp.ClientConnectionError as exc:
                last = f"cannot connect ({type(exc).__name__})"
            if attempt < self.retry.attempts:
                await asyncio.sleep(self.retry.delay(attempt))
        raise RemoteEnvError(
            f"remote env {self.env_id!r} at {self.url}: {what} failed: {last}; gave up after "
            f"{self.retry.attempts} attempts" + self._unreachable_hint(last), last_status
        )

    @staticmethod
    async def close_async_sessions() -> None:
        """Close the pooled connections of the running event loop (call before the loop ends)."""
        loop = asyncio.get_running_loop()
        for key, (owner, session, _keeper) in list(_async_sessions.items()):
            if owner is loop:
                del _async_sessions[key]
                await session.close()

    # ----- the episode -------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RemoteEnvError(f"remote env {self.env_id!r}: the session was closed")

    def init(self, prompt: Any = None) -> Tuple[Any, Dict[str, Any]]:
        self._check_open()
        answer = self._call(
            "POST",
            f"/sessions/{self.session_id}/init",
            {"prompt": prompt, "request_id": uuid.uuid4().hex},
            what="init",
        )
        self.turns = 0
        self._metrics = None
        return answer["observation"], answer["info"]

    def _step_body(self, action: Any) -> Dict[str, Any]:
        body: Dict[str, Any] = {"action": action, "request_id": uuid.uuid4().hex}  # one id for every retry
        if self._max_turns_to_send is not None:
            body["max_turns"] = self._max_turns_to_send
        return body

    def step(self, action: Any) -> StepOutput:
        self._check_open()
        return self._stepped(
            self._call("POST", f"/sessions/{self.session_id}/step", self._step_body(action), what="step")
        )

    async def astep(self, action: Any) -> StepOutput:
        self._check_open()
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            return await asyncio.to_thread(self.step, action)
        return self._stepped(
            await self._acall(
                "POST", f"/sessions/{self.session_id}/step", self._step_body(action), what="step"
            )
        )

    def get_metrics(self) -> Dict[str, Any]:
        if self._metrics is not None:  # sent with the step that ended the episode
            return dict(self._metrics)
        if self._closed:
            return {}
        return self._call("GET", f"/sessions/{self.session_id}/metrics", None, what="get_metrics")

    def close(self, timeout_s: Optional[float] = None) -> None:
        """End the session on the server (a closed or expired session is fine); a second call does nothing.

        A server that cannot be reached does not make ``close`` raise: the session expires there after its idle
        timeout. The reason is kept in ``close_error`` and logged."""
        if self._closed:
            return
        self._closed = True
        _open_envs.discard(self)
        try:
            answer = self._call(
                "DELETE",
                f"/sessions/{self.session_id}",
                None,
                what="close",
                timeout_s=timeout_s,
                attempts=2 if timeout_s else None,
            )
        except RemoteEnvError as exc:
            self.close_error = str(exc)
            logger.warning("%s (the session expires on the server when idle)", exc)
            return
        if answer.get(
            "close_error"
        ):  # the server's env failed to close: as a local env's close() would raise
            raise RemoteEnvError(
                f"remote env {self.env_id!r}: close() on the server raised {answer['close_error']}"
            )


__all__ = ["RemoteDataError", "RemoteEnv", "RemoteEnvError"]
