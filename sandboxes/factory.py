"""Build a sandbox from a backend name and options, or from a config mapping such as an env's
``env_config["sandbox"]`` (``{"backend": "local", "pool_size": 4, "limits": {"wall_s": 5}}``)."""

from __future__ import annotations

import importlib
from typing import Any, Dict, Mapping, Optional

from skygym_sandboxes.protocol import Sandbox

# Backend name -> "module:Class". Imported on use, so `import skygym_sandboxes` stays light.
BACKENDS: Dict[str, str] = {
    "local": "skygym_sandboxes.local:LocalSandbox",
    "docker": "skygym_sandboxes.docker_backend:DockerSandbox",
    "remote": "skygym_sandboxes.remote:RemoteSandbox",
}


def get_sandbox(backend: str = "local", **options: Any) -> Sandbox:
    """A sandbox of the named backend; ``options`` go to its constructor (``limits`` may be a dict)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {sorted(BACKENDS)}")
    module_name, _, class_name = BACKENDS[backend].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise TypeError(f"bad option for the {backend!r} sandbox backend: {exc}") from None


def sandbox_from_config(config: Optional[Mapping[str, Any]]) -> Sandbox:
    """``None`` or ``{}`` gives the default (a warm local sandbox); ``{"backend": ..., **options}``."""
    options = dict(config or {})
    backend = options.pop("backend", "local")
    return get_sandbox(backend, **options)
