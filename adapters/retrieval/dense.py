"""Dense retrieval: document embeddings in a FAISS inner-product index (the ``dense`` extra).

It plugs into the core's retrieval service as the ``dense`` retriever kind (the ``skyrl_gym.retrievers``
entry point ``dense = "skygym_adapters.retrieval.dense:DENSE"``), so ``skyrl-gym serve-retriever
--retriever dense`` works while ``skyrl_gym`` itself never imports torch, transformers or faiss.

An :class:`Encoder` turns texts into L2-normalised float32 rows, so inner product is cosine
similarity. Two encoders ship:

* :class:`TransformersEncoder` — mean-pooled hidden states of any Hugging Face model on disk
  (e.g. an E5 or BGE checkpoint, with their query/passage prefixes); needs torch + transformers,
  imported only when it is built.
* :class:`HashingEncoder` — signed feature hashing of word counts: no model, deterministic, a
  lexical baseline and the encoder the fast tests use.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence

from skyrl_gym.retrieval.index import Hits
from skyrl_gym.retrieval.kinds import missing_modules

_INDEX_FILE = "dense.faiss"
_MARKER_FILE = "skyrl_dense_index.json"
_WORD = re.compile(r"\w\w+")


class Encoder(Protocol):
    spec: str  # identifies the encoder, so a saved index is reused only with the same one

    def __call__(self, texts: List[str], is_query: bool = False) -> Any: ...


class HashingEncoder:
    """Bag of words hashed into ``dim`` signed buckets, log-scaled counts, L2-normalised."""

    def __init__(self, dim: int = 1024) -> None:
        self.dim = dim
        self.spec = f"hashing:{dim}"

    def __call__(self, texts: List[str], is_query: bool = False) -> Any:
        import numpy as np

        matrix = np.zeros((len(texts), self.dim), dtype="float32")
        for row, text in enumerate(texts):
            counts: Dict[str, int] = {}
            for word in _WORD.findall(text.lower()):
                counts[word] = counts.get(word, 0) + 1
            for word, count in counts.items():
                digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                sign = 1.0 if digest & 1 else -1.0
                matrix[row, (digest >> 1) % self.dim] += sign * (1.0 + math.log(count))
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.maximum(norms, 1e-12)


class TransformersEncoder:
    """Mean-pooled last hidden states of a local Hugging Face model (``gguf_file`` for GGUF)."""

    def __init__(self, model_path: str, gguf_file: Optional[str] = None, max_length: int = 256, batch_size: int = 32,
                 query_prefix: str = "", passage_prefix: str = "") -> None:
        from transformers import AutoModel, AutoTokenizer

        kwargs = {"gguf_file": gguf_file} if gguf_file else {}
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, **kwargs)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModel.from_pretrained(model_path, **kwargs).eval()
        self.max_length, self.batch_size = max_length, batch_size
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.spec = f"hf:{os.path.abspath(model_path)}:{gguf_file or ''}:{query_prefix}:{passage_prefix}"

    def __call__(self, texts: List[str], is_query: bool = False) -> Any:
        import numpy as np
        import torch

        prefix = self.query_prefix if is_query else self.passage_prefix
        chunks = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer([prefix + t for t in texts[start : start + self.batch_size]], padding=True,
                                       truncation=True, max_length=self.max_length, return_tensors="pt")
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
                chunks.append(torch.nn.functional.normalize(pooled.float(), dim=-1).numpy())
        return np.concatenate(chunks).astype("float32") if chunks else np.zeros((0, 1), dtype="float32")


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise ImportError("the dense retriever needs faiss: pip install 'skyrl-gym[dense]'") from exc
    return faiss


class DenseRetriever:
    """Exact inner-product search (``IndexFlatIP``) over normalised document embeddings."""

    def __init__(self, index: Any, encoder: Encoder) -> None:
        self._index = index
        self._encoder = encoder

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @classmethod
    def build(cls, documents: Sequence[Dict[str, Any]], encoder: Encoder, batch_size: int = 256) -> "DenseRetriever":
        faiss = _faiss()
        index = None
        for start in range(0, len(documents), batch_size):
            vectors = encoder([d["contents"] for d in documents[start : start + batch_size]], is_query=False)
            if index is None:
                index = faiss.IndexFlatIP(int(vectors.shape[1]))
            index.add(vectors)
        return cls(index, encoder)

    def save(self, index_dir: str, fingerprint: str) -> None:
        os.makedirs(index_dir, exist_ok=True)
        _faiss().write_index(self._index, os.path.join(index_dir, _INDEX_FILE))
        with open(os.path.join(index_dir, _MARKER_FILE), "w", encoding="utf-8") as handle:
            json.dump({"fingerprint": fingerprint, "encoder": self._encoder.spec, "documents": len(self)}, handle)

    @classmethod
    def load(cls, index_dir: str, fingerprint: str, encoder: Encoder) -> Optional["DenseRetriever"]:
        """The saved index if it was built from the same corpus with the same encoder, else ``None``."""
        marker = os.path.join(index_dir, _MARKER_FILE)
        if not os.path.isfile(marker):
            return None
        with open(marker, encoding="utf-8") as handle:
            saved = json.load(handle)
        if saved.get("fingerprint") != fingerprint or saved.get("encoder") != encoder.spec:
            return None
        return cls(_faiss().read_index(os.path.join(index_dir, _INDEX_FILE)), encoder)

    def search(self, queries: Sequence[str], k: int) -> List[Hits]:
        if not queries:
            return []
        vectors = self._encoder(list(queries), is_query=True)
        scores, positions = self._index.search(vectors, max(1, min(int(k), len(self))))
        return [
            [(int(p), float(s)) for p, s in zip(row_p, row_s) if p >= 0]
            for row_p, row_s in zip(positions.tolist(), scores.tolist())
        ]


class _DenseFactory:
    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.label = f"dense ({encoder.spec})"

    def build(self, documents: Sequence[Dict[str, Any]]) -> DenseRetriever:
        return DenseRetriever.build(documents, self.encoder)

    def load(self, index_dir: str, fingerprint: str) -> Optional[DenseRetriever]:
        return DenseRetriever.load(index_dir, fingerprint, self.encoder)


class DenseKind:
    """``--retriever dense``: FAISS inner product over embeddings from a local model or hashed words."""

    name = "dense"
    help = "FAISS over embeddings (the 'dense' extra; --encoder hf also needs torch + transformers)"

    def add_arguments(self, group: Any) -> None:
        group.add_argument("--encoder", default="hf", choices=["hf", "hashing"],
                           help="dense: 'hf' = mean-pooled local Hugging Face model (--encoder-model), "
                                "'hashing' = hashed bag of words (no model)")
        group.add_argument("--encoder-model", default=None, help="dense+hf: model folder on disk")
        group.add_argument("--gguf-file", default=None, help="dense+hf: GGUF weights file inside the model folder")
        group.add_argument("--query-prefix", default="", help="dense+hf: text put before queries (E5: 'query: ')")
        group.add_argument("--passage-prefix", default="",
                           help="dense+hf: text put before documents (E5: 'passage: ')")

    def missing(self) -> List[str]:
        return missing_modules({"faiss": "pip install 'skyrl-gym[dense]'", "numpy": "pip install numpy"})

    def factory(self, options: Mapping[str, Any]) -> _DenseFactory:
        encoder_kind = options.get("encoder") or "hf"
        if encoder_kind == "hashing":
            return _DenseFactory(HashingEncoder())
        if encoder_kind != "hf":
            raise ValueError(f"unknown dense encoder {encoder_kind!r}; use 'hf' or 'hashing'")
        if not options.get("encoder_model"):
            raise ValueError("--retriever dense --encoder hf needs --encoder-model PATH (a local model folder)")
        problems = missing_modules({"torch": "pip install 'skyrl-gym[train]'",
                                    "transformers": "pip install 'skyrl-gym[train]'"})
        if problems:
            raise ValueError(f"--encoder hf needs: {'; '.join(problems)} (or use --encoder hashing)")
        return _DenseFactory(TransformersEncoder(
            options["encoder_model"], gguf_file=options.get("gguf_file"),
            query_prefix=options.get("query_prefix") or "", passage_prefix=options.get("passage_prefix") or ""))


DENSE = DenseKind()
