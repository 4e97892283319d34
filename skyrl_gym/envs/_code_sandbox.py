"""How code envs get their sandbox: ``env_config["sandbox"]`` (a dict or OmegaConf node) picks the
backend and its options; envs built with the same settings share one process-wide sandbox."""

from __future__ import annotations

from typing import Any, Dict, Mapping

from skygym_sandboxes import Sandbox, shared_sandbox


def plain(value: Any) -> Any:
    """A plain dict/list copy of mapping- or list-like config values (OmegaConf nodes included)."""
    if isinstance(value, Mapping) or (hasattr(value, "keys") and hasattr(value, "__getitem__")):
        return {str(key): plain(value[key]) for key in value.keys()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        return [plain(item) for item in value]
    return value


def config_dict(env_config: Any) -> Dict[str, Any]:
    if env_config is None:
        return {}
    converted = plain(env_config)
    if not isinstance(converted, dict):
        raise TypeError(f"env_config must be a mapping, got {type(env_config).__name__}")
    return converted


def sandbox_for(env_config: Any) -> Sandbox:
    """The shared sandbox for ``env_config["sandbox"]`` (default: a warm local bubblewrap pool)."""
    settings = config_dict(env_config).get("sandbox") or {}
    if not isinstance(settings, dict):
        raise TypeError(
            f'env_config["sandbox"] must be a mapping such as {{"backend": "local"}}, got {settings!r}'
        )
    return shared_sandbox(settings)
