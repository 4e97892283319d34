"""Load a corpus and its index (BM25 or dense), building and saving the index when needed."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from skyrl_gym.retrieval.corpus import load_corpus
from skyrl_gym.retrieval.index import BM25Retriever, Retriever, corpus_fingerprint

Log = Callable[[str], Any]


def load_retriever(
    corpus_path: str, index_dir: Optional[str] = None, kind: str = "bm25", encoder: Any = None, log: Log = print
) -> Tuple[Retriever, List[Dict[str, Any]]]:
    """The corpus and an index over it. With ``index_dir`` a saved index is reused when it was built
    from the same documents (and encoder); otherwise it is (re)built and saved there."""
    start = time.monotonic()
    documents = load_corpus(corpus_path)
    fingerprint = corpus_fingerprint(documents)
    if kind == "bm25":
        cls: Any = BM25Retriever
        load_args: tuple = ()
    elif kind == "dense":
        if encoder is None:
            raise ValueError("a dense index needs an encoder")
        from skyrl_gym.retrieval.dense import DenseRetriever

        cls, load_args = DenseRetriever, (encoder,)
    else:
        raise ValueError(f"unknown retriever {kind!r}; use 'bm25' or 'dense'")
    name = "BM25" if kind == "bm25" else f"dense ({encoder.spec})"
    if index_dir and os.path.isdir(index_dir):
        retriever = cls.load(index_dir, fingerprint, *load_args)
        if retriever is not None:
            log(f"loaded {name} index of {len(documents)} documents from {index_dir} in {time.monotonic() - start:.1f} s")
            return retriever, documents
    retriever = cls.build(documents, *load_args)
    if index_dir:
        retriever.save(index_dir, fingerprint)
    log(f"built {name} index of {len(documents)} documents in {time.monotonic() - start:.1f} s"
        + (f", saved to {index_dir}" if index_dir else ""))
    return retriever, documents


def load_bm25(corpus_path: str, index_dir: Optional[str] = None, log: Log = print) -> Tuple[Retriever, List[Dict[str, Any]]]:
    return load_retriever(corpus_path, index_dir, "bm25", log=log)
