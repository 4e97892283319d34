"""LLM-as-judge rewards: a response, a reference and a rubric, scored by any OpenAI-compatible chat endpoint.

The endpoint comes from ``env_config["judge"]`` (keys below) or from environment variables:

============================  ==================  =================================================
``env_config["judge"]`` key   variable            meaning
============================  ==================  =================================================
``base_url``                  SKYRL_GYM_JUDGE_URL  the server (``http://host:8000`` or ``.../v1``)
``model``                     SKYRL_GYM_JUDGE_MODEL the model name the server expects
``api_key``                   SKYRL_GYM_JUDGE_API_KEY  sent as ``Authorization: Bearer``
``timeout_s`` (60)            SKYRL_GYM_JUDGE_TIMEOUT  seconds per attempt
``attempts`` (3)              SKYRL_GYM_JUDGE_ATTEMPTS tries on connection errors, timeouts, 429 and 5xx
``max_concurrency`` (16)      SKYRL_GYM_JUDGE_CONCURRENCY  requests in flight per endpoint in this process
``cache_size`` (10000)        --                  verdicts kept in memory (0: no cache)
``max_tokens`` (512)          --                  the judge's answer budget
``max_response_chars`` (16000) --                 the tail of the response that is judged
============================  ==================  =================================================

One :class:`JudgeClient` per endpoint and process (:func:`client_for`) holds the connection pools, the cache of
verdicts (identical requests are asked once, also when they arrive together) and the counters. Retries reuse the
search tool's :class:`~skyrl_gym.tools.search.RetryPolicy` (exponential back-off with jitter).

:func:`parse_verdict` reads the judge's answer: ``SCORE: 0.8``, ``score = 7/10``, ``{"score": 1}``,
``VERDICT: CORRECT``, a bare number or label. A request or an answer that fails gives a :class:`Verdict` with
``error`` set and no score, never an exception: the env turns it into reward 0 with the error in metadata.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import math
import os
import re
import threading
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from skyrl_gym.errors import Error
from skyrl_gym.tools.search import RetryPolicy

URL_ENV = "SKYRL_GYM_JUDGE_URL"
MODEL_ENV = "SKYRL_GYM_JUDGE_MODEL"
API_KEY_ENV = "SKYRL_GYM_JUDGE_API_KEY"
TIMEOUT_ENV = "SKYRL_GYM_JUDGE_TIMEOUT"
ATTEMPTS_ENV = "SKYRL_GYM_JUDGE_ATTEMPTS"
CONCURRENCY_ENV = "SKYRL_GYM_JUDGE_CONCURRENCY"

DEFAULT_RUBRIC = (
    "Score 1 if the response's final answer is equivalent to the reference answer, 0 if it is not. "
    "Judge the final answer only, not the style or the length of the reasoning."
)
SYSTEM_PROMPT = (
    "You are a strict, fair grader. You compare a response with a reference answer, following the rubric. "
    "Think briefly if you need to, then end your answer with one line of the form `SCORE: <a number from 0 to 1>`."
)


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` (or attribute ``key``) of a dict, OmegaConf ``DictConfig`` or dataclass; ``default`` when
    absent or None (envs' ``skyrl_gym.envs.config_values``, which this package cannot import)."""
    if config is None:
        return default
    if isinstance(config, Mapping) or hasattr(config, "get"):
        try:
            value = config.get(key, None)
        except Exception:
            value = None
    else:
        value = getattr(config, key, None)
    return default if value is None else value


class JudgeError(Error):
    """The judge is misconfigured (no endpoint, no model), unreachable, or its answer cannot be read."""

    attempts = 0  # the HTTP attempts made before the error (set by the client)


