"""The planted tests, without Docker: what is appended, that it fails, and how a run's report is read.

The Docker tests (test_swe_docker.py) plant them in real grading runs and show the forgeries they catch."""

import sys
import types

import pytest

from skyrl_gym.envs.swe import canary
from skyrl_gym.envs.swe import runtime

TEST_FILE = '''import pytest
from lib import double


def test_double():
    assert double(2) == 4


@pytest.mark.parametrize("n", [1, 2])
def test_double_many(n):
    assert double(n) == 2 * n


class TestDouble:
    def test_zero(self):
        assert double(0) == 0


def test_skipped_elsewhere():
    pytest.skip("not here")
'''


def test_planted_tests_fail_and_the_twin_calls_a_hidden_test_first(monkeypatch):
    hidden = ["test_double", "test_double_many", "test_zero", "test_skipped_elsewhere"]
    planted = canary.plan("tests/test_lib.py", TEST_FILE, hidden)
    assert len(planted) == 2
    plain, twin = planted
    # Named after a hidden test, with a suffix drawn for this run, and new to the file.
    assert all(item.name.startswith("test_") and item.name not in TEST_FILE for item in planted)
    assert twin.name.startswith("test_double_") and not twin.name.startswith("test_double_many")
    assert twin.nodeid == f"tests/test_lib.py::{twin.name}"

    calls = []
    lib = types.ModuleType("lib")
    lib.double = lambda n: calls.append(n) or 2 * n
    monkeypatch.setitem(sys.modules, "lib", lib)
    namespace = {"__name__": "tests.test_lib"}
    exec(compile(canary.appended(TEST_FILE, planted), "tests/test_lib.py", "exec"), namespace)
    for item in planted:
        with pytest.raises(AssertionError):
            namespace[item.name]()
    assert calls == [2], "the twin runs its hidden test (double(2)) before it fails"
    namespace["test_double"]()  # the file's own tests are as they were


def test_twins_ask_for_the_fixtures_of_the_test_they_call_and_call_methods_on_a_fresh_instance(monkeypatch):
    text = (
        "def test_uses(tmp_path, capsys, flag=True):\n    assert tmp_path.exists()\n\n"
        "class TestPlain:\n    def test_method(self, tmp_path):\n        assert tmp_path\n\n"
        "class TestWithInit:\n    def __init__(self):\n        pass\n\n    def test_x(self):\n        pass\n"
    )
    uses = canary.plan("t.py", text, ["test_uses"])[1]
    call = "test_uses(tmp_path=tmp_path, capsys=capsys)"
    assert uses.source.startswith(f"def {uses.name}(tmp_path, capsys):\n    {call}")
    method = canary.plan("t.py", text, ["TestPlain::test_method"])[1]
    assert f"def {method.name}(tmp_path):\n    TestPlain().test_method(tmp_path=tmp_path)" in method.source
    assert method.name.startswith("test_method_")
    assert len(canary.plan("t.py", text, ["TestWithInit::test_x"])) == 1  # no plain instance to call it on
    # the twin runs the method, then fails
    namespace: dict = {}
    exec(compile(canary.appended(text, [method]), "t.py", "exec"), namespace)
    with pytest.raises(AssertionError):
        namespace[method.name](tmp_path="somewhere")
    with pytest.raises(AssertionError):  # the method's own assert fails first with an empty path
        namespace[method.name](tmp_path="")


def test_only_tests_without_marks_have_twins():
    # parametrized, in a class with no plain instance, or skipping itself: none can be called as it is
    unfit = ["test_double_many", "TestDouble::test_zero_missing", "test_skipped_elsewhere"]
    planted = canary.plan("tests/test_lib.py", TEST_FILE, unfit)
    assert len(planted) == 1 and "()\n    assert" not in planted[0].source
    assert len(canary.plan("tests/test_lib.py", TEST_FILE, ["TestDouble::test_zero"])) == 2
    # a file that does not parse still gets the plain one
    assert len(canary.plan("tests/test_x.py", "def broken(:\n", ["test_a"])) == 1
    # no hidden test in the file: a name of its own
    assert canary.plan("tests/test_x.py", "", [])[0].name.startswith("test_regression_")


def test_names_never_collide_with_the_file():
    planted = canary.plan("t.py", TEST_FILE, ["test_double"])
    names = [item.name for item in planted]
    assert len(set(names)) == len(names)


def _report(outcomes: dict) -> runtime.TestRun:
    return runtime.TestRun(outcomes={nodeid: runtime.TestOutcome(nodeid, outcome)
                                     for nodeid, outcome in outcomes.items()})


def test_a_run_that_passes_a_planted_test_or_drops_it_was_forged():
    planted = canary.plan("tests/test_lib.py", TEST_FILE, ["test_double"])
    hidden = {"tests/test_lib.py::test_double": "passed"}
    failing = {item.nodeid: "failed" for item in planted}
    assert canary.forged(_report({**hidden, **failing}), planted) is None
    for outcome in ("passed", "xfailed", "xpassed"):
        why = canary.forged(_report({**hidden, **failing, planted[1].nodeid: outcome}), planted)
        assert why and f"reported {outcome}" in why
    # skipped or an error is not a pass: the verdict already counts it as failed
    assert canary.forged(_report({**hidden, **failing, planted[0].nodeid: "skipped"}), planted) is None
    # parametrized by a conftest's pytest_generate_tests: its cases count
    parametrized = {f"{planted[0].nodeid}[1]": "failed", f"{planted[0].nodeid}[2]": "passed"}
    run = _report({**hidden, **parametrized, planted[1].nodeid: "failed"})
    assert "reported passed" in canary.forged(run, planted)
    # missing although the file was collected; missing with the whole file (a collection error) is not forgery
    assert "not reported" in canary.forged(_report({**hidden, planted[0].nodeid: "failed"}), planted)
    assert canary.forged(_report({"tests/test_lib.py": "error"}), planted) is None
