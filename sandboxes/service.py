"""The sandbox service: a SandboxFusion-compatible ``/run_code`` endpoint over any sandbox backend.

Request fields (SandboxFusion's): ``code``, ``language`` (``python`` or ``bash``), ``stdin``,
``compile_timeout`` (unused for Python), ``run_timeout``, ``memory_limit_MB``, ``files`` (path ->
base64 content), ``fetch_files`` (paths read back after the run, answered in ``files`` as base64).
Extensions: ``command`` (a command line instead of ``code``), ``argv``, ``limits`` (this project's
``Limits`` fields).

Response (SandboxFusion's shape): ``status`` (``Success`` | ``Failed`` | ``SandboxError``),
``message``, ``compile_result`` (null), ``run_result`` (``status``: ``Finished`` |
``TimeLimitExceeded`` | ``Error``, ``execution_time``, ``return_code``, ``stdout``, ``stderr``),
``executor_pod_name``, ``files``; plus ``sandbox``: this project's full typed result.
"""

import asyncio
import base64
import binascii
import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Union

from skygym_sandboxes.http_bodies import (
    CLIENT_TIMEOUT_S,
    NO_PUBLIC_DOCS,
    BodyBudget,
    BodyError,
    BodyParsers,
    guarded_http_protocol,
    is_loopback,
    parse_json_object,
    refusal,
)
from skygym_sandboxes.protocol import Sandbox
from skygym_sandboxes.types import Limits, RunRequest, RunResult, Status, check_file_count, check_limit

logger = logging.getLogger(__name__)

LANGUAGES = ("python", "bash")
TOKEN_ENV = "SKYGYM_SANDBOX_TOKEN"
# The service clients use by default; $SKYGYM_SANDBOX_TOKEN is sent to it only (skygym_sandboxes.remote).
URL_ENV = "SKYGYM_SANDBOX_URL"
DEFAULT_URL = "http://127.0.0.1:8080"
MAX_BODY_BYTES = 64 * 1024 * 1024
DISCONNECT_POLL_S = 0.1


class BadRequest(ValueError):
    """The request body is not a valid run request; the message says which field is wrong."""


def _string(body: Mapping[str, Any], name: str, default: str = "") -> str:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string, got {type(value).__name__}")
    return value


def _string_list(body: Mapping[str, Any], name: str) -> List[str]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadRequest(f"{name} must be a list of strings")
    return value


# The operator's flag for each limit, named when a request asks for more than the service allows.
LIMIT_FLAGS: Dict[str, str] = {
    "wall_s": "--wall-s",
    "cpu_s": "--cpu-s",
    "memory_mb": "--memory-mb",
    "processes": "--processes",
    "output_bytes": "--output-bytes",
}


def _within_ceiling(field: str, name: str, value: Any, ceilings: Limits) -> Union[int, float]:
    """``value`` as a valid limit ``name`` no higher than the service's own; BadRequest naming ``field``
    otherwise (the operator's limits are ceilings: a request may lower them, never raise them)."""
    try:
        number = check_limit(name, value)
    except ValueError as exc:
        raise BadRequest(f"{field}: {exc}") from None
    ceiling = getattr(ceilings, name)
    if number > ceiling:
        flag = LIMIT_FLAGS.get(name)
        raise BadRequest(
            f"{field} asks for {value!r:.40}, above this service's {name} of {ceiling:g}"
            f"{f' ({flag})' if flag else ''}; a request may lower a limit, never raise it"
        )
    return number


def limits_from_body(body: Mapping[str, Any], ceilings: Limits) -> Limits:
    """The service's limits (``ceilings``), lowered by the body's ``limits`` (null entries keep the service's
    value), ``run_timeout`` and ``memory_limit_MB``. A value that is invalid, or above the service's own,
    raises BadRequest naming the field: the operator's limits are ceilings, never raised by a request."""
    limits = ceilings
    overrides = body.get("limits")
    if overrides is not None and not isinstance(overrides, dict):
        raise BadRequest("limits must be an object of limit names to numbers (or null)")
    if overrides:
        known = set(ceilings.to_dict())
        unknown = sorted(str(key) for key in set(overrides) - known)
        if unknown:
            raise BadRequest(f"limits: unknown limit(s) {unknown}; known limits are {sorted(known)}")
        given = {
            name: _within_ceiling(f"limits.{name}", name, value, ceilings)
            for name, value in overrides.items()
            if value is not None
        }
        limits = limits.replace(**given)
    run_timeout = body.get("run_timeout")
    if run_timeout is not None:
        seconds = _within_ceiling("run_timeout", "wall_s", run_timeout, ceilings)
        limits = limits.replace(wall_s=seconds, cpu_s=min(seconds, ceilings.cpu_s))
    memory = body.get("memory_limit_MB")
    # SandboxFusion sends -1 (or 0) for "the service's default".
    if memory is not None and not (
        isinstance(memory, (int, float)) and not isinstance(memory, bool) and memory <= 0
    ):
        limits = limits.replace(memory_mb=_within_ceiling("memory_limit_MB", "memory_mb", memory, ceilings))
    return limits


