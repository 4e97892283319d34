"""The builder's pieces that need no Docker engine: hiding test functions, the issue text and its leak check,
the issue writer against a real HTTP server, the mechanical solver, operator balance and the dataset card.

The same pieces run end to end in test_swe_docker.py and test_swe_no_answer_in_container.py (a real build).
"""

from __future__ import annotations

import ast

import pytest

from skyrl_gym.envs.swe.instances import SWEInstance
from skyrl_gym.envs.swe.synth.builder import (
    Candidate,
    ProjectSummary,
    dataset_card,
    difficulty,
    failing_statement,
    mechanical_solver,
)
from skyrl_gym.envs.swe.synth.hiding import HideError, hide_tests
from skyrl_gym.envs.swe.synth.issue import Failure, Forbidden, IssueWriter, failure_kind, symptom, write_issue
from skyrl_gym.envs.swe.synth.mutations import KINDS, balanced_mutations, find_mutations
from tests.adapters.agents.chat_server import chat_server

TESTS = b'''\
import pytest


def helper():
    return 1


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n


def test_kept():
    assert helper() == 1


class TestBox:
    def test_only(self):
        assert True


class TestPair:
    """Two tests."""

    def test_gone(self):
        assert True

    def test_stays(self):
        assert True
'''


# ----- hiding test functions ----------------------------------------------------------------------------
def test_only_the_named_test_functions_leave_their_file():
    hidden = hide_tests(
        TESTS, ["t.py::test_param[2]", "t.py::TestBox::test_only", "t.py::TestPair::test_gone"]
    )
    text = hidden.decode()
    ast.parse(hidden)
    assert "def test_param" not in text and "parametrize" not in text  # decorators go with the function
    assert "def test_only" not in text and "def test_gone" not in text
    assert "def test_kept" in text and "def test_stays" in text and "def helper" in text
    assert "class TestBox:\n    pass\n" in text  # an emptied class still parses
    with pytest.raises(HideError, match="not a function defined in its file"):
        hide_tests(TESTS, ["t.py::test_generated"])
    with pytest.raises(HideError, match="names a file"):
        hide_tests(TESTS, ["t.py"])


def test_the_failing_statement_is_read_from_the_tests_own_code():
    files = {"t.py": TESTS}
    assert failing_statement(files, "t.py::test_kept", ["/testbed/t.py", 14]) == "assert helper() == 1"
    assert failing_statement(files, "t.py::test_kept", ["/testbed/lib.py", 14]) == ""  # raised in the library
    assert failing_statement(files, "t.py::test_kept", None) == ""


# ----- issue text -----------------------------------------------------------------------------------------
# pytest's own messages, as the report plugin recorded them in a build
VALUE_WITH_CALL = "assert True is False\n +  where True = isdistinct(<list_iterator object at 0x7f00>)"
VALUE_REVERSED = "AssertionError: assert 'Employee' == 'Employee id'\n  - Employee id\n  + Employee"
NOT_RAISED = "Failed: DID NOT RAISE <class 'AttributeError'>"
CRASH = "TypeError: 'function' object is not iterable"


def test_symptoms_say_what_was_called_what_came_back_and_what_was_expected():
    first = symptom(Failure(VALUE_WITH_CALL, "assert isdistinct(iter([1, 2, 1])) is False"))
    assert (first.call, first.got, first.expected) == ("isdistinct(iter([1, 2, 1]))", "True", "False")
    # the computed side is the one with the call, whichever side of == the test wrote it on
    second = symptom(Failure(VALUE_REVERSED, "assert human == inflection.humanize('employee_id')"))
    assert (second.call, second.got, second.expected) == (
        "inflection.humanize('employee_id')",
        "'Employee id'",
        "'Employee'",
    )
    # no side calls anything: nothing tells what was called, so the check is shown as it failed
    bare = symptom(Failure("AssertionError: assert Exception() is Exception('blah')", "assert value2 is e"))
    assert bare.call == "" and bare.statement == "assert value2 is e" and "Exception('blah')" in bare.shown
    assert (
        symptom(Failure(NOT_RAISED, "pytest.raises(AttributeError, remove_move, 'eggs')")).kind
        == "no_exception"
    )
    assert symptom(Failure(CRASH)).kind == "exception"
    assert symptom(Failure("assert False")) is None
    assert [failure_kind(m) for m in (VALUE_WITH_CALL, VALUE_REVERSED, NOT_RAISED, CRASH)] == [
        "value"
    ] * 3 + ["TypeError"]


def _forbidden(**changes) -> Forbidden:
    settings = dict(
        fail_to_pass=["toolz/tests/test_itertoolz.py::test_isdistinct"],
        test_paths=["toolz/tests/test_itertoolz.py"],
        gold_patch="-        seen.add(item)\n+        seen.add(item)\n+        count += 1",
        functions=["_count_seen"],
        shown=[VALUE_WITH_CALL],
    )
    settings.update(changes)
    return Forbidden.of(**settings)


