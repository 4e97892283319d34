"""Retriever kinds that need heavy packages, contributed to the core's ``serve-retriever``.

* :mod:`skygym_adapters.retrieval.dense`: the ``dense`` kind (FAISS; torch/transformers encoders).
"""
