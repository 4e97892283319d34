"""``PythonCodeExecutorToolGroup``: a ``python`` tool that runs model-written code in a sandbox.

Code never runs in the env's own process: it goes to a :mod:`sandboxes` backend (by default the
process-wide warm local sandbox: namespaces, no network, a scratch folder, time/memory/output
limits). Group name, tool name and output wording follow SkyRL-gym's tool (the program's stdout, or
``Error executing Python code: ...`` with its stderr, or a time-out message), so envs written for it
work unchanged.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

from skyrl_gym.tools.core import ToolGroup, tool

NO_OUTPUT_MESSAGE = "The code ran without printing anything; print() the values you want to see."
TIMEOUT_MESSAGE = "Error executing Python code: Execution timed out after {timeout} seconds."

_PROGRAM = """\
import contextlib as _cl, io as _io, sys as _sys, traceback as _tb
_ns = {{"__name__": "__main__", "__builtins__": __builtins__}}
for _cell in {earlier!r}:  # earlier cells of a stateful tool, replayed with their output hidden
    with _cl.redirect_stdout(_io.StringIO()), _cl.redirect_stderr(_io.StringIO()):
        try:
            exec(compile(_cell, "<string>", "exec"), _ns)
        except BaseException:
            pass
try:
    exec(compile({code!r}, "<string>", "exec"), _ns)
except SystemExit:
    raise
except BaseException as _exc:
    _frames = _exc.__traceback__
    while _frames is not None and _frames.tb_frame.f_code.co_filename != "<string>":
        _frames = _frames.tb_next
    _sys.stdout.flush()
    _tb.print_exception(type(_exc), _exc, _frames)
    _sys.exit(1)
"""


def sandbox_for(config: Optional[Mapping[str, Any]]) -> Any:
    """The process-wide sandbox for ``config`` (``None``: the shared warm local sandbox), so that
    episodes reuse warm workers instead of starting a sandbox each."""
    from skygym_sandboxes import shared_sandbox

    return shared_sandbox(dict(config) if config else None)


def render_run_result(result: Any, timeout: float) -> str:
    """SkyRL-gym's wording for a finished run."""
    status = str(result.status)
    if status == "timeout":
        return TIMEOUT_MESSAGE.format(timeout=timeout)
    if status == "sandbox_error":
        return f"Error executing Python code: the sandbox failed ({result.message})"
    if result.stderr and result.stderr.strip():
        return f"Error executing Python code: {result.stderr.strip()}"
    output = result.stdout.strip() if result.stdout else ""
    if status == "output_limit" or result.stdout_truncated:
        return output + "\n[output truncated]"
    if status != "ok":
        detail = result.message or f"exit code {result.exit_code}"
        return f"Error executing Python code: {status}: {detail}"
    return output


class PythonCodeExecutorToolGroup(ToolGroup):
    """Runs Python in ``sandbox`` (any :class:`skygym_sandboxes.Sandbox`), or in one built from
    ``sandbox_config``, or in the shared warm local sandbox.

    With ``stateful=True`` each call first replays the earlier calls that succeeded (their output
    hidden), so variables and imports carry over between turns like in a notebook.
    ``max_output_chars`` cuts what the model sees. The calls of one message share ``message_timeout_s`` (default
    twice ``timeout``, never under it) once the env calls :meth:`start_message`.
    """

    def __init__(
        self,
        timeout: float = 10.0,
        sandbox: Any = None,
        sandbox_config: Optional[Mapping[str, Any]] = None,
        stateful: bool = False,
        max_output_chars: Optional[int] = None,
        message_timeout_s: Optional[float] = None,
    ) -> None:
        self.timeout = timeout  # kept as given: SkyRL-gym prints it as is ("10.0 seconds")
        self.message_timeout_s = max(timeout, 2 * timeout if message_timeout_s is None else message_timeout_s)
        self.stateful = stateful
        self.max_output_chars = max_output_chars
        self._sandbox = sandbox
        self._sandbox_config = sandbox_config
        self.history: List[str] = []
        super().__init__(name="PythonCodeExecutorToolGroup")

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            self._sandbox = sandbox_for(self._sandbox_config)
        return self._sandbox

    def _program(self, code: str) -> str:
        # The code runs as SkyRL-gym runs it (``python -c``): compiled as "<string>", so a traceback reads
        # 'File "<string>", line 1, in <module>' with no source line, and shows no frame of this wrapper.
        earlier = self.history if self.stateful else []
        return _PROGRAM.format(earlier=earlier, code=code)

    def _limit(self) -> float:
        """This call's time: ``timeout`` as given, or what is left of its message's time if that is less."""
        left = self.message_time_left()
        return self.timeout if left >= self.timeout else max(round(left, 1), min(left, 0.1))

    def _request(self, code: str, limit: float) -> Any:
        from skygym_sandboxes import RunRequest

        limits = self.sandbox.limits.replace(wall_s=limit, cpu_s=limit)
        return RunRequest(code=self._program(code), limits=limits)

    def _finish(self, code: str, result: Any, limit: float) -> str:
        if str(result.status) == "ok" and not (result.stderr and result.stderr.strip()):
            self.history.append(code)
        text = render_run_result(result, limit)
        if self.max_output_chars is not None and len(text) > self.max_output_chars:
            cut = len(text) - self.max_output_chars
            text = text[: self.max_output_chars] + f"\n... ({cut} more characters cut)"
        return text

    @tool
    def python(self, code: str) -> str:
        """Run Python code in a sandbox and return what it printed (or the error).

        Args:
            code: a complete Python program; print() what you want to see.
        """
        spent, limit = self.message_time_spent(self.timeout), self._limit()
        if spent:
            return f"Error executing Python code: {spent}"
        try:
            result = self.sandbox.run(self._request(code, limit))
        except Exception as exc:  # a sandbox that cannot start is reported, not raised
            return f"Error executing Python code: the sandbox is unavailable ({type(exc).__name__}: {exc})"
        return self._finish(code, result, limit)

    async def apython(self, code: str) -> str:
        """:meth:`python` awaited without blocking the event loop."""
        spent, limit = self.message_time_spent(self.timeout), self._limit()
        if spent:
            return f"Error executing Python code: {spent}"
        try:
            result = await self.sandbox.arun(self._request(code, limit))
        except Exception as exc:
            return f"Error executing Python code: the sandbox is unavailable ({type(exc).__name__}: {exc})"
        return self._finish(code, result, limit)
