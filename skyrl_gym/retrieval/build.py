"""Load a corpus and its BM25 index, building and saving the index when needed."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym.retrieval.corpus import load_corpus
from skyrl_gym.retrieval.index import BM25Retriever, corpus_fingerprint


def load_bm25(corpus_path: str, index_dir: Optional[str] = None, log: Any = print) -> Tuple[BM25Retriever, List[Dict[str, Any]]]:
    """The corpus and a BM25 index over it; with ``index_dir`` a saved index is reused if it
    was built from the same documents, otherwise it is (re)built and saved there."""
    start = time.monotonic()
    documents = load_corpus(corpus_path)
    fingerprint = corpus_fingerprint(documents)
    if index_dir and os.path.isdir(index_dir):
        retriever = BM25Retriever.load(index_dir, fingerprint)
        if retriever is not None:
            log(f"loaded BM25 index of {len(documents)} documents from {index_dir} in {time.monotonic() - start:.1f} s")
            return retriever, documents
    retriever = BM25Retriever.build(documents)
    if index_dir:
        retriever.save(index_dir, fingerprint)
    log(f"built BM25 index of {len(documents)} documents in {time.monotonic() - start:.1f} s"
        + (f", saved to {index_dir}" if index_dir else ""))
    return retriever, documents
