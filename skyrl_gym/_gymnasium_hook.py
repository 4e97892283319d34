"""``gymnasium.make("skyrl_gym/<id>-v0")`` after ``import skyrl_gym``, without importing Gymnasium ourselves.

Gymnasium (1.x) has no plugin entry point, and importing it costs more than all of ``skyrl_gym``. So
``import skyrl_gym`` registers the bridge at once when Gymnasium is already imported, and otherwise leaves a
finder on ``sys.meta_path`` that waits for ``import gymnasium``: right after Gymnasium's own module has run, it
imports :mod:`skyrl_gym.gymnasium_bridge`, which registers every env under the ``skyrl_gym/`` namespace. The
finder only wraps the loader of that one module and removes itself after its first use.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from typing import Any, Optional, Sequence

_BRIDGE = "skyrl_gym.gymnasium_bridge"


def _register_bridge() -> None:
    try:
        importlib.import_module(_BRIDGE)
    except Exception as exc:  # a broken bridge must not break `import gymnasium`
        import warnings

        warnings.warn(f"skyrl_gym could not register its envs with Gymnasium: {type(exc).__name__}: {exc}", stacklevel=2)


class _RegisterAfterLoad(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        _remove_finders()  # Gymnasium is being imported: the finder's one job is done
        self.loader.exec_module(module)
        _register_bridge()


class _GymnasiumImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if fullname != "gymnasium":
            return None
        # Stays on sys.meta_path until the module is executed: ``importlib.util.find_spec("gymnasium")``,
        # which availability checks call (``skyrl-gym doctor``, other libraries), asks for a spec and loads
        # nothing. PathFinder looks the module up without sys.meta_path, so this finder is not asked again.
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterAfterLoad(spec.loader)
        return spec


def _remove_finders() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _GymnasiumImportFinder)]


def install() -> None:
    if _BRIDGE in sys.modules:
        return
    if "gymnasium" in sys.modules:
        _register_bridge()
    elif not any(isinstance(finder, _GymnasiumImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _GymnasiumImportFinder())
