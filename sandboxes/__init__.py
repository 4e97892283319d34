"""Safe-by-default execution of untrusted code.

    from skygym_sandboxes import get_sandbox, RunRequest
    with get_sandbox("local") as box:
        result = box.run(RunRequest(code="print(input()[::-1])", stdin="abc"))
        assert result.status == "ok" and result.stdout == "cba\\n"

Backends: ``local`` (bubblewrap namespaces, warm pool), ``docker``, ``remote`` (HTTP service).
"""

from skygym_sandboxes.convenience import run_python, shared_sandbox
from skygym_sandboxes.factory import BACKENDS, get_sandbox, sandbox_from_config
from skygym_sandboxes.protocol import BaseSandbox, Sandbox
from skygym_sandboxes.types import Limits, RunRequest, RunResult, SandboxUnavailable, Status

__all__ = [
    "BACKENDS",
    "BaseSandbox",
    "Limits",
    "RunRequest",
    "RunResult",
    "Sandbox",
    "SandboxUnavailable",
    "Status",
    "get_sandbox",
    "run_python",
    "sandbox_from_config",
    "shared_sandbox",
]
