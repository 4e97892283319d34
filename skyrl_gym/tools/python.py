"""``PythonCodeExecutorToolGroup``: a ``python`` tool that runs model-written code in a sandbox.

Code never runs in the env's own process: it goes to a :mod:`sandboxes` backend (by default the
process-wide warm local sandbox: namespaces, no network, a scratch folder, time/memory/output
limits). The text returned follows SkyRL-gym's tool: the program's stdout, or
``Error executing Python code: ...`` with its stderr, or a time-out message.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, Mapping, Optional

from skyrl_gym.tools.core import ToolGroup, tool

NO_OUTPUT_MESSAGE = "The code ran without printing anything; print() the values you want to see."

_sandboxes_by_config: Dict[str, Any] = {}
_sandboxes_lock = threading.Lock()


def sandbox_for(config: Optional[Mapping[str, Any]]) -> Any:
    """One shared sandbox per distinct config (``None``: the shared warm local sandbox), so that
    episodes reuse warm workers instead of starting a sandbox each."""
    from sandboxes import sandbox_from_config, shared_sandbox

    if not config:
        return shared_sandbox()
    key = json.dumps(dict(config), sort_keys=True, default=str)
    with _sandboxes_lock:
        if key not in _sandboxes_by_config:
            _sandboxes_by_config[key] = sandbox_from_config(dict(config))
        return _sandboxes_by_config[key]


def render_run_result(result: Any, timeout: float) -> str:
    """SkyRL-gym's wording for a finished run."""
    status = str(result.status)
    if status == "timeout":
        return f"Error executing Python code: Execution timed out after {timeout:g} seconds."
    if result.stderr and result.stderr.strip():
        return f"Error executing Python code: {result.stderr.strip()}"
    if status != "ok":
        detail = result.message or f"exit code {result.exit_code}"
        return f"Error executing Python code: {status}: {detail}"
    output = result.stdout.strip() if result.stdout else ""
    if result.stdout_truncated:
        output += "\n[output truncated]"
    return output


class PythonCodeExecutorToolGroup(ToolGroup):
    """Runs Python in ``sandbox`` (any :class:`sandboxes.Sandbox`; default: the shared local one)."""

    def __init__(self, timeout: float = 10.0, sandbox: Any = None, sandbox_config: Optional[Mapping[str, Any]] = None) -> None:
        self.timeout = float(timeout)
        self._sandbox = sandbox
        self._sandbox_config = sandbox_config
        super().__init__(name="PythonCodeExecutorToolGroup")

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            self._sandbox = sandbox_for(self._sandbox_config)
        return self._sandbox

    def _request(self, code: str) -> Any:
        from sandboxes import RunRequest

        limits = self.sandbox.limits.replace(wall_s=self.timeout, cpu_s=self.timeout)
        return RunRequest(code=code, limits=limits)

    @tool
    def python(self, code: str) -> str:
        """Run Python code in a sandbox and return what it printed (or the error).

        Args:
            code: a complete Python program; print() what you want to see.
        """
        try:
            result = self.sandbox.run(self._request(code))
        except Exception as exc:  # a sandbox that cannot start is reported, not raised
            return f"Error executing Python code: the sandbox is unavailable ({type(exc).__name__}: {exc})"
        return render_run_result(result, self.timeout)

    async def apython(self, code: str) -> str:
        """:meth:`python` awaited without blocking the event loop."""
        try:
            result = await self.sandbox.arun(self._request(code))
        except Exception as exc:
            return f"Error executing Python code: the sandbox is unavailable ({type(exc).__name__}: {exc})"
        return render_run_result(result, self.timeout)
