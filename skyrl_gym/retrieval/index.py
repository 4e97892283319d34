"""Indexes that rank corpus documents for queries: BM25 (``bm25s``) here, dense FAISS in ``dense``.

Both implement :class:`Retriever`: ``search(queries, k)`` returns, per query, up to ``k``
``(document_position, score)`` pairs, best first, leaving out documents that do not match at all.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

Hits = List[Tuple[int, float]]

_FINGERPRINT_FILE = "skyrl_corpus_fingerprint.json"


class Retriever(Protocol):
    def search(self, queries: Sequence[str], k: int) -> List[Hits]: ...

    def __len__(self) -> int: ...


def corpus_fingerprint(documents: Sequence[Dict[str, Any]]) -> str:
    """A hash of the document texts, so a saved index is reused only for the same corpus."""
    digest = hashlib.sha256()
    for document in documents:
        digest.update(document["contents"].encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


class BM25Retriever:
    """BM25 over the documents' ``contents`` with English stop words removed."""

    def __init__(self, model: Any, num_documents: int, threads: int = 1) -> None:
        self._model = model
        self._num_documents = num_documents
        self.threads = threads  # bm25s worker threads per batch (-1: all CPUs, 0 or 1: none)

    def __len__(self) -> int:
        return self._num_documents

    @classmethod
    def build(cls, documents: Sequence[Dict[str, Any]]) -> "BM25Retriever":
        import bm25s

        tokens = bm25s.tokenize([d["contents"] for d in documents], stopwords="en", show_progress=False)
        model = bm25s.BM25()
        model.index(tokens, show_progress=False)
        return cls(model, len(documents))

    def save(self, index_dir: str, fingerprint: str) -> None:
        os.makedirs(index_dir, exist_ok=True)
        self._model.save(index_dir, show_progress=False)
        with open(os.path.join(index_dir, _FINGERPRINT_FILE), "w", encoding="utf-8") as handle:
            json.dump({"fingerprint": fingerprint, "documents": self._num_documents}, handle)

    @classmethod
    def load(cls, index_dir: str, fingerprint: str) -> Optional["BM25Retriever"]:
        """The saved index, or ``None`` when there is none or it was built from another corpus."""
        marker = os.path.join(index_dir, _FINGERPRINT_FILE)
        if not os.path.isfile(marker):
            return None
        with open(marker, encoding="utf-8") as handle:
            saved = json.load(handle)
        if saved.get("fingerprint") != fingerprint:
            return None
        import bm25s

        model = bm25s.BM25.load(index_dir, show_progress=False, verbosity=0)
        return cls(model, int(saved["documents"]))

    def search(self, queries: Sequence[str], k: int) -> List[Hits]:
        import bm25s

        if not queries:
            return []
        k = max(1, min(int(k), self._num_documents))
        query_tokens = bm25s.tokenize(list(queries), stopwords="en", show_progress=False, return_ids=False)
        threads = self.threads if len(queries) > 1 else 1
        positions, scores = self._model.retrieve(query_tokens, k=k, show_progress=False, n_threads=threads)
        results: List[Hits] = []
        for row_positions, row_scores in zip(positions.tolist(), scores.tolist()):
            results.append([(int(p), float(s)) for p, s in zip(row_positions, row_scores) if s > 0.0])
        return results
