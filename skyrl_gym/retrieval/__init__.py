"""A retrieval service for the ``search`` envs: a corpus, a BM25 (or dense) index, and an HTTP server.

``skyrl-gym serve-retriever --corpus corpus.jsonl`` serves ``POST /retrieve`` with the request and
response shapes of the Search-R1 retrieval server, so ``search`` and ``searchcode`` episodes run
end to end on one machine. Needs the ``search`` extra (bm25s, fastapi, uvicorn).
"""

from skyrl_gym.retrieval.corpus import CorpusError, load_corpus

__all__ = ["CorpusError", "load_corpus"]
