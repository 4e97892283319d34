"""Retriever kinds: how ``serve-retriever`` builds, saves and reloads an index.

A kind has a ``name`` (the value of ``--retriever``), a one-line ``help``, ``add_arguments(group)`` for
its own command-line options, ``missing()`` (what is not installed, each with the command that
installs it) and ``factory(options)``, which returns an :class:`IndexFactory` (``label``, ``build``,
``load``) for the parsed options.

BM25 (``bm25s``) is built in. Other kinds come from installed packages through the
``skyrl_gym.retrievers`` entry-point group, read on first use; the value names a kind object::

    [project.entry-points."skyrl_gym.retrievers"]
    dense = "skygym_adapters.retrieval.dense:DENSE"

so kinds that need heavy packages (the dense FAISS kind, with torch/transformers encoders) live in
a higher layer and the core never imports upward. :func:`register_retriever_kind` adds one in-process.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence

from skyrl_gym.retrieval.index import BM25Retriever, Retriever

ENTRY_POINT_GROUP = "skyrl_gym.retrievers"


class IndexFactory(Protocol):
    label: str  # how log lines name the index, e.g. "BM25" or "dense (hashing:1024)"

    def build(self, documents: Sequence[Dict[str, Any]]) -> Retriever: ...

    def load(self, index_dir: str, fingerprint: str) -> Optional[Retriever]: ...


class RetrieverKind(Protocol):
    name: str
    help: str

    def add_arguments(self, group: Any) -> None: ...

    def missing(self) -> List[str]: ...

    def factory(self, options: Mapping[str, Any]) -> IndexFactory: ...


def missing_modules(requirements: Mapping[str, str]) -> List[str]:
    """``{module: install hint}`` -> one message per module that cannot be imported."""
    return [f"{module} ({hint})" for module, hint in requirements.items() if importlib.util.find_spec(module) is None]


def join_missing(problems: List[str]) -> str:
    """``missing_modules`` messages (from the server and the kind) as one line, each install hint once:
    ``fastapi, uvicorn, bm25s (pip install 'skyrl-gym[search]')``. Other messages are kept as they are."""
    by_hint: Dict[str, List[str]] = {}
    for problem in problems:
        module, sep, hint = problem.partition(" (")
        if sep and hint.endswith(")") and module.isidentifier():
            by_hint.setdefault(hint[:-1], []).append(module)
        else:
            by_hint.setdefault(problem, [])
    return "; ".join(f"{', '.join(modules)} ({hint})" if modules else hint
                     for hint, modules in by_hint.items())


class _BM25Factory:
    label = "BM25"

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def build(self, documents: Sequence[Dict[str, Any]]) -> Retriever:
        retriever = BM25Retriever.build(documents)
        retriever.threads = self.threads
        return retriever

    def load(self, index_dir: str, fingerprint: str) -> Optional[Retriever]:
        retriever = BM25Retriever.load(index_dir, fingerprint)
        if retriever is not None:
            retriever.threads = self.threads
        return retriever


class BM25Kind:
    """BM25 over the documents' contents (``bm25s``, English stop words): the default."""

    name = "bm25"
    help = "BM25 (the 'search' extra)"

    def add_arguments(self, group: Any) -> None:
        group.add_argument("--threads", type=int, default=1,
                           help="bm25: threads searching one batch of queries (-1: all CPUs; default 1)")

    def missing(self) -> List[str]:
        return missing_modules({"bm25s": "pip install 'skyrl-gym[search]'"})

    def factory(self, options: Mapping[str, Any]) -> IndexFactory:
        return _BM25Factory(int(options.get("threads", 1)))


_BUILTIN: Dict[str, RetrieverKind] = {"bm25": BM25Kind()}
_registered: Dict[str, RetrieverKind] = {}
_plugins: Optional[Dict[str, RetrieverKind]] = None
_lock = threading.Lock()
plugin_errors: Dict[str, str] = {}


def register_retriever_kind(kind: RetrieverKind, replace: bool = False) -> None:
    """Make ``kind`` available as ``--retriever KIND.name`` in this process."""
    name = getattr(kind, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a retriever kind needs a non-empty string 'name', got {kind!r}")
    for method in ("add_arguments", "missing", "factory"):
        if not callable(getattr(kind, method, None)):
            raise ValueError(f"retriever kind {name!r} has no {method}() method (see skyrl_gym.retrieval.kinds)")
    if not replace and name in retriever_kinds():
        raise ValueError(f"a retriever kind {name!r} is already registered; pass replace=True to replace it")
    _registered[name] = kind


def _load_plugins() -> Dict[str, RetrieverKind]:
    global _plugins
    with _lock:
        if _plugins is None:
            from importlib.metadata import entry_points

            found: Dict[str, RetrieverKind] = {}
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                try:
                    kind = ep.load()
                    found[getattr(kind, "name", ep.name)] = kind() if isinstance(kind, type) else kind
                except Exception as exc:  # one broken plugin must not hide the others
                    plugin_errors[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"
            _plugins = found
        return _plugins


def retriever_kinds() -> Dict[str, RetrieverKind]:
    """Every available kind by name: built-in, then installed plugins, then registered in-process."""
    return {**_BUILTIN, **_load_plugins(), **_registered}


def get_retriever_kind(name: str) -> RetrieverKind:
    kinds = retriever_kinds()
    if name in kinds:
        return kinds[name]
    broken = f" (plugin {name!r} failed to load: {plugin_errors[name]})" if name in plugin_errors else ""
    hint = "" if broken else (" 'dense' comes from skygym_adapters, installed with skyrl-gym: reinstall the package "
                              "(pip install skyrl-gym) if it is missing." if name == "dense" else "")
    raise ValueError(f"unknown retriever {name!r}{broken}; available: {', '.join(sorted(kinds))}.{hint}")


__all__ = [
    "BM25Kind",
    "ENTRY_POINT_GROUP",
    "IndexFactory",
    "RetrieverKind",
    "get_retriever_kind",
    "join_missing",
    "missing_modules",
    "register_retriever_kind",
    "retriever_kinds",
]
