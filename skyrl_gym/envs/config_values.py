"""Read settings from an ``env_config`` that may be a dict, an OmegaConf ``DictConfig`` or a dataclass."""

from __future__ import annotations

from typing import Any, Mapping


def config_value(env_config: Any, key: str, default: Any = None) -> Any:
    """``env_config[key]`` (or attribute ``key``) if present and not None, else ``default``."""
    if env_config is None:
        return default
    if isinstance(env_config, Mapping) or hasattr(env_config, "get"):
        try:
            value = env_config.get(key, None)
        except Exception:
            value = None
    else:
        value = getattr(env_config, key, None)
    return default if value is None else value
