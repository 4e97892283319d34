"""The ``remote`` backend: a client of a sandbox service (``skygym-sandboxes serve``, or any service that
speaks SandboxFusion's ``/run_code``)."""

from __future__ import annotations

import base64
import os
import threading
import time
from typing import Any, Dict, Optional, Union

from skygym_sandboxes.http_deadlines import AnswerCut, capped_answer
from skygym_sandboxes.origins import bound_token
from skygym_sandboxes.protocol import BaseSandbox
from skygym_sandboxes.types import Limits, RunRequest, RunResult, Status

# Time allowed on top of the program's wall limit for the HTTP round trip and queueing.
HTTP_MARGIN_S = 30.0
# A run whose connection broke before its answer came (no time-out) is sent again this many times. A server
# closes a kept-alive connection that idles past its time-out (``--client-timeout``; uvicorn's keep-alive); a
# request sent on it as it closes is lost, and the client's check for closed connections cannot see that
# coming. A run is safe to send again: each runs in a fresh sandbox.
DROPPED_CONNECTION_RETRIES = 1
# The longest answer read from a service: a run's output and fetched files are capped by the service's limits; a
# hostile service that answers with gigabytes would otherwise fill the trainer's memory.
MAX_REPLY_BYTES = 256 * 1024 * 1024
# The longest /health read (the service's lists a few limits).
MAX_HEALTH_BYTES = 64 * 1024


def result_from_response(data: Dict[str, Any]) -> RunResult:
    """This project's typed result when the service sent it, else one mapped from SandboxFusion's fields."""
    run = data.get("run_result") or {}
    if isinstance(data.get("sandbox"), dict):
        typed = dict(data["sandbox"])  # output and files travel once, in SandboxFusion's fields
        typed.setdefault("stdout", run.get("stdout") or "")
        typed.setdefault("stderr", run.get("stderr") or "")
        typed.setdefault("files", dict(data.get("files") or {}))
        return RunResult.from_dict(typed)
    if data.get("status") == "SandboxError" or not run:
        return RunResult.sandbox_error(str(data.get("message") or "the service reported a sandbox error"))
    code = run.get("return_code")
    if run.get("status") == "TimeLimitExceeded":
        status = Status.TIMEOUT
    elif run.get("status") == "Finished":
        status = Status.OK if code == 0 else Status.ERROR
    else:
        status = Status.ERROR if code not in (None, 0) else Status.KILLED
    return RunResult(
        status=status,
        exit_code=code,
        stdout=run.get("stdout") or "",
        stderr=run.get("stderr") or "",
        wall_time_s=float(run.get("execution_time") or 0.0),
        message=str(data.get("message") or ""),
        files=dict(data.get("files") or {}),
    )


