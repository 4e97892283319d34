"""``run_python``: one call for envs that just want to run a snippet safely."""

from __future__ import annotations

import atexit
import threading
from typing import Optional, Union

from sandboxes.protocol import Sandbox
from sandboxes.types import Limits, RunRequest, RunResult

_shared: Optional[Sandbox] = None
_shared_lock = threading.Lock()


def shared_sandbox() -> Sandbox:
    """A process-wide warm local sandbox, started on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            from sandboxes.local import LocalSandbox

            _shared = LocalSandbox()
            atexit.register(_shared.close)
        return _shared


def run_python(code: str, stdin: Union[str, bytes] = "", timeout: Optional[float] = None,
               sandbox: Optional[Sandbox] = None, limits: Optional[Limits] = None) -> RunResult:
    """Run Python source in ``sandbox`` (default: the shared warm local sandbox). ``timeout`` sets
    the wall-clock and CPU limits, on top of ``limits`` or the sandbox's own."""
    box = sandbox if sandbox is not None else shared_sandbox()
    if timeout is not None:
        limits = (limits or box.limits).replace(wall_s=timeout, cpu_s=timeout)
    return box.run(RunRequest(code=code, stdin=stdin, limits=limits))
