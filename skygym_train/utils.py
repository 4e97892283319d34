"""SkyRL-train's ``skyrl_train.utils`` names that its tutorial uses: :func:`initialize_ray`."""

from __future__ import annotations

from typing import Any, Optional


def initialize_ray(cfg: Optional[Any] = None, **ray_init_kwargs: Any) -> None:
    """Start (or join) Ray for a training run, as SkyRL-train's ``initialize_ray(cfg)`` does.

    Workers get the driver's import paths (so a script's own modules, e.g. a custom env, import in Ray tasks)
    and the dashboard is off. ``cfg`` is accepted for the same call shape; nothing in it changes how Ray starts.
    """
    from skygym_train.ray_utils import init_ray

    init_ray(**ray_init_kwargs)


__all__ = ["initialize_ray"]
