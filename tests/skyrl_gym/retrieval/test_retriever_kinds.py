"""Retriever kinds: BM25 built in, others registered in-process or through the skyrl_gym.retrievers entry points."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import pytest

from skyrl_gym.retrieval import kinds
from skyrl_gym.retrieval.build import load_retriever
from tests.tool_env_support import write_corpus


class _FirstWordIndex:
    """Ranks documents by how many query words they contain (a real, tiny index for the test)."""

    def __init__(self, documents: Sequence[Dict[str, Any]]) -> None:
        self.words = [set(d["contents"].lower().split()) for d in documents]

    def __len__(self) -> int:
        return len(self.words)

    def search(self, queries: Sequence[str], k: int) -> List[List[tuple]]:
        results = []
        for query in queries:
            scores = [(len(set(query.lower().split()) & words), i) for i, words in enumerate(self.words)]
            results.append([(i, float(s)) for s, i in sorted(scores, key=lambda t: (-t[0], t[1])) if s > 0][:k])
        return results

    def save(self, index_dir: str, fingerprint: str) -> None:
        pass


class _OverlapKind:
    name = "overlap-test"
    help = "word overlap (test only)"

    def add_arguments(self, group: Any) -> None:
        group.add_argument("--overlap-flag", default="x")

    def missing(self) -> List[str]:
        return []

    def factory(self, options: Dict[str, Any]) -> Any:
        class Factory:
            label = f"overlap ({options.get('overlap_flag')})"

            def build(self, documents):
                return _FirstWordIndex(documents)

            def load(self, index_dir: str, fingerprint: str) -> Optional[Any]:
                return None

        return Factory()


def test_bm25_is_built_in():
    pytest.importorskip("bm25s", reason="BM25 needs the 'search' extra: pip install 'skyrl-gym[search]'")
    assert "bm25" in kinds.retriever_kinds()


def test_unknown_kind_names_the_available_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown retriever 'nope'.*available: .*bm25"):
        load_retriever(str(write_corpus(tmp_path / "c.jsonl")), kind="nope")


def test_a_registered_kind_builds_the_index_and_adds_its_options(tmp_path):
    kind = _OverlapKind()
    kinds.register_retriever_kind(kind)
    try:
        with pytest.raises(ValueError, match="already registered"):
            kinds.register_retriever_kind(kind)
        logs: List[str] = []
        retriever, documents = load_retriever(str(write_corpus(tmp_path / "c.jsonl")), kind="overlap-test",
                                              options={"overlap_flag": "y"}, log=logs.append)
        hit = retriever.search(["capital of Portugal Tagus"], 1)[0][0]
        assert "Portugal" in documents[hit[0]]["contents"]
        assert logs and "overlap (y)" in logs[0]

        from skyrl_gym.cli import build_parser

        args = build_parser().parse_args(["serve-retriever", "--corpus", "c.jsonl", "--retriever", "overlap-test",
                                          "--overlap-flag", "z"])
        assert (args.retriever, args.overlap_flag) == ("overlap-test", "z")
    finally:
        kinds._registered.pop("overlap-test", None)


def test_a_kind_without_the_protocol_is_refused():
    class Half:
        name = "half"

    with pytest.raises(ValueError, match="no add_arguments"):
        kinds.register_retriever_kind(Half())


class _NeedsTwoModulesKind(_OverlapKind):
    name = "needs-two-test"

    def missing(self) -> List[str]:
        hint = "pip install 'skyrl-gym[search]'"
        return kinds.missing_modules({"skygym_absent_one": hint, "skygym_absent_two": hint,
                                      "skygym_absent_three": "pip install other"})


def test_a_missing_extra_is_one_line_naming_each_command_once_and_exits_2(tmp_path, capsys):
    """As every command whose extra is missing (docs/cli.md): exit 2, one line, each install command once."""
    from skyrl_gym.cli import main

    kinds.register_retriever_kind(_NeedsTwoModulesKind())
    try:
        code = main(["serve-retriever", "--corpus", str(write_corpus(tmp_path / "c.jsonl")),
                     "--retriever", "needs-two-test"])
    finally:
        kinds._registered.pop("needs-two-test", None)
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[-1].startswith("error: serve-retriever --retriever needs-two-test needs: ")
    assert "skygym_absent_one, skygym_absent_two (pip install 'skyrl-gym[search]')" in err
    assert "skygym_absent_three (pip install other)" in err
    assert err.count("pip install 'skyrl-gym[search]'") == 1, err


def test_join_missing_keeps_messages_of_other_shapes():
    assert kinds.join_missing(["a (pip install x)", "a GPU is needed", "b (pip install x)"]) == (
        "a, b (pip install x); a GPU is needed")