def request_from_body(body: Any, ceilings: Limits) -> RunRequest:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    language = body.get("language", "python")
    if language is None:
        language = "python"
    if language not in LANGUAGES:
        raise BadRequest(f"language {language!r} is not supported; this service runs {list(LANGUAGES)}")
    limits = limits_from_body(body, ceilings)
    raw_files = body.get("files")
    if raw_files is None:
        raw_files = {}
    if not isinstance(raw_files, dict):
        raise BadRequest("files must be an object of relative paths to base64 content")
    try:
        check_file_count("files", raw_files)  # before any is decoded
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    files: Dict[str, bytes] = {}
    for name, content in raw_files.items():
        if content is not None and not isinstance(content, str):
            raise BadRequest(f"files[{name!r}] must be base64-encoded content (a string)")
        try:
            files[name] = base64.b64decode(content or "", validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"files[{name!r}] must be base64-encoded content") from None
    fetch_files = _string_list(body, "fetch_files")
    argv = _string_list(body, "argv")
    stdin = _string(body, "stdin")
    try:
        if body.get("command") is not None:
            return RunRequest(
                command=_string_list(body, "command"),
                stdin=stdin,
                files=files,
                limits=limits,
                argv=argv,
                fetch_files=fetch_files,
            )
        code = body.get("code")
        if not isinstance(code, str):
            raise BadRequest("code must be a string (or give `command`, a list of strings)")
        if language == "bash":
            return RunRequest(
                command=["bash", "-c", code], stdin=stdin, files=files, limits=limits, fetch_files=fetch_files
            )
        return RunRequest(code=code, stdin=stdin, files=files, limits=limits, argv=argv, fetch_files=fetch_files)
    except BadRequest:
        raise
    except (TypeError, ValueError) as exc:
        raise BadRequest(str(exc)) from None


# What the response carries once, in SandboxFusion's fields: left out of ``sandbox`` (the typed result), and
# put back by the remote backend (``skygym_sandboxes.remote.result_from_response``).
_CARRIED_ONCE = ("stdout", "stderr", "files")


def response_from_result(result: RunResult) -> Dict[str, Any]:
    """SandboxFusion's response shape; ``sandbox`` holds the rest of this project's typed result (its output
    and files are not repeated there: they are in ``run_result`` and ``files``)."""
    typed = {key: value for key, value in result.to_dict().items() if key not in _CARRIED_ONCE}
    if result.status == Status.SANDBOX_ERROR:
        return {
            "status": "SandboxError",
            "message": result.message,
            "compile_result": None,
            "run_result": None,
            "executor_pod_name": None,
            "files": {},
            "sandbox": typed,
        }
    run_status = {Status.TIMEOUT: "TimeLimitExceeded", Status.OK: "Finished", Status.ERROR: "Finished"}.get(
        result.status, "Error"
    )
    return {
        "status": "Success" if result.status == Status.OK else "Failed",
        "message": result.message,
        "compile_result": None,
        "run_result": {
            "status": run_status,
            "execution_time": result.wall_time_s,
            "return_code": result.exit_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
        },
        "executor_pod_name": None,
        "files": dict(result.files),
        "sandbox": typed,
    }