def test_the_template_issue_is_the_symptom_and_holds_nothing_forbidden():
    forbidden = _forbidden()
    failures = [
        Failure(VALUE_WITH_CALL, "assert isdistinct(iter([1, 2, 1])) is False"),
        Failure(
            VALUE_WITH_CALL + "\n +    where <list_iterator object> = iter([1, 2, 1])",
            "assert isdistinct(iter([1, 2, 1])) is False",
        ),
        Failure(CRASH),
    ]
    text, info = write_issue("toolz", "1.2.0", failures, forbidden)
    assert info == {"source": "template", "symptoms": 2}  # the same call and values twice is one symptom
    assert text.count(">>> isdistinct(iter([1, 2, 1]))\nTrue\n```\nExpected `False`.") == 1
    assert "TypeError: 'function' object is not iterable" in text
    assert forbidden.hits(text) == []
    # a symptom that shows a hidden test's name is left out, not printed
    leaky = Failure("assert 1 == 2\n +  where 1 = test_isdistinct.<locals>.f()", "assert f() == 2")
    text, info = write_issue("toolz", "1.2.0", [leaky], forbidden)
    assert "test_isdistinct" not in text and info["symptoms"] == 0


def test_a_changed_function_may_be_named_only_where_the_failures_show_it():
    assert "_count_seen" in _forbidden().words  # only the patch shows it
    assert "_count_seen" not in _forbidden(shown=["where 3 = _count_seen([1, 1])"]).words
    forbidden = _forbidden()
    assert forbidden.hits("the bug is in _count_seen") == ["_count_seen"]
    assert forbidden.hits("see toolz/tests/test_itertoolz.py") == ["toolz/tests/test_itertoolz.py"]
    assert forbidden.hits("add `count += 1` after it") == ["count += 1"]
    assert forbidden.hits("isdistinct(iter([1, 2, 1])) returns True") == []
    # a hidden test's name, in a dotted call or a <locals> path (two of 200 built issues showed one so)
    assert forbidden.hits("self.tests.test_isdistinct(seq=[1])") == ["test_isdistinct"]
    assert forbidden.hits("TypeError: <function Tests.test_isdistinct.<locals>.f>") == ["test_isdistinct"]


def test_a_project_named_as_its_changed_function_gets_an_issue_and_a_leak_drops_only_that_bug():
    """wcwidth's bug in `wcwidth()` crashed a 200-instance build: the template names the project, which the leak
    guard took for the hidden function. The project's own name is no secret; a real leak is the bug's drop."""
    from skyrl_gym.envs.swe.synth.issue import IssueLeak

    forbidden = _forbidden(functions=["wcwidth"], fail_to_pass=["tests/test_core.py::test_combining"],
                           test_paths=["tests/test_core.py"], gold_patch="", shown=["assert 1 == 2"])
    assert "wcwidth" in forbidden.words
    text, info = write_issue("wcwidth", "0.2.13", [Failure(CRASH)], forbidden)
    assert text.startswith("TypeError from `wcwidth` 0.2.13") and info["symptoms"] == 1
    assert forbidden.allowing("wcwidth").hits(text) == []
    with pytest.raises(IssueLeak):  # the template's own words name a hidden function: refused, never written
        write_issue("toolz", "1.2.0", [Failure("assert False")], _forbidden(functions=["release"], shown=[]))


@pytest.mark.parametrize(
    "answer, source",
    [
        (
            "isdistinct says an iterator with a repeat is distinct\n\n```python\n>>> isdistinct(iter([1, 2, 1]))\nTrue\n```",
            "model",
        ),
        ("The fix: put back `count += 1` in _count_seen (see test_isdistinct).", "template"),
    ],
)
def test_the_issue_writer_is_used_unless_its_text_leaks(answer, source):
    with chat_server(lambda body: answer) as server:  # a real model server's HTTP, scripted reply
        writer = IssueWriter(server.url + "/v1", "any-model")
        try:
            text, info = write_issue(
                "toolz",
                "1.2.0",
                [Failure(VALUE_WITH_CALL, "assert isdistinct(iter([1, 2, 1])) is False")],
                _forbidden(),
                writer,
            )
        finally:
            writer.close()
    assert info["source"] == source
    prompt = server.requests[0]["messages"][0]["content"]
    assert server.requests[0]["model"] == "any-model" and "isdistinct(iter([1, 2, 1]))" in prompt
    assert (
        "test_isdistinct" not in prompt and "count += 1" not in prompt
    )  # the model is never shown the answer
    if source == "model":
        assert text.startswith("isdistinct says")
    else:
        assert "_count_seen" not in text and "held" in info["writer_rejected"]


def test_an_unreachable_issue_writer_leaves_the_template():
    writer = IssueWriter("http://127.0.0.1:9", "any-model", timeout_s=2, attempts=1)
    text, info = write_issue("toolz", "1.2.0", [Failure(CRASH)], _forbidden(), writer)
    assert info["source"] == "template" and "writer_error" in info and "TypeError" in text


# ----- bugs: solver, balance, card ------------------------------------------------------------------------
LIBRARY = b"""\
def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value
"""


