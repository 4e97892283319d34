"""Reward fingerprints: a hash of what decides an env's reward, so a run records which reward it was trained
on.

``skyrl_gym.spec("gsm8k").fingerprint`` (computed on first use, then kept) hashes:

* the env's verifier code within its package: every Python file of the folder of the entry point's module (its
  ``audit.py`` excepted), and every module of its distribution those files import, followed transitively (not
  into a package's ``__init__``, which re-exports, nor into the env contract's plumbing, :data:`PLUMBING`);
* its reward settings: the spec's registered kwargs;
* the data builder: the module of its dataset builder (followed the same way), and the versions of the
  distributions the hashed code imports from outside its package (``math-verify``, ``reasoning-gym``...).

Files are read from disk, never imported; the fingerprint is ``sha256:`` and 16 hex digits. Change a verifier
and the fingerprint changes; ``skyrl-gym fingerprint ID --explain`` lists what went into it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from skyrl_gym import threadsafe_ast

PREFIX = "sha256:"
_cache: Dict[Tuple[str, str, str], Tuple[str, List[str]]] = {}
_lock = threading.Lock()
_SKIPPED_FILES = {"audit.py"}  # what audits the verifier does not decide the reward
# The env contract's plumbing (registry, rows, episode driver, tool calling): every env imports it, none is
# scored by it, so it is not followed (an edit there would change every fingerprint, no reward).
PLUMBING = (
    "skyrl_gym.core",
    "skyrl_gym.registration",
    "skyrl_gym.data",
    "skyrl_gym.datasets",
    "skyrl_gym.errors",
    "skyrl_gym.error",
    "skyrl_gym.fingerprint",
    "skyrl_gym.metrics",
    "skyrl_gym.http_retry",
    "skyrl_gym.episode",
    "skyrl_gym.checker",
    "skyrl_gym.audit",
    "skyrl_gym.tools.core",
    "skyrl_gym.tools.blocking",
    "skyrl_gym.helper_processes",
    "skyrl_gym.envs.base_text_env",
    "skyrl_gym.cli",
)


def _module_file(name: str) -> Optional[Path]:
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        return None
    return Path(found.origin)


def _imports_of(path: Path, module: str) -> Set[str]:
    """Absolute names of the modules ``path`` (the module ``module``) imports, relative imports resolved."""
    try:
        tree = threadsafe_ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parents = parts[: len(parts) - node.level + 1]
                base = ".".join(parents + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # submodules imported by name
    return {name for name in names if name}


def _module_name_of(path: Path, top: str, root: Path) -> str:
    relative = path.relative_to(root).with_suffix("")
    parts = list(relative.parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([top] + parts) if parts else top


@functools.lru_cache(maxsize=1)
def _tops_to_distributions() -> Dict[str, Tuple[str, ...]]:
    """Top-level import name -> the distributions whose ``top_level.txt`` names it (read once per process; far
    cheaper than ``packages_distributions``, which reads every installed file list)."""
    from importlib.metadata import distributions

    found: Dict[str, Set[str]] = {}
    for dist in distributions():
        for top in (dist.read_text("top_level.txt") or "").split():
            found.setdefault(top, set()).add(dist.metadata["Name"])
    return {top: tuple(sorted(names)) for top, names in found.items()}


def _distributions_of(top: str) -> Tuple[str, ...]:
    """The distributions that ship the top-level package ``top`` (by ``top_level.txt``, else by its name)."""
    from importlib.metadata import PackageNotFoundError, distribution

    known = _tops_to_distributions().get(top)
    if known:
        return known
    for guess in dict.fromkeys((top, top.replace("_", "-"))):
        try:
            return (distribution(guess).metadata["Name"],)
        except PackageNotFoundError:
            continue
    return ()


def _distribution_versions(tops: Set[str]) -> List[str]:
    from importlib.metadata import version

    out = set()
    for top in tops:
        for dist in _distributions_of(top):
            try:
                out.add(f"uses {dist}=={version(dist)}")
            except Exception:  # metadata that cannot be read: the name alone
                out.add(f"uses {dist}")
    return sorted(out)


def _own_tops(tops: Set[str]) -> Set[str]:
    """The top-level packages of the distributions that ship ``tops`` (``skyrl_gym``, ``skygym_contrib``,
    ``skygym_sandboxes``... for skyrl-gym): their code is hashed, not only their version named."""
    dists = {dist for top in tops for dist in _distributions_of(top)}
    return set(tops) | {top for top, owners in _tops_to_distributions().items() if dists & set(owners)}


def module_files(
    start_modules: Sequence[str], skip: Sequence[str] = PLUMBING, into_packages: bool = False
) -> Tuple[Dict[str, Path], Set[str]]:
    """The files of ``start_modules`` and of every module of their distributions they import, followed
    transitively (name -> path), and the top-level names they import from outside. Modules under ``skip`` are not
    followed, nor a package's ``__init__`` (which re-exports) unless ``into_packages``. Read from disk, never
    imported; imports inside functions count."""
    files: Dict[str, Path] = {}
    outside: Set[str] = set()
    pending = list(start_modules)
    own_tops = _own_tops({name.split(".")[0] for name in start_modules})
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    while pending:
        name = pending.pop()
        if name in files:
            continue
        path = _module_file(name)
        if path is None:
            continue
        files[name] = path
        for imported in _imports_of(path, name):
            top = imported.split(".")[0]
            if top not in own_tops:
                if top not in stdlib and top != "__future__":
                    outside.add(top)
                continue
            if any(imported == p or imported.startswith(p + ".") for p in skip):
                continue
            found = _module_file(imported)
            if found is None or (found.name == "__init__.py" and not into_packages):
                continue
            pending.append(imported)
    return files, outside


def _entry_module(entry_point: Any) -> Optional[str]:
    if isinstance(entry_point, str):
        return entry_point.partition(":")[0] or None
    return getattr(entry_point, "__module__", None)


def fingerprint_parts(env_spec: Any) -> List[str]:
    """What goes into the fingerprint of ``env_spec``, one line each (``file NAME SHA``, ``kwargs ...``,
    ``uses DIST==VERSION``)."""
    return _compute(env_spec)[1]


def fingerprint_of(env_spec: Any) -> str:
    """The reward fingerprint of an :class:`~skyrl_gym.registration.EnvSpec` (kept per process)."""
    return _compute(env_spec)[0]


def _compute(env_spec: Any) -> Tuple[str, List[str]]:
    kwargs = json.dumps(env_spec.kwargs or {}, sort_keys=True, default=repr)
    entry = env_spec.entry_point if isinstance(env_spec.entry_point, str) else repr(env_spec.entry_point)
    key = (env_spec.id, entry, kwargs)
    with _lock:
        if key in _cache:
            return _cache[key]
    parts = [f"entry point {_entry_point_name(env_spec.entry_point)}", f"kwargs {kwargs}"]
    start: List[str] = []
    module = _entry_module(env_spec.entry_point)
    if module:
        path = _module_file(module)
        if path is not None:
            folder = path.parent
            package = module.rpartition(".")[0] or module
            start += [
                f"{package}.{p.stem}" if p.name != "__init__.py" else package
                for p in sorted(folder.glob("*.py"))
                if p.name not in _SKIPPED_FILES
            ]
        start.append(module)
    builder = _builder_module(env_spec.id)
    if builder:
        parts.append(f"dataset builder {builder}")
        start.append(builder.partition(":")[0])
    files, outside = module_files(start)
    for name in sorted(files):
        digest = hashlib.sha256(files[name].read_bytes().replace(b"\r\n", b"\n")).hexdigest()[:16]
        parts.append(f"file {name} {digest}")
    parts += _distribution_versions(outside)
    fingerprint = PREFIX + hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:16]
    with _lock:
        _cache[key] = (fingerprint, parts)
    return fingerprint, parts


def _entry_point_name(entry_point: Any) -> str:
    if isinstance(entry_point, str) or entry_point is None:
        return str(entry_point)
    return (
        f"{getattr(entry_point, '__module__', '?')}:{getattr(entry_point, '__qualname__', repr(entry_point))}"
    )


def _builder_module(env_id: str) -> Optional[str]:
    from skyrl_gym import datasets

    if not datasets.has_dataset(env_id):
        return None
    try:
        return datasets.builder_name(env_id)
    except Exception:
        return None


def clear_cache() -> None:
    """Forget computed fingerprints (after editing a verifier in a running process)."""
    with _lock:
        _cache.clear()


__all__ = ["fingerprint_of", "fingerprint_parts", "clear_cache", "PREFIX"]
