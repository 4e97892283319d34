"""Load a corpus and its index, building and saving the index when needed (any retriever kind)."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from skyrl_gym.retrieval.corpus import load_corpus
from skyrl_gym.retrieval.index import Retriever, corpus_fingerprint
from skyrl_gym.retrieval.kinds import get_retriever_kind

Log = Callable[[str], Any]


def load_retriever(
    corpus_path: str,
    index_dir: Optional[str] = None,
    kind: str = "bm25",
    options: Optional[Mapping[str, Any]] = None,
    log: Log = print,
) -> Tuple[Retriever, List[Dict[str, Any]]]:
    """The corpus and an index of ``kind`` (see :mod:`skyrl_gym.retrieval.kinds`) over it.

    ``options`` are the kind's options (for the command line: its parsed arguments). With ``index_dir``
    a saved index is reused when it was built from the same documents (and, for dense kinds, the same
    encoder); otherwise it is (re)built and saved there.
    """
    start = time.monotonic()
    factory = get_retriever_kind(kind).factory(dict(options or {}))
    documents = load_corpus(corpus_path)
    fingerprint = corpus_fingerprint(documents)
    if index_dir and os.path.isdir(index_dir):
        retriever = factory.load(index_dir, fingerprint)
        if retriever is not None:
            log(f"loaded {factory.label} index of {len(documents)} documents from {index_dir} "
                f"in {time.monotonic() - start:.1f} s")
            return retriever, documents
    retriever = factory.build(documents)
    if index_dir:
        retriever.save(index_dir, fingerprint)  # type: ignore[attr-defined]
    log(f"built {factory.label} index of {len(documents)} documents in {time.monotonic() - start:.1f} s"
        + (f", saved to {index_dir}" if index_dir else ""))
    return retriever, documents


def load_bm25(corpus_path: str, index_dir: Optional[str] = None, log: Log = print) -> Tuple[Retriever, List[Dict[str, Any]]]:
    return load_retriever(corpus_path, index_dir, "bm25", log=log)