@dataclasses.dataclass(frozen=True)
class JudgeEndpoint:
    """Where and how to ask the judge. Build it with :meth:`from_config`."""

    base_url: str
    model: str
    api_key: Optional[str] = dataclasses.field(default=None, repr=False)
    timeout_s: float = 60.0
    attempts: int = 3
    max_concurrency: int = 16
    cache_size: int = 10_000
    max_tokens: int = 512
    temperature: float = 0.0
    max_response_chars: int = 16_000
    retry_delay_s: float = 0.5

    @property
    def chat_url(self) -> str:
        """``.../chat/completions``: a base URL ending in ``/v1`` (the OpenAI client's convention) gets
        ``/chat/completions``, a bare server address ``/v1/chat/completions``."""
        url = self.base_url.rstrip("/")
        if url.endswith("/chat/completions"):
            return url
        if url.endswith("/v1"):
            return url + "/chat/completions"
        return url + "/v1/chat/completions"

    @classmethod
    def from_config(cls, env_config: Any = None) -> "JudgeEndpoint":
        """The endpoint from ``env_config["judge"]``, each key falling back to its environment variable."""
        section = config_value(env_config, "judge", None)
        if section is not None and not (isinstance(section, Mapping) or hasattr(section, "get")):
            raise JudgeError(
                f"env_config.judge must be a dict of judge settings, got {type(section).__name__}"
            )

        def setting(key: str, variable: Optional[str], default: Any) -> Any:
            value = config_value(section, key, None) if section is not None else None
            if value is None and variable:
                value = os.environ.get(variable) or None
            return default if value is None else value

        base_url = setting("base_url", URL_ENV, None) or setting("url", None, None)
        if not base_url:
            raise JudgeError(
                f"reward_spec.method is 'judge' but no judge endpoint is configured: set env_config "
                f"judge.base_url (e.g. 'http://127.0.0.1:8000/v1') or the {URL_ENV} environment variable"
            )
        base_url = str(base_url)
        if not re.match(r"^https?://[^/\s]+", base_url):
            raise JudgeError(f"judge base_url must be an http:// or https:// URL, got {base_url!r}")
        model = setting("model", MODEL_ENV, None)
        if not model:
            raise JudgeError(
                f"no judge model is configured for {base_url}: set env_config judge.model or {MODEL_ENV} "
                f"(the name the server lists under /v1/models)"
            )
        try:
            endpoint = cls(
                base_url=base_url,
                model=str(model),
                api_key=setting("api_key", API_KEY_ENV, None),
                timeout_s=float(setting("timeout_s", TIMEOUT_ENV, 60.0)),
                attempts=int(setting("attempts", ATTEMPTS_ENV, 3)),
                max_concurrency=int(setting("max_concurrency", CONCURRENCY_ENV, 16)),
                cache_size=int(setting("cache_size", None, 10_000)),
                max_tokens=int(setting("max_tokens", None, 512)),
                temperature=float(setting("temperature", None, 0.0)),
                max_response_chars=int(setting("max_response_chars", None, 16_000)),
                retry_delay_s=float(setting("retry_delay_s", None, 0.5)),
            )
        except (TypeError, ValueError) as exc:
            raise JudgeError(f"a judge setting is not a number: {exc}") from exc
        if endpoint.timeout_s <= 0 or endpoint.attempts < 1 or endpoint.max_concurrency < 1:
            raise JudgeError(
                f"judge timeout_s must be > 0, attempts and max_concurrency >= 1; got {endpoint.timeout_s}, "
                f"{endpoint.attempts}, {endpoint.max_concurrency}"
            )
        return endpoint