class RemoteSandbox(BaseSandbox):
    """Sends each run to ``url`` (the service's base URL; default ``$SKYGYM_SANDBOX_URL``, else
    ``http://127.0.0.1:8080``).

    ``token`` is sent as ``Authorization: Bearer``. Without it, ``$SKYGYM_SANDBOX_TOKEN`` is sent only to the
    service the operator configured (``$SKYGYM_SANDBOX_URL``, else the default URL), never to another URL: a
    URL that comes from a config or a client cannot collect the operator's token. Limits above the service's
    own (its ``/health`` lists them) are lowered to them, as ``Limits`` lowers values above its maxima; the
    service refuses a request that asks for more. A run whose connection drops before its answer (a kept-alive
    connection the service closed as the run was sent) is sent once more on a new one. A service that cannot be
    reached, answers an HTTP error or times out gives a ``sandbox_error`` result, never an exception.
    """

    name = "remote"

    def __init__(
        self,
        url: Optional[str] = None,
        limits: Optional[Union[Limits, dict]] = None,
        concurrency: int = 4,
        connect_timeout_s: float = 5.0,
        token: Optional[str] = None,
    ) -> None:
        super().__init__(limits)
        import requests

        from skygym_sandboxes.service import DEFAULT_URL, TOKEN_ENV, URL_ENV

        operator_url = os.environ.get(URL_ENV) or DEFAULT_URL
        self.url = (url or operator_url).rstrip("/")
        self._token_hint = ""
        if token is None:
            token, self._token_hint = bound_token(self.url, TOKEN_ENV, URL_ENV, DEFAULT_URL)
        self.default_concurrency = concurrency
        self.connect_timeout_s = connect_timeout_s
        self._ceilings: Optional[Dict[str, Any]] = None
        self._http = requests.Session()
        adapter = requests.adapters.HTTPAdapter(
            pool_connections=concurrency, pool_maxsize=max(concurrency, 10)
        )
        self._http.mount("http://", adapter)
        self._http.mount("https://", adapter)
        if token:
            self._http.headers["Authorization"] = f"Bearer {token}"

    def _within_service_limits(self, limits: Limits) -> Limits:
        """``limits`` lowered to the service's ceilings (read once from its ``/health``; a service that does
        not list them, such as SandboxFusion, gets the limits as they are)."""
        if self._ceilings is None:
            try:
                listed = self.health().get("limits")
            except Exception:
                return limits  # unreachable now: the run itself reports it
            self._ceilings = dict(listed) if isinstance(listed, dict) else {}
        lowered = {
            name: ceiling
            for name, ceiling in self._ceilings.items()
            if isinstance(ceiling, (int, float)) and getattr(limits, name, None) is not None
            and getattr(limits, name) > ceiling
        }
        return limits.replace(**lowered) if lowered else limits

    def _body(self, request: RunRequest, limits: Limits) -> Dict[str, Any]:
        def b64(content: Union[str, bytes]) -> str:
            return base64.b64encode(content.encode("utf-8") if isinstance(content, str) else content).decode(
                "ascii"
            )

        stdin = (
            request.stdin.decode("utf-8", "replace") if isinstance(request.stdin, bytes) else request.stdin
        )
        body: Dict[str, Any] = {
            "language": "python",
            "stdin": stdin,
            "compile_timeout": limits.wall_s,
            "run_timeout": limits.wall_s,
            "files": {name: b64(content) for name, content in request.files.items()},
            "fetch_files": list(request.fetch_files),
            "limits": limits.to_dict(),
            "argv": list(request.argv),
        }
        if request.code is not None:
            body["code"] = request.code
        else:
            body["command"] = list(request.command or [])
        return body

    def _run(
        self, request: RunRequest, limits: Limits, cancel: Optional[threading.Event] = None
    ) -> RunResult:
        import requests

        started = time.monotonic()
        limits = self._within_service_limits(limits)
        read_timeout = (limits.wall_s or 600.0) + HTTP_MARGIN_S
        body = self._body(request, limits)
        for attempt in range(1 + DROPPED_CONNECTION_RETRIES):
            # the whole answer within the run's time and the margin: a service that trickles its answer a byte at
            # a time held the caller for ever (the socket time-out starts again with every byte)
            try:
                response, whole = capped_answer(self._http, "POST", f"{self.url}/run_code",
                                                self.connect_timeout_s + read_timeout, MAX_REPLY_BYTES, json=body,
                                                timeout=(self.connect_timeout_s, read_timeout))
                break
            except AnswerCut as cut:
                return RunResult.sandbox_error(
                    f"no complete answer from the sandbox service at {self.url} within {cut.seconds:g} s "
                    f"(the run's wall limit and {HTTP_MARGIN_S:g} s)",
                    wall_time_s=time.monotonic() - started,
                )
            except requests.RequestException as exc:
                dropped = isinstance(exc, requests.ConnectionError) and not isinstance(exc, requests.Timeout)
                if dropped and attempt < DROPPED_CONNECTION_RETRIES:
                    continue  # the broken connection left the pool: the next attempt opens a new one
                return RunResult.sandbox_error(
                    f"could not reach the sandbox service at {self.url}: {exc}",
                    wall_time_s=time.monotonic() - started,
                )
        if not whole:
            return RunResult.sandbox_error(
                f"the sandbox service at {self.url} answered more than {MAX_REPLY_BYTES} bytes; the rest was not read",
                wall_time_s=time.monotonic() - started,
            )
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code != 200:
            message = data.get("message") if isinstance(data, dict) else None
            return RunResult.sandbox_error(
                f"the sandbox service answered HTTP {response.status_code}: {message or response.text[:300]}"
                + (self._token_hint if response.status_code == 401 else "")
                + (" (redirects are not followed: give the service's own URL)"
                   if 300 <= response.status_code < 400 else ""),
                wall_time_s=time.monotonic() - started,
            )
        return result_from_response(data)

    def health(self) -> Dict[str, Any]:
        """The service's ``/health``: at most ``MAX_HEALTH_BYTES``, whole within ``connect_timeout_s`` (a hostile
        service's endless answer filled the trainer's memory here)."""
        response, whole = capped_answer(self._http, "GET", f"{self.url}/health", self.connect_timeout_s,
                                        MAX_HEALTH_BYTES, timeout=self.connect_timeout_s)
        if not whole:
            raise ValueError(f"{self.url}/health answered more than {MAX_HEALTH_BYTES} bytes")
        if response.status_code != 200:
            raise ValueError(f"{self.url}/health answered HTTP {response.status_code} (redirects are not followed)")
        return response.json()

    def close(self) -> None:
        super().close()
        self._http.close()
