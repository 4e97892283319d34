"""Process-wide shared sandboxes and ``run_python``, for envs that just want to run a snippet safely."""

from __future__ import annotations

import atexit
import json
import threading
from typing import Any, Dict, Mapping, Optional, Union

from skygym_sandboxes.protocol import Sandbox
from skygym_sandboxes.types import Limits, RunRequest, RunResult

_shared: Dict[str, Sandbox] = {}
_shared_lock = threading.Lock()


def shared_sandbox(config: Optional[Mapping[str, Any]] = None) -> Sandbox:
    """One sandbox per distinct config for the whole process, started on first use, closed at exit.

    Envs are built per episode; sharing the sandbox keeps one warm pool instead of one per episode.
    ``config`` is what :func:`skygym_sandboxes.sandbox_from_config` takes (default: a warm local sandbox).
    """
    key = json.dumps(dict(config or {}), sort_keys=True, default=str)
    with _shared_lock:
        box = _shared.get(key)
        if box is None:
            from skygym_sandboxes.factory import sandbox_from_config

            box = sandbox_from_config(config)
            _shared[key] = box
            atexit.register(box.close)
        return box


def run_python(
    code: str,
    stdin: Union[str, bytes] = "",
    timeout: Optional[float] = None,
    sandbox: Optional[Sandbox] = None,
    limits: Optional[Limits] = None,
) -> RunResult:
    """Run Python source in ``sandbox`` (default: the shared warm local sandbox). ``timeout`` sets
    the wall-clock and CPU limits, on top of ``limits`` or the sandbox's own."""
    box = sandbox if sandbox is not None else shared_sandbox()
    if timeout is not None:
        limits = (limits or box.limits).replace(wall_s=timeout, cpu_s=timeout)
    return box.run(RunRequest(code=code, stdin=stdin, limits=limits))
