"""serve-retriever as an attacker meets it: a real retrieval server on 127.0.0.1 whose clients come without
the operator's token, send bodies built to exhaust it, or steer the search envs' token to their own URL. The
same protection as serve-env and the sandbox service, from the same code (skygym_sandboxes.http_bodies)."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import uuid

import pytest
import requests

from skyrl_gym.retrieval.server import TOKEN_ENV, URL_ENV
from skyrl_gym.tools.search import SearchToolGroup
from tests.sandboxes.remote_support import assert_slow_clients_cut_off, peak_rss_mib, post_chunked
from tests.tool_env_support import REPO_ROOT, RetrieverProcess, write_corpus

TOKEN = "operator-retriever-token-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


@pytest.fixture(scope="module")
def guarded(corpus):
    process = RetrieverProcess(corpus, "--token", TOKEN, "--max-body-bytes", str(1024 * 1024))
    yield process
    process.stop()


def bearer(token=TOKEN):
    return {"Authorization": f"Bearer {token}"}


def test_every_route_needs_the_operators_token(guarded):
    health = guarded.url.replace("/retrieve", "/health")
    query = {"query": "who wrote Hamlet", "topk": 1}
    for headers in ({}, bearer("wrong"), bearer(TOKEN + "x"), {"Authorization": TOKEN}):
        assert requests.post(guarded.url, json=query, headers=headers, timeout=10).status_code == 401
        refused = requests.get(health, headers=headers, timeout=10)
        assert refused.status_code == 401 and TOKEN_ENV in refused.json()["detail"], refused.text
    for page in ("/docs", "/redoc", "/openapi.json"):  # FastAPI's own pages answered without the token
        assert requests.get(guarded.url.replace("/retrieve", page), timeout=10).status_code == 404, page
    answer = requests.post(guarded.url, json=query, headers=bearer(), timeout=10)
    assert answer.status_code == 200 and answer.json()["result"][0][0]["id"] == "2", answer.text
    assert requests.get(health, headers=bearer(), timeout=10).json()["documents"] == 10


def test_serving_beyond_loopback_needs_a_token(corpus):
    for module in ("fastapi", "uvicorn", "bm25s"):  # the server reports these missing first
        pytest.importorskip(module, reason="serve-retriever needs the 'search' extra: pip install 'skyrl-gym[search]'")
    command = [sys.executable, "-m", "skyrl_gym.retrieval", "--corpus", str(corpus), "--host", "0.0.0.0"]
    refused = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"}
    )
    assert refused.returncode == 2 and TOKEN_ENV in refused.stderr, (refused.returncode, refused.stderr)


def test_a_100000_deep_body_is_a_400_naming_the_nesting(guarded):
    for raw in ('{"query": ' + "[" * 100_000 + "]" * 100_000 + "}", "[" * 100_000):
        response = requests.post(guarded.url, data=raw, headers=bearer(), timeout=30)
        assert response.status_code == 400 and "nests" in response.json()["detail"], response.text[:300]
    for raw, status in (
        ("{not json", 400),
        ('"query"', 400),
        ('{"queries": "x"}', 422),
        ('{"topk": 1e400}', 422),
        ('{"queries": ["x"], "topk": true}', 422),  # not read as 1 (pydantic's lax mode did)
        ('{"queries": ["x"], "return_scores": "yes"}', 422),
    ):
        response = requests.post(guarded.url, data=raw, headers=bearer(), timeout=30)
        assert response.status_code == status, (raw, response.status_code, response.text[:300])


def test_a_300_mib_chunked_body_is_refused_while_it_streams(guarded):
    port = int(guarded.url.split(":")[2].split("/")[0])
    before = peak_rss_mib(guarded.process.pid)
    assert (
        post_chunked(port, "/retrieve", 300 * 1024 * 1024, headers=[f"Authorization: Bearer {TOKEN}"]) == 413
    )
    grown = peak_rss_mib(guarded.process.pid) - before
    assert grown < 64, (
        f"a 300 MiB chunked body took the retriever's peak memory up {grown:.0f} MiB (limit 1 MiB)"
    )
    declared = requests.post(guarded.url, data=b"x" * (1024 * 1024 + 1), headers=bearer(), timeout=30)
    assert declared.status_code == 413 and "--max-body-bytes" in declared.json()["detail"], declared.text


def test_slow_clients_are_cut_off_and_others_still_served(corpus):
    """Slowloris: uvicorn alone kept an idle connection, a half-sent head and a half-sent body open forever
    (each holding a file descriptor); with --client-timeout 1 each is closed, the body with a 408."""
    process = RetrieverProcess(corpus, "--client-timeout", "1")
    try:
        assert_slow_clients_cut_off(int(process.url.split(":")[2].split("/")[0]), "/retrieve")
        answer = requests.post(process.url, json={"query": "who wrote Hamlet", "topk": 1}, timeout=10)
        assert answer.status_code == 200, answer.text
    finally:
        process.stop()


def test_query_text_is_bounded_so_one_request_cannot_hold_the_index(guarded):
    """The index searches one batch at a time: one 7.9 MB query held it (and every other client) for 5.7 s."""
    for body, words in (
        ({"query": "hamlet " * 1000}, "at most 4000 characters"),
        ({"queries": ["hamlet capital " * 200] * 200}, "at most 512000 characters"),
    ):
        response = requests.post(guarded.url, json=body, headers=bearer(), timeout=30)
        assert response.status_code == 400 and words in response.json()["detail"], response.text[:300]
    within = {"queries": ["who wrote Hamlet"] * 1024, "topk": 1}
    assert requests.post(guarded.url, json=within, headers=bearer(), timeout=30).status_code == 200


def test_one_request_asks_for_at_most_10000_documents(guarded):
    """1024 one-word queries at topk 100 (a 9 KB request) made a 95 MB answer, encoded on the event loop; 40 of
    them at once held an honest query 57 s."""
    amplified = {"queries": ["river"] * 1024, "topk": 100, "return_scores": True}
    response = requests.post(guarded.url, json=amplified, headers=bearer(), timeout=30)
    assert response.status_code == 400, response.text[:300]
    assert "at most 10000 documents (queries x topk), got 1024 x 100" in response.json()["detail"]
    within = {"queries": ["who wrote Hamlet"] * 100, "topk": 100, "return_scores": True}
    answer = requests.post(guarded.url, json=within, headers=bearer(), timeout=30)
    assert answer.status_code == 200 and answer.json()["result"][0][0]["document"]["id"] == "2", answer.text[:300]


def test_requests_from_web_pages_are_refused(guarded, corpus):
    """A request a browser sent (Origin, Sec-Fetch-Mode) is a 403 even with the token; a server without a token
    answers only requests addressed to a loopback name (a page re-pointed at 127.0.0.1 could read the corpus)."""
    query = {"query": "who wrote Hamlet", "topk": 1}
    for headers in ({"Origin": "http://attacker.example"}, {"Sec-Fetch-Mode": "no-cors"}):
        refused = requests.post(guarded.url, json=query, headers={**bearer(), **headers}, timeout=10)
        assert refused.status_code == 403 and "web pages" in refused.json()["detail"], refused.text[:300]
    open_server = RetrieverProcess(corpus)
    try:
        port = open_server.url.split(":")[2].split("/")[0]
        rebound = requests.post(open_server.url, json=query, headers={"Host": f"attacker.example:{port}"}, timeout=10)
        assert rebound.status_code == 403 and "127.0.0.1 or localhost" in rebound.json()["detail"], rebound.text
        for name in ("127.0.0.1", "localhost"):
            answer = requests.post(open_server.url, json=query, headers={"Host": f"{name}:{port}"}, timeout=10)
            assert answer.status_code == 200, answer.text[:300]
    finally:
        open_server.stop()


class Collector(http.server.BaseHTTPRequestHandler):
    """An attacker's "retriever": it records the Authorization header each request carried."""

    seen: list = []

    def do_POST(self):  # http.server calls it by this name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Collector.seen.append(self.headers.get("Authorization"))
        body = b'{"result": [[]]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_search_tool_sends_the_token_to_the_operators_retriever_only(guarded, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(URL_ENV, guarded.url)
    found = SearchToolGroup(search_url=guarded.url, topk=1).search("who wrote Hamlet")
    assert "Shakespeare" in found, found  # the token went to the operator's retriever, which answered
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        elsewhere = f"http://127.0.0.1:{attacker.server_address[1]}/retrieve"
        SearchToolGroup(search_url=elsewhere, topk=1).search("who wrote Hamlet")
        assert Collector.seen == [None], Collector.seen  # asked, but without the operator's token
    finally:
        attacker.shutdown()
        attacker.server_close()