def test_the_mechanical_solver_undoes_a_bug_in_a_function_the_issue_names():
    flip = next(m for m in find_mutations("lib.py", LIBRARY) if m.kind == "flip_compare")
    buggy = flip.apply(LIBRARY)
    tries = mechanical_solver({"lib.py": LIBRARY}, "lib.py", buggy, LIBRARY, "clamp(5, 0, 5) returns 5")
    assert tries is not None and 1 <= tries <= 20
    assert mechanical_solver({"lib.py": LIBRARY}, "lib.py", buggy, LIBRARY, "wrong", tries=0) is None
    # an integer moved by one is undone by moving it back (the operator's inverse), not only by the operator
    source = b"def nth(items):\n    a = 1\n    b = 2\n    return items[3]\n"
    off = next(
        m
        for m in find_mutations("n.py", source)
        if m.kind == "off_by_one" and b"[" in source[m.start - 1 : m.start]
    )
    assert mechanical_solver({"n.py": source}, "n.py", off.apply(source), source, "nth") is not None


def test_operators_are_tried_least_kept_first():
    mutations = find_mutations("lib.py", LIBRARY)
    kinds = {m.kind for m in mutations}
    kept = {kind: 5 for kind in kinds}
    kept["negate_if"] = 0
    assert next(balanced_mutations(mutations, 0, kept)).kind == "negate_if"
    order = [m.kind for m in balanced_mutations(mutations, 0, {}, per_function=100)]
    assert set(order[: len(kinds)]) == kinds  # every operator once before any twice
    assert set(KINDS) >= kinds


def _instance(number: int, kind: str, failure: str, bugs: int = 1) -> SWEInstance:
    return SWEInstance(
        instance_id=f"{'toolz' if number % 2 else 'six'}__synth-{number}",
        repo="r",
        base_commit="0" * 40,
        problem_statement="p",
        patch="",
        test_patch="",
        FAIL_TO_PASS=["t.py::t"],
        PASS_TO_PASS=["t.py::u"] * 60,
        extra={
            "mutation": {"kind": kind, "bugs": bugs},
            "difficulty": difficulty("-a\n+b\n", ["f"], failure, None, "issue"),
            "issue": {"source": "template"},
        },
    )


def test_a_project_keeps_enough_single_bugs_for_its_share_of_combined_tasks():
    """A 200-instance build gave 13% combined tasks for a 20% share: each project kept one single bug more than
    its quota per planned combination, so after a three-bug task it was one single short of the second."""
    from skyrl_gym.envs.swe.synth.builder import COMBINED_SHARE, _singles_needed, _Work
    from skyrl_gym.envs.swe.synth.mutations import Mutation

    quota = 8  # a project's share of a 200-instance build over 25 projects
    needed = _singles_needed(quota, COMBINED_SHARE)
    assert needed == 11  # two combined tasks (three bugs, then two) and six single ones
    # combine() alone, on that many singles of one module: finish() stands for the container's checks
    work = _Work.__new__(_Work)
    work.finish = lambda mutations, scope: (None, "+".join(m.function for m in mutations))
    work.drop = lambda why: None
    work.baseline_passing = []
    singles = [
        (Candidate([Mutation("pkg/mod.py", f"f{i}", (1, 1), 1, "flip_compare", 0, 1, b"x", "")], {},
                   [f"tests/test_mod.py::test_f{i}"], {}, "value"), f"single f{i}")
        for i in range(needed)
    ]
    made = work.combine(singles, quota, COMBINED_SHARE)
    assert len(made) == quota
    combined = [item for item in made if "+" in item]
    assert len(combined) == round(quota * COMBINED_SHARE) == 2
    assert sorted(item.count("+") + 1 for item in combined) == [2, 3]


def test_the_dataset_card_counts_operators_failure_kinds_and_drops():
    instances = [
        _instance(1, "flip_compare", "value"),
        _instance(2, "negate_if", "value"),
        _instance(3, "remove_loop", "TypeError"),
        _instance(4, "flip_compare+negate_if", "value", bugs=2),
    ]
    summary = ProjectSummary("toolz", tried=10, solver_undid=2, seconds=300.0)
    summary.discarded.update({"no test failed": 4, "the mechanical solver undoes it within 20 tries": 2})
    card = dataset_card(instances, [summary, ProjectSummary("ghost", error="could not download\nmore")], 61.0)
    assert card["instances"] == 4 and card["build_seconds"] == 61.0 and card["project_seconds"] == 300.0
    assert "built in 1.0 min by the last run" in card["markdown"] and "took 5.0 min in all" in card["markdown"]
    assert card["operators"]["flip_compare"] == {"instances": 2, "percent": 50.0}
    assert card["wrong_value_percent"] == 75.0 and card["combined_percent"] == 25.0
    assert card["mechanical_solver"]["percent_of_tried"] == 20.0
    assert (
        card["dropped"]["no test failed"] == 4
        and "project ghost failed: could not download" in card["dropped"]
    )
    assert card["projects"] == {"six": 2, "toolz": 2}
    assert "| flip_compare | 2 | 50.0% |" in card["markdown"] and "| no test failed | 4 |" in card["markdown"]