def create_app(
    sandbox: Sandbox,
    max_concurrency: Optional[int] = None,
    max_queue: int = 64,
    token: Optional[str] = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    client_timeout_s: float = CLIENT_TIMEOUT_S,
):
    """A FastAPI app serving ``sandbox``.

    At most ``max_concurrency`` programs run at once (default: this machine's CPU count); up to
    ``max_queue`` more wait, and past that the service answers 429 so that clients back off. With
    ``token``, every request must carry ``Authorization: Bearer <token>`` (401 otherwise). A client
    that disconnects while its run waits or runs gets the run cancelled and its sandbox torn down
    (and replaced), so its slot is freed at once. Malformed bodies get 400 (not JSON, nested too deep)
    or 422 (a field is wrong, or a limit above the sandbox's own) with the reason; bodies over
    ``max_body_bytes`` get 413, chunked ones too, as soon as they pass it; a body not all there within
    ``client_timeout_s`` gets 408. ``sandbox.limits`` are the
    ceilings of every request.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    max_concurrency = max(1, int(max_concurrency or os.cpu_count() or 1))
    gate = asyncio.Semaphore(max_concurrency)
    # Runs block a thread each (a worker's pipe, a container's socket): give them their own threads,
    # as many as may run at once, rather than the event loop's small default pool.
    runners = concurrent.futures.ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="run_code")
    state = {"waiting": 0, "running": 0, "served": 0, "rejected": 0, "cancelled": 0}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        yield
        runners.shutdown(wait=False, cancel_futures=True)
        sandbox.close()  # clean shutdown: warm workers go with the service

    app = FastAPI(
        title="sandboxes",
        description="SandboxFusion-compatible code execution",
        lifespan=lifespan,
        **NO_PUBLIC_DOCS,
    )

    def refuse(status_code: int, message: str) -> JSONResponse:
        state["rejected"] += 1
        return JSONResponse({"status": "SandboxError", "message": message}, status_code=status_code)

    def refused(request: Request) -> Optional[JSONResponse]:
        why = refusal(request, token, TOKEN_ENV)
        return refuse(*why) if why else None

    @app.get("/health")
    async def health(request: Request) -> Any:
        if (refused_answer := refused(request)) is not None:
            return refused_answer
        return {
            "status": "ok",
            "backend": getattr(sandbox, "name", "?"),
            "max_concurrency": max_concurrency,
            "max_queue": max_queue,
            "max_body_bytes": max_body_bytes,
            "limits": sandbox.limits.to_dict(),  # the ceilings: a request may lower these, never raise them
            **state,
        }

    parsers = BodyParsers()
    bodies = BodyBudget(max_body_bytes)  # the bodies being read, parsed, waiting and run, all connections together

    @app.post("/run_code")
    async def run_code(request: Request) -> Any:
        if (refused_answer := refused(request)) is not None:
            return refused_answer
        try:
            async with bodies.body(request, max_body_bytes, "--max-body-bytes", client_timeout_s) as raw:
                # parsed and read in a thread (BodyParsers): on the event loop a body of millions of tiny files held
                # every client
                run_request = await parsers.run(lambda body: request_from_body(parse_json_object(body), sandbox.limits),
                                                raw, size=len(raw))
                del raw  # the request holds what the run needs
                return await queue_and_run(request, run_request)
        except BodyError as exc:
            return refuse(exc.status, exc.message)
        except BadRequest as exc:
            return refuse(422, f"bad request: {exc}")

    async def queue_and_run(request: Request, run_request: RunRequest) -> Any:
        if state["waiting"] >= max_queue:
            return refuse(429, f"{max_queue} requests are already waiting; retry later")
        state["waiting"] += 1
        try:
            while True:
                try:
                    await asyncio.wait_for(gate.acquire(), DISCONNECT_POLL_S * 2)
                    break
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        state["cancelled"] += 1
                        return Response(status_code=499)
        finally:
            state["waiting"] -= 1
        cancel = threading.Event()
        state["running"] += 1
        try:
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(runners, functools.partial(sandbox.run, run_request, cancel))
            while True:
                done, _ = await asyncio.wait({future}, timeout=DISCONNECT_POLL_S)
                if done:
                    break
                if not cancel.is_set() and await request.is_disconnected():
                    cancel.set()  # the run is torn down; wait for its thread to hand the slot back
            result = future.result()
        finally:
            state["running"] -= 1
            state["served"] += 1
            gate.release()
        if cancel.is_set():
            state["cancelled"] += 1
            return Response(status_code=499)
        return JSONResponse(response_from_result(result))

    return app


def serve(
    sandbox: Sandbox,
    host: str = "127.0.0.1",
    port: int = 8080,
    max_concurrency: Optional[int] = None,
    log_level: str = "warning",
    token: Optional[str] = None,
    max_queue: int = 64,
    max_body_bytes: int = MAX_BODY_BYTES,
    client_timeout_s: float = CLIENT_TIMEOUT_S,
) -> None:
    """Serve until SIGINT/SIGTERM; the sandbox (and its warm workers) is closed on the way out.
    Binding anything but a loopback address needs a bearer ``token``. A client has ``client_timeout_s`` to
    send each request's head and, again, its body (see :mod:`skygym_sandboxes.http_bodies`)."""
    import uvicorn

    if not token and not is_loopback(host):
        sandbox.close()
        raise ValueError(
            f"refusing to serve on {host} without a bearer token: anyone who can reach it could run code. "
            f"Set {TOKEN_ENV} (or pass --token), or bind 127.0.0.1"
        )
    app = create_app(
        sandbox,
        max_concurrency=max_concurrency,
        max_queue=max_queue,
        token=token,
        max_body_bytes=max_body_bytes,
        client_timeout_s=client_timeout_s,
    )
    try:
        protocol = guarded_http_protocol(client_timeout_s)
        uvicorn.run(app, host=host, port=port, log_level=log_level, http=protocol)
    finally:
        sandbox.close()


__all__: List[str] = [
    "create_app",
    "serve",
    "request_from_body",
    "response_from_result",
    "BadRequest",
    "TOKEN_ENV",
    "URL_ENV",
    "DEFAULT_URL",
    "LIMIT_FLAGS",
    "is_loopback",
]
