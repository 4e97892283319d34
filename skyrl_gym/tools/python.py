"""``PythonCodeExecutorToolGroup``: a ``python`` tool that runs code in a sandbox (never bare).

Same group name, tool name and output convention as SkyRL-gym's (stdout, or ``"Error executing
Python code: ..."`` with stderr), so envs written for it work unchanged, but the code runs isolated
under limits through :mod:`sandboxes`.
"""

from __future__ import annotations

from typing import Any, List, Optional

from skyrl_gym.tools.core import ToolGroup, tool

TIMEOUT_MESSAGE = "Error executing Python code: Execution timed out after {timeout} seconds."


class PythonCodeExecutorToolGroup(ToolGroup):
    """``sandbox``: any :class:`sandboxes.Sandbox` (default: the process-wide warm local one).
    With ``stateful=True`` each call first replays the earlier calls that succeeded (their output
    hidden), so variables and imports carry over between turns like in a notebook."""

    def __init__(self, timeout: float = 10.0, sandbox: Any = None, stateful: bool = False,
                 max_output_chars: Optional[int] = None) -> None:
        self.timeout = timeout
        self.stateful = stateful
        self.max_output_chars = max_output_chars
        self._sandbox = sandbox
        self.history: List[str] = []
        super().__init__(name="PythonCodeExecutorToolGroup")

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            from sandboxes import shared_sandbox

            self._sandbox = shared_sandbox()
        return self._sandbox

    def _program(self, code: str) -> str:
        if not (self.stateful and self.history):
            return code
        return (
            "import contextlib as _cl, io as _io\n"
            f"for _cell in {self.history!r}:\n"
            "    with _cl.redirect_stdout(_io.StringIO()), _cl.redirect_stderr(_io.StringIO()):\n"
            "        try:\n"
            "            exec(compile(_cell, '<earlier cell>', 'exec'), globals())\n"
            "        except BaseException:\n"
            "            pass\n"
            "del _cell, _cl, _io\n"
            f"exec(compile({code!r}, '<cell>', 'exec'), globals())\n"
        )

    def _cut(self, text: str) -> str:
        if self.max_output_chars is not None and len(text) > self.max_output_chars:
            return text[: self.max_output_chars] + f"\n... ({len(text) - self.max_output_chars} more characters cut)"
        return text

    @tool
    def python(self, code: str) -> str:
        """Run Python code in a sandbox and return what it printed.

        Args:
            code: the Python source to run; print what you want to see.
        """
        from sandboxes import RunRequest, Status

        limits = self.sandbox.limits.replace(wall_s=self.timeout, cpu_s=self.timeout)
        result = self.sandbox.run(RunRequest(code=self._program(code), limits=limits))
        if result.status == Status.TIMEOUT:
            return TIMEOUT_MESSAGE.format(timeout=self.timeout)
        if result.status == Status.SANDBOX_ERROR:
            return f"Error executing Python code: the sandbox failed ({result.message})"
        if result.status == Status.OK:
            self.history.append(code)
        if result.stderr:
            return self._cut(f"Error executing Python code: {result.stderr.strip()}")
        if result.status == Status.OUTPUT_LIMIT:
            return self._cut(result.stdout.strip() + "\n... (output limit reached)")
        return self._cut(result.stdout.strip() if result.stdout else "")
