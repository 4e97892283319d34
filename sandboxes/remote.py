"""The ``remote`` backend: a client of a sandbox service (``skygym-sandboxes serve``, or any service that
speaks SandboxFusion's ``/run_code``)."""

from __future__ import annotations

import base64
import os
import threading
import time
from typing import Any, Dict, Optional, Union

from skygym_sandboxes.protocol import BaseSandbox
from skygym_sandboxes.types import Limits, RunRequest, RunResult, Status

# Time allowed on top of the program's wall limit for the HTTP round trip and queueing.
HTTP_MARGIN_S = 30.0


def result_from_response(data: Dict[str, Any]) -> RunResult:
    """This project's typed result when the service sent it, else one mapped from SandboxFusion's fields."""
    if isinstance(data.get("sandbox"), dict):
        return RunResult.from_dict(data["sandbox"])
    run = data.get("run_result") or {}
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
    """Sends each run to ``url`` (the service's base URL, e.g. ``http://127.0.0.1:8080``).

    A service that cannot be reached, answers an HTTP error or times out gives a
    ``sandbox_error`` result, never an exception.
    """

    name = "remote"

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        limits: Optional[Union[Limits, dict]] = None,
        concurrency: int = 4,
        connect_timeout_s: float = 5.0,
        token: Optional[str] = None,
    ) -> None:
        super().__init__(limits)
        import requests

        from skygym_sandboxes.service import TOKEN_ENV

        self.url = url.rstrip("/")
        token = token or os.environ.get(TOKEN_ENV) or None
        self.default_concurrency = concurrency
        self.connect_timeout_s = connect_timeout_s
        self._http = requests.Session()
        adapter = requests.adapters.HTTPAdapter(
            pool_connections=concurrency, pool_maxsize=max(concurrency, 10)
        )
        self._http.mount("http://", adapter)
        self._http.mount("https://", adapter)
        if token:
            self._http.headers["Authorization"] = f"Bearer {token}"

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
        read_timeout = (limits.wall_s or 600.0) + HTTP_MARGIN_S
        try:
            response = self._http.post(
                f"{self.url}/run_code",
                json=self._body(request, limits),
                timeout=(self.connect_timeout_s, read_timeout),
            )
        except requests.RequestException as exc:
            return RunResult.sandbox_error(
                f"could not reach the sandbox service at {self.url}: {exc}",
                wall_time_s=time.monotonic() - started,
            )
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code != 200:
            message = data.get("message") if isinstance(data, dict) else None
            return RunResult.sandbox_error(
                f"the sandbox service answered HTTP {response.status_code}: {message or response.text[:300]}",
                wall_time_s=time.monotonic() - started,
            )
        return result_from_response(data)

    def health(self) -> Dict[str, Any]:
        return self._http.get(f"{self.url}/health", timeout=self.connect_timeout_s).json()

    def close(self) -> None:
        super().close()
        self._http.close()