def test_the_query_text_waiting_for_the_index_is_bounded():
    """4,096 requests of 512 K characters each would have waited for the index half an hour, holding every
    connection, and run after their clients left. Past the bound a request is refused at once (the server answers
    it with a 503 that the search tool retries); a request arriving at an empty queue is always taken. The index
    here is a double that holds its batch until released, so the queue can be filled on purpose."""
    import asyncio

    from skyrl_gym.retrieval.server import Busy, QueryBatcher

    release = threading.Event()

    class HeldIndex:
        def search(self, queries, k):
            release.wait(10)
            return [[(0, 1.0)] for _ in queries]

    async def scenario():
        batcher = QueryBatcher(HeldIndex(), max_queued_chars=100, max_queued=4)
        batcher.start()
        try:
            first = asyncio.ensure_future(batcher.search(["x" * 500], 1))  # over the bound, but the queue is empty
            await asyncio.sleep(0.05)  # taken into a batch: the index holds it
            waiting = asyncio.ensure_future(batcher.search(["y" * 80], 1))
            await asyncio.sleep(0.05)
            assert batcher.queued_chars == 80
            with pytest.raises(Busy, match=r"1 queries \(80 characters\) waiting"):
                await batcher.search(["z" * 30], 1)
            # short queries cost a pass over the index each: their count is bounded too (empty ones counted 0)
            with pytest.raises(Busy, match="waiting, its bound"):
                await batcher.search([""] * 4, 1)
            release.set()
            assert len(await first) == 1 and len(await waiting) == 1
            assert batcher.queued_chars == 0
            return await batcher.search(["z" * 30], 1)  # room again
        finally:
            release.set()
            await batcher.stop()

    assert asyncio.run(scenario()) == [[(0, 1.0)]]


