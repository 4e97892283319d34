"""Resolving ``module.Class`` import paths named in the agent YAML."""

from __future__ import annotations

import importlib
from typing import Any

from skygym_adapters.agents.config import AgentConfigError


def import_object(path: str, what: str) -> Any:
    """The object at ``module.attr``; an error names the path, the kind of thing expected and what went wrong."""
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise AgentConfigError(f"{what} {path!r} is not an import path (module.Class)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentConfigError(f"{what} {path!r}: cannot import {module_name!r} ({exc})") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AgentConfigError(f"{what} {path!r}: module {module_name!r} has no {attr!r}") from None


__all__ = ["import_object"]
