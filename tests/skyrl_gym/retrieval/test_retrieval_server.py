"""The bundled retrieval server, started for real on 127.0.0.1 over a corpus the test writes."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from skyrl_gym.retrieval.corpus import CorpusError, load_corpus
from skyrl_gym.retrieval.index import BM25Retriever, corpus_fingerprint
from tests.fixtures.extras import require_extra
from tests.tool_env_support import REPO_ROOT, RetrieverProcess, write_corpus


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    corpus = write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")
    process = RetrieverProcess(corpus)
    yield process
    process.stop()


def post(url, payload):
    response = requests.post(url, json=payload, timeout=10)
    return response.status_code, response.json()


def test_single_query_returns_best_documents_with_scores(server):
    status, body = post(server.url, {"query": "who wrote Hamlet", "topk": 2, "return_scores": True})
    assert status == 200
    (hits,) = body["result"]
    assert hits[0]["document"]["id"] == "2"
    assert "Shakespeare" in hits[0]["document"]["contents"]
    assert hits[0]["score"] > 0 and len(hits) <= 2


def test_title_text_documents_get_search_r1_contents(server):
    status, body = post(server.url, {"query": "largest planet moons", "topk": 1, "return_scores": True})
    assert body["result"][0][0]["document"]["contents"].startswith('"Jupiter"\n')


def test_batched_queries_keep_their_order_and_unmatched_queries_get_no_hits(server):
    status, body = post(server.url, {"queries": ["capital of Portugal", "zzzz qqqq", "highest mountain"], "topk": 3})
    assert status == 200
    first, empty, third = body["result"]
    assert first[0]["id"] == "7"  # without return_scores each hit is the document itself
    assert empty == []
    assert third[0]["id"] == "3"


def test_concurrent_requests_are_batched_and_all_answered(server):
    questions = ["capital of France", "Guido van Rossum", "Nobel Prize physics", "Amazon River water"] * 25
    expected = {"capital of France": "0", "Guido van Rossum": "4", "Nobel Prize physics": "5", "Amazon River water": "8"}
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda q: (q, post(server.url, {"query": q, "topk": 1, "return_scores": True})), questions))
    for question, (status, body) in answers:
        assert status == 200 and body["result"][0][0]["document"]["id"] == expected[question]
    health = requests.get(server.url.replace("/retrieve", "/health"), timeout=5).json()
    assert health["documents"] == 10 and health["queries"] >= 100


@pytest.mark.parametrize(
    "payload, message",
    [({"topk": 3}, "send"), ({"query": "x", "topk": 0}, "topk must be between"), ({"queries": ["a", 3]}, "queries")],
)
def test_bad_requests_get_a_400_or_422_that_says_why(server, payload, message):
    response = requests.post(server.url, json=payload, timeout=10)
    assert response.status_code in (400, 422)
    assert message in json.dumps(response.json()["detail"])


def test_saved_index_is_reused_for_the_same_corpus_and_rebuilt_for_another(tmp_path):
    corpus_path = write_corpus(tmp_path / "c.jsonl")
    documents = load_corpus(str(corpus_path))
    index = BM25Retriever.build(documents)
    index.save(str(tmp_path / "index"), corpus_fingerprint(documents))
    reloaded = BM25Retriever.load(str(tmp_path / "index"), corpus_fingerprint(documents))
    assert reloaded is not None and reloaded.search(["Berlin Germany"], 1)[0][0][0] == 1
    assert BM25Retriever.load(str(tmp_path / "index"), corpus_fingerprint(documents[:3])) is None


def test_cli_reports_a_bad_corpus_line_by_number(tmp_path):
    require_extra("search", ("bm25s", "fastapi", "uvicorn"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "0", "contents": "fine"}\n{"id": "1", "body": "no contents"}\n')
    with pytest.raises(CorpusError, match="line 2"):
        load_corpus(str(bad))
    done = subprocess.run([sys.executable, "-m", "skyrl_gym.cli", "serve-retriever", "--corpus", str(bad)],
                          capture_output=True, text=True, cwd=str(REPO_ROOT), timeout=60)
    assert done.returncode == 2 and "line 2" in done.stderr and "Traceback" not in done.stderr
    missing = subprocess.run([sys.executable, "-m", "skyrl_gym.cli", "serve-retriever", "--corpus",
                              str(tmp_path / "nope.jsonl")], capture_output=True, text=True, cwd=str(REPO_ROOT),
                             timeout=60)
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.strip() == f"error: serve-retriever: No such file or directory: {tmp_path / 'nope.jsonl'}"


def test_index_folder_is_saved_by_the_cli_and_loaded_on_restart(tmp_path):
    require_extra("search", ("bm25s", "fastapi", "uvicorn"))
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    first = RetrieverProcess(corpus, "--index", str(tmp_path / "idx"))
    first.stop()
    assert "built BM25 index of 10 documents" in first.output
    second = RetrieverProcess(corpus, "--index", str(tmp_path / "idx"), "--threads", "2")
    try:
        assert "loaded BM25 index of 10 documents" in second.output
        assert post(second.url, {"query": "Everest", "topk": 1})[1]["result"][0][0]["id"] == "3"
        batch = post(second.url, {"queries": ["Everest", "Berlin Germany", "Jupiter moons"], "topk": 1})[1]["result"]
        assert [hits[0]["id"] for hits in batch] == ["3", "1", "9"]
    finally:
        second.stop()


def test_a_server_on_every_address_says_which_url_a_client_uses():
    import socket

    from skyrl_gym.retrieval.server import wildcard_hint

    for host in ("0.0.0.0", "::", "[::]", ""):
        hint = wildcard_hint(host, 8000)
        assert f"http://{socket.gethostname()}:8000" in hint and "every address" in hint, host
    for host in ("127.0.0.1", "::1", "10.0.0.5", "localhost"):
        assert wildcard_hint(host, 8000) == "", host