def test_a_body_is_parsed_off_the_event_loop(monkeypatch):
    """The retriever parsed a body on its event loop: a body of millions of small values held every client for
    seconds. Here the parse of one body waits until a health check has been answered, which only a parse off the
    event loop lets happen."""
    pytest.importorskip("bm25s", reason="the retriever needs the 'search' extra: pip install 'skyrl-gym[search]'")
    from skygym_sandboxes import http_bodies
    from skyrl_gym.retrieval.index import BM25Retriever
    from skyrl_gym.retrieval.server import create_app
    from tests.sandboxes.remote_support import HeldParse, serve_in_thread

    held = HeldParse(monkeypatch, http_bodies, "parse_json_object")
    documents = [{"id": "0", "contents": "the capital of France is Paris"}, {"id": "1", "contents": "bees make honey"}]
    url, stop = serve_in_thread(create_app(BM25Retriever.build(documents), documents))
    try:
        # over BodyParsers.INLINE_BYTES: a small body is parsed on the loop at once (a millisecond at most)
        queries = ["capital of France"] * (http_bodies.BodyParsers.INLINE_BYTES // 16)
        answer = held.post_beside_a_health_check(url, "/retrieve", {"queries": queries, "topk": 1})
        assert answer.status_code == 200 and "Paris" in answer.text, answer.text[:300]
    finally:
        stop()
