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
import logging
from typing import Any, AsyncIterator, Dict, List

from skygym_sandboxes.protocol import Sandbox
from skygym_sandboxes.types import Limits, RunRequest, RunResult, Status

logger = logging.getLogger(__name__)

LANGUAGES = ("python", "bash")


class BadRequest(ValueError):
    """The request body is not a valid run request; the message says which field is wrong."""


def request_from_body(body: Dict[str, Any], default_limits: Limits) -> RunRequest:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    language = body.get("language", "python")
    if language not in LANGUAGES:
        raise BadRequest(f"language {language!r} is not supported; this service runs {list(LANGUAGES)}")
    limits = default_limits
    if body.get("limits") is not None:
        try:
            limits = Limits.from_dict({**default_limits.to_dict(), **body["limits"]})
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"limits: {exc}") from None
    run_timeout = body.get("run_timeout")
    if run_timeout is not None:
        if not isinstance(run_timeout, (int, float)) or run_timeout <= 0:
            raise BadRequest(f"run_timeout must be a positive number of seconds, got {run_timeout!r}")
        limits = limits.replace(wall_s=float(run_timeout), cpu_s=float(run_timeout))
    memory = body.get("memory_limit_MB")
    if isinstance(memory, (int, float)) and memory > 0:
        limits = limits.replace(memory_mb=int(memory))
    files: Dict[str, bytes] = {}
    for name, content in (body.get("files") or {}).items():
        try:
            files[name] = base64.b64decode(content or "", validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BadRequest(f"files[{name!r}] must be base64-encoded content") from None
    fetch_files = body.get("fetch_files") or []
    if not isinstance(fetch_files, list) or not all(isinstance(name, str) for name in fetch_files):
        raise BadRequest("fetch_files must be a list of relative paths")
    stdin = body.get("stdin") or ""
    try:
        if body.get("command") is not None:
            return RunRequest(
                command=body["command"],
                stdin=stdin,
                files=files,
                limits=limits,
                argv=body.get("argv") or [],
                fetch_files=fetch_files,
            )
        code = body.get("code")
        if not isinstance(code, str):
            raise BadRequest("code must be a string (or give `command`, a list of strings)")
        if language == "bash":
            return RunRequest(
                command=["bash", "-c", code], stdin=stdin, files=files, limits=limits, fetch_files=fetch_files
            )
        return RunRequest(
            code=code,
            stdin=stdin,
            files=files,
            limits=limits,
            argv=body.get("argv") or [],
            fetch_files=fetch_files,
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(str(exc)) from None


def response_from_result(result: RunResult) -> Dict[str, Any]:
    if result.status == Status.SANDBOX_ERROR:
        return {
            "status": "SandboxError",
            "message": result.message,
            "compile_result": None,
            "run_result": None,
            "executor_pod_name": None,
            "files": {},
            "sandbox": result.to_dict(),
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
        "sandbox": result.to_dict(),
    }


def create_app(sandbox: Sandbox, max_concurrency: int = 4, max_queue: int = 256):
    """A FastAPI app serving ``sandbox``. At most ``max_concurrency`` programs run at once; past
    ``max_queue`` waiting requests the service answers 503 so that clients back off."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    gate = asyncio.Semaphore(max_concurrency)
    # Runs block a thread each (a worker's pipe, a container's socket): give them their own threads,
    # as many as may run at once, rather than the event loop's small default pool.
    runners = concurrent.futures.ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="run_code")
    state = {"waiting": 0, "running": 0, "served": 0}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        yield
        runners.shutdown(wait=False, cancel_futures=True)
        sandbox.close()  # clean shutdown: warm workers go with the service

    app = FastAPI(title="sandboxes", description="SandboxFusion-compatible code execution", lifespan=lifespan)

    @app.get("/health")
    async def health() -> Dict[str, Any]:
        return {
            "status": "ok",
            "backend": getattr(sandbox, "name", "?"),
            "max_concurrency": max_concurrency,
            **state,
        }

    @app.post("/run_code")
    async def run_code(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(
                {"status": "SandboxError", "message": "the body is not valid JSON"}, status_code=400
            )
        try:
            run_request = request_from_body(body, sandbox.limits)
        except BadRequest as exc:
            return JSONResponse({"status": "SandboxError", "message": f"bad request: {exc}"}, status_code=400)
        if state["waiting"] >= max_queue:
            return JSONResponse(
                {"status": "SandboxError", "message": "too many queued requests; retry later"},
                status_code=503,
            )
        state["waiting"] += 1
        admitted = False
        try:
            async with gate:
                state["waiting"] -= 1
                admitted = True
                state["running"] += 1
                try:
                    loop = asyncio.get_running_loop()
                    result = await loop.run_in_executor(runners, sandbox.run, run_request)
                finally:
                    state["running"] -= 1
                    state["served"] += 1
        finally:
            if not admitted:  # the client went away while queued
                state["waiting"] -= 1
        return JSONResponse(response_from_result(result))

    return app


def serve(
    sandbox: Sandbox,
    host: str = "127.0.0.1",
    port: int = 8080,
    max_concurrency: int = 4,
    log_level: str = "warning",
) -> None:
    """Serve until SIGINT/SIGTERM; the sandbox (and its warm workers) is closed on the way out."""
    import uvicorn

    app = create_app(sandbox, max_concurrency=max_concurrency)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level)
    finally:
        sandbox.close()


__all__: List[str] = ["create_app", "serve", "request_from_body", "response_from_result", "BadRequest"]
