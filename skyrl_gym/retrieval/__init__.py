"""A retrieval service for the ``search`` envs: a corpus, an index, and an HTTP server.

``skyrl-gym serve-retriever --corpus corpus.jsonl`` serves ``POST /retrieve`` with the request and
response shapes of the Search-R1 retrieval server, so ``search`` and ``searchcode`` episodes run
end to end on one machine. Needs the ``search`` extra (bm25s, fastapi, uvicorn). BM25 is built in;
other index kinds (``--retriever dense``, from ``skygym_adapters``) plug in through the
``skyrl_gym.retrievers`` entry-point group (:mod:`skyrl_gym.retrieval.kinds`).
"""

from skyrl_gym.retrieval.corpus import CorpusError, load_corpus

__all__ = ["CorpusError", "load_corpus"]