@dataclasses.dataclass
class Verdict:
    """The judge's answer: ``score`` in [0, 1] (None when ``error`` says why there is none), the label it gave
    (``correct``...), its text, whether it came from the cache, and the HTTP attempts it took."""

    score: Optional[float]
    label: Optional[str] = None
    text: str = ""
    error: Optional[str] = None
    cached: bool = False
    attempts: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.score is not None

    def to_metadata(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {"score": self.score, "cached": self.cached, "attempts": self.attempts}
        if self.label is not None:
            data["label"] = self.label
        if self.error is not None:
            data["error"] = self.error
        data["text"] = self.text[-2000:]
        return data


# ----- reading the verdict --------------------------------------------------------------------------------------
_LABELS = {
    "correct": 1.0,
    "incorrect": 0.0,
    "pass": 1.0,
    "fail": 0.0,
    "yes": 1.0,
    "no": 0.0,
    "right": 1.0,
    "wrong": 0.0,
    "true": 1.0,
    "false": 0.0,
    "partially correct": 0.5,
    "partial": 0.5,
    "accept": 1.0,
    "reject": 0.0,
}
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_SCORE_LINE = re.compile(
    rf"(?:final\s+)?(?:score|rating|grade|reward)\**\s*[:=]\s*\**\s*({_NUMBER})\s*(?:(?:/|out\s+of)\s*({_NUMBER}))?",
    re.IGNORECASE,
)
_LABEL_ALTERNATIVES = "|".join(sorted((re.escape(k) for k in _LABELS), key=len, reverse=True))
_VERDICT_LINE = re.compile(
    rf"(?:verdict|judgement|judgment|decision|grade|label)\**\s*[:=]\s*[\*\"'`\[]*\s*({_LABEL_ALTERNATIVES})\b",
    re.IGNORECASE,
)
_BARE_NUMBER = re.compile(rf"^\s*({_NUMBER})\s*(?:/\s*({_NUMBER}))?\s*$")


def _scaled(value: float, out_of: Optional[float], scale: float, text: str) -> float:
    if out_of is not None:
        if out_of <= 0:
            raise JudgeError(f"the judge's score has a denominator of {out_of:g}: {text[-200:]!r}")
        value = value / out_of
    elif scale != 1.0:
        value = value / scale
    if not math.isfinite(value) or value < 0.0 or value > 1.0:
        hint = (
            " (set reward_spec.scale to the rubric's top score, e.g. 10)"
            if out_of is None and value > 1
            else ""
        )
        raise JudgeError(f"the judge's score {value:g} is outside [0, 1]{hint}: {text[-200:]!r}")
    return value


def _from_json(text: str, scale: float) -> Optional[Tuple[float, Optional[str]]]:
    candidates = re.findall(r"\{[^{}]*\}", text)
    for candidate in reversed(candidates):
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        for key in ("score", "rating", "reward", "grade"):
            value = data.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return _scaled(float(value), None, scale, text), None
            if isinstance(value, str) and re.fullmatch(_NUMBER, value.strip()):
                return _scaled(float(value), None, scale, text), None
        for key in ("verdict", "label", "judgement", "judgment", "decision"):
            value = data.get(key)
            if isinstance(value, str) and value.strip().lower() in _LABELS:
                label = value.strip().lower()
                return _LABELS[label], label
    return None


def parse_verdict(text: Any, scale: float = 1.0) -> Tuple[float, Optional[str]]:
    """``(score in [0, 1], label or None)`` from a judge's answer, or :class:`JudgeError` saying why not.

    The last labelled score wins (judges reason first): ``SCORE: 0.5``, ``Score = 7/10``, ``**Score:** 1``; then a
    JSON object with ``score`` or ``verdict``; then ``VERDICT: CORRECT`` (correct/incorrect, pass/fail, yes/no,
    partially correct); then an answer that is only a number or a label. ``scale`` divides a score given without a
    denominator (a rubric from 0 to 10 has ``scale=10``)."""
    if not isinstance(text, str) or not text.strip():
        raise JudgeError(f"the judge gave an empty answer: {text!r}")
    if scale <= 0 or not math.isfinite(scale):
        raise JudgeError(f"reward_spec.scale must be a positive number, got {scale!r}")
    scores = list(_SCORE_LINE.finditer(text))
    if scores:
        last = scores[-1]
        out_of = float(last.group(2)) if last.group(2) else None
        return _scaled(float(last.group(1)), out_of, scale, text), None
    from_json = _from_json(text, scale)
    if from_json is not None:
        return from_json
    verdicts = list(_VERDICT_LINE.finditer(text))
    if verdicts:
        label = verdicts[-1].group(1).lower()
        return _LABELS[label], label
    stripped = text.strip().strip("*`'\".!").strip()
    bare = _BARE_NUMBER.match(stripped)
    if bare:
        out_of = float(bare.group(2)) if bare.group(2) else None
        return _scaled(float(bare.group(1)), out_of, scale, text), None
    if stripped.lower() in _LABELS:
        return _LABELS[stripped.lower()], stripped.lower()
    raise JudgeError(
        f"could not read a score from the judge's answer (expected a line 'SCORE: <0..1>' or 'VERDICT: "
        f"CORRECT|INCORRECT'): {text[-300:]!r}"
    )


# ----- the request ----------------------------------------------------------------------------------------------
def render_reference(reference: Any) -> str:
    if isinstance(reference, str):
        return reference
    try:
        return json.dumps(reference, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(reference)


def render_conversation(messages: Optional[Sequence[Mapping[str, Any]]], limit: int = 8000) -> str:
    """Chat messages as ``role: content`` lines, keeping the last ``limit`` characters."""
    lines = []
    for message in messages or []:
        if isinstance(message, Mapping):
            lines.append(f"{message.get('role', 'user')}: {message.get('content', '')}")
    text = "\n".join(lines)
    return text[-limit:]


def judge_messages(
    response: str,
    reference: Any,
    rubric: Optional[str] = None,
    question: str = "",
    max_response_chars: int = 16_000,
) -> List[Dict[str, str]]:
    """The chat request: a system prompt asking for ``SCORE: x``, then the question, reference, rubric and
    response in tagged sections (the response's tail when it is longer than ``max_response_chars``)."""
    response = response if isinstance(response, str) else ("" if response is None else str(response))
    if len(response) > max_response_chars:
        response = "[...]" + response[-max_response_chars:]
    user = (
        f"<question>\n{question}\n</question>\n"
        f"<reference>\n{render_reference(reference)}\n</reference>\n"
        f"<rubric>\n{rubric or DEFAULT_RUBRIC}\n</rubric>\n"
        f"<response>\n{response}\n</response>\n"
        "Grade the response. End with one line: SCORE: <a number from 0 to 1>"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _after(attempts: int, error: JudgeError) -> JudgeError:
    error.attempts = attempts
    return error


def _answer_text(data: Any, url: str) -> str:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise JudgeError(
            f"the judge endpoint {url} did not answer an OpenAI chat completion: {str(data)[:300]!r}"
        )
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    if not isinstance(content, str):
        raise JudgeError(
            f"the judge endpoint {url} answered a message without text content: {str(data)[:300]!r}"
        )
    return content


class JudgeClient:
    """Asks one endpoint, with bounded concurrency, retries, a cache of verdicts and counters (``stats``)."""

    def __init__(self, endpoint: JudgeEndpoint) -> None:
        self.endpoint = endpoint
        self.retry = RetryPolicy(attempts=endpoint.attempts, initial_delay_s=endpoint.retry_delay_s)
        self._gate = threading.BoundedSemaphore(endpoint.max_concurrency)
        self._lock = threading.Lock()
        self._cache: "collections.OrderedDict[str, Verdict]" = collections.OrderedDict()
        self._in_flight: Dict[str, concurrent.futures.Future] = {}
        self._local = threading.local()  # one requests.Session per thread: sessions are not thread-safe
        self._sessions: List[Any] = []
        self.stats: Dict[str, int] = {"requests": 0, "http_attempts": 0, "cache_hits": 0, "errors": 0}

    # -- HTTP ----------------------------------------------------------------------------------------------------
    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = requests.Session()
            if self.endpoint.api_key:
                session.headers["Authorization"] = f"Bearer {self.endpoint.api_key}"
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def _post(self, messages: List[Dict[str, str]]) -> Tuple[str, int]:
        """The judge's answer text and the attempts it took; :class:`JudgeError` when it cannot be had."""
        import requests

        from skyrl_gym.http_retry import RetriesExhausted, request_with_retries

        url, endpoint = self.endpoint.chat_url, self.endpoint
        payload = {
            "model": endpoint.model,
            "messages": messages,
            "temperature": endpoint.temperature,
            "max_tokens": endpoint.max_tokens,
        }
        try:
            response, attempt = request_with_retries(
                _GatedSession(self), "POST", url, self.retry, endpoint.timeout_s, json=payload
            )
        except RetriesExhausted as exc:
            raise _after(exc.attempts, JudgeError(f"the judge did not answer: {exc}")) from None
        except requests.exceptions.RequestException as exc:
            raise _after(1, JudgeError(f"request to the judge at {url} failed: {exc}")) from exc
        if response.status_code >= 400:
            hint = {
                401: " (check api_key / " + API_KEY_ENV + ")",
                403: " (check api_key)",
                404: " (check base_url: it should name the server, e.g. http://host:8000/v1, "
                "and the model name)",
            }.get(response.status_code, "")
            raise _after(
                attempt,
                JudgeError(
                    f"the judge at {url} answered HTTP {response.status_code}{hint}: {response.text[:300]!r}"
                ),
            )
        try:
            data = response.json()
        except ValueError:
            raise _after(
                attempt,
                JudgeError(
                    f"the judge at {url} answered something that is not JSON: {response.text[:300]!r}"
                ),
            ) from None
        try:
            return _answer_text(data, url), attempt
        except JudgeError as exc:
            raise _after(attempt, exc)

    # -- verdicts ------------------------------------------------------------------------------------------------
    @staticmethod
    def cache_key(payload: Any) -> str:
        return hashlib.sha256(
            json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
        ).hexdigest()

    def judge(self, messages: List[Dict[str, str]], scale: float = 1.0) -> Verdict:
        """The verdict on one request; never raises. Identical requests (same endpoint, model, messages and
        scale) are asked once: later ones get the cached verdict, concurrent ones wait for the first. The cache keeps
        every answer the judge gave at temperature 0 (an unreadable one too: asked again, it says the same), never
        a transport failure."""
        key = self.cache_key(
            [
                self.endpoint.chat_url,
                self.endpoint.model,
                self.endpoint.temperature,
                self.endpoint.max_tokens,
                scale,
                messages,
            ]
        )
        with self._lock:
            self.stats["requests"] += 1
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.stats["cache_hits"] += 1
                if not hit.ok:
                    self.stats["errors"] += 1
                return dataclasses.replace(hit, cached=True, attempts=0, seconds=0.0)
            waiting = self._in_flight.get(key)
            if waiting is None:
                future: concurrent.futures.Future = concurrent.futures.Future()
                self._in_flight[key] = future
        if waiting is not None:
            verdict = waiting.result()
            with self._lock:
                self.stats["cache_hits"] += 1
                if not verdict.ok:
                    self.stats["errors"] += 1
            return dataclasses.replace(verdict, cached=True, attempts=0, seconds=0.0)
        started = time.perf_counter()
        attempts = 0
        text = ""
        verdict = Verdict(score=None, error="the judge call was interrupted")
        answered = (
            False  # the judge gave an answer (readable or not): at temperature 0 asking again gives it again
        )
        try:
            text, attempts = self._post(messages)
            answered = True
            score, label = parse_verdict(text, scale)
            verdict = Verdict(score=score, label=label, text=text, attempts=attempts)
        except JudgeError as exc:
            verdict = Verdict(score=None, text=text, error=str(exc), attempts=attempts or exc.attempts)
        except Exception as exc:  # a bug or an odd answer must not take a batch down
            verdict = Verdict(score=None, text=text, error=f"{type(exc).__name__}: {exc}", attempts=attempts)
        finally:  # also on KeyboardInterrupt: requests waiting for this one must not wait forever
            verdict.seconds = time.perf_counter() - started
            cacheable = verdict.ok or (answered and self.endpoint.temperature == 0.0)
            with self._lock:
                self._in_flight.pop(key, None)
                if cacheable and self.endpoint.cache_size > 0:
                    self._cache[key] = verdict
                    while len(self._cache) > self.endpoint.cache_size:
                        self._cache.popitem(last=False)
                if not verdict.ok:
                    self.stats["errors"] += 1
            future.set_result(verdict)
        return verdict

    def judge_many(self, requests: Iterable[List[Dict[str, str]]], scale: float = 1.0) -> List[Verdict]:
        """Verdicts on many requests, in order, ``max_concurrency`` of them in flight at once."""
        requests = list(requests)
        if not requests:
            return []
        workers = min(self.endpoint.max_concurrency, len(requests))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="judge") as pool:
            return list(pool.map(lambda messages: self.judge(messages, scale), requests))

    async def ajudge(self, messages: List[Dict[str, str]], scale: float = 1.0) -> Verdict:
        """:meth:`judge` from async code, on a worker thread so the event loop keeps running."""
        import asyncio

        return await asyncio.to_thread(self.judge, messages, scale)

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()


class _GatedSession:
    """The calling thread's session, counting each attempt and holding one of ``max_concurrency`` slots only while
    a request is on the wire (not during back-off)."""

    def __init__(self, client: JudgeClient) -> None:
        self.client = client
        self.session = client._session()

    def request(self, *args: Any, **kwargs: Any) -> Any:
        with self.client._lock:
            self.client.stats["http_attempts"] += 1
        with self.client._gate:
            return self.session.request(*args, **kwargs)


_clients: Dict[JudgeEndpoint, JudgeClient] = {}
_clients_lock = threading.Lock()


def client_for(endpoint: JudgeEndpoint) -> JudgeClient:
    """The process's shared client of ``endpoint`` (its cache, pools and counters are shared by every env)."""
    with _clients_lock:
        client = _clients.get(endpoint)
        if client is None:
            client = _clients[endpoint] = JudgeClient(endpoint)
        return client


def judge_response(
    response: str,
    reference: Any,
    rubric: Optional[str] = None,
    question: str = "",
    env_config: Any = None,
    scale: float = 1.0,
) -> Verdict:
    """Score one response outside an env (endpoint from ``env_config["judge"]`` or the environment)."""
    endpoint = JudgeEndpoint.from_config(env_config)
    messages = judge_messages(response, reference, rubric, question, endpoint.max_response_chars)
    return client_for(endpoint).judge(messages, scale)


__all__ = [
    "DEFAULT_RUBRIC",
    "JudgeClient",
    "JudgeEndpoint",
    "JudgeError",
    "Verdict",
    "client_for",
    "judge_messages",
    "judge_response",
    "parse_verdict",
]
