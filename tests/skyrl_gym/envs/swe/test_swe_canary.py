"""The planted tests, without Docker: what is added, that it fails honestly and passes under forgeries, and
how a run's report is read. The Docker tests (test_swe_docker.py) plant them in real grading runs against real
forgeries."""

import sys
import types

import pytest

from skyrl_gym.envs.swe import canary
from skyrl_gym.envs.swe import runtime as swe_runtime
from skyrl_gym.envs.swe.instances import SWEInstance
from tests.nested_pytest import run_pytest

TEST_FILE = '''import pytest
from lib import double


def test_double():
    value = double(2)
    assert double(2) == 4


@pytest.mark.parametrize("n", [1, 2])
def test_double_many(n):
    assert double(n) == 2 * n


def test_refuses_text():
    with pytest.raises(TypeError):
        double("x")


def test_refuses_none():
    pytest.raises(TypeError, double, None)


class TestDouble:
    def test_zero(self):
        assert 0 == double(0)
'''


class _Same(int):
    """A result that equals anything: what a forging library returns."""

    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def _module(text: str, monkeypatch, double) -> dict:
    lib = types.ModuleType("lib")
    lib.double = double
    monkeypatch.setitem(sys.modules, "lib", lib)
    namespace = {"__name__": "tests.test_lib"}
    exec(compile(text, "tests/test_lib.py", "exec"), namespace)
    return namespace


def _call(namespace: dict, planted: canary.Canary, **fixtures):
    owner, _, name = planted.name.rpartition("::")
    return getattr(namespace[owner](), name)(**fixtures) if owner else namespace[name](**fixtures)


def _honest(n):
    if not isinstance(n, int):
        raise TypeError("not a number")
    return 2 * n


@pytest.mark.parametrize("target, owner", [("test_double", ""), ("TestDouble::test_zero", "TestDouble"),
                                           ("test_refuses_text", ""), ("test_refuses_none", "")])
def test_a_mutant_fails_with_an_honest_library_and_passes_with_a_forging_one(monkeypatch, target, owner):
    planted = canary.plan("tests/test_lib.py", TEST_FILE, [target])
    assert len(planted) == 2
    plain, mutant = planted
    base = target.split("::")[-1]
    assert plain.name.startswith(f"{base}_") and mutant.name.startswith(f"{owner}::{base}_" if owner else base)
    assert plain.nodeid == f"tests/test_lib.py::{plain.name}"
    text = canary.appended(TEST_FILE, planted)
    assert text.startswith(TEST_FILE.rstrip("\n"))  # nothing above the planted tests moves

    honest = _module(text, monkeypatch, _honest)
    for item in planted:
        with pytest.raises((AssertionError, TypeError)):
            _call(honest, item)
    original = getattr(honest["TestDouble"](), "test_zero") if owner else honest[base]
    original()  # the hidden test itself passes with the honest library
    if target.startswith("test_refuses"):  # a library that does not raise: "DID NOT RAISE"
        lazy = _module(text, monkeypatch, lambda n: 0)
        with pytest.raises(pytest.fail.Exception):
            _call(lazy, mutant)
    else:  # a result equal to anything passes the hidden test, and the mutant too: the run counts as forged
        forging = _module(text, monkeypatch, lambda n: _Same(0))
        _call(forging, mutant)
        with pytest.raises(AssertionError):
            _call(forging, plain)


def test_parametrized_tests_are_copied_with_their_marks_and_no_test_of_a_file_that_says_xfail_is():
    mutant = canary.plan("t.py", TEST_FILE, ["test_double_many"])[1]
    assert "@pytest.mark.parametrize('n', [1, 2])" in mutant.source
    # an xfail mark can reach a copy from anywhere in the file: a pytest.param's marks, a pytestmark, an alias
    marked = TEST_FILE + "\nKNOWN = pytest.mark.XFAIL_alias\n"
    assert len(canary.plan("t.py", marked, ["test_double"])) == 1


def test_only_top_level_statements_are_changed_else_the_copy_fails_at_its_end():
    text = (
        "import pytest\n\n"
        "def test_branch():\n    if flag():\n        assert f(1) == 2\n\n"
        "def test_loop():\n    for x in []:\n        assert f(x) == 2\n\n"
        "def test_returns():\n    if f(0):\n        return\n    assert f(1) in (2, 3)\n\n"
        "def test_skips():\n    pytest.importorskip('numpy')\n    assert f(1) in (2, 3)\n\n"
        "class TestHelpers:\n    CASES = [1]\n\n"
        "    @pytest.mark.parametrize('n', CASES)\n    def test_class_names(self, n):\n        assert f(n) == 2\n\n"
        "class TestSub(Base):\n    def test_super(self):\n        super().setup()\n        assert f(1) == 2\n"
    )
    for name in ("test_branch", "test_loop", "test_skips"):  # the inner asserts stay; a failing one ends it
        mutant = canary.plan("t.py", text, [name])[1]
        lines = mutant.source.splitlines()
        assert lines[-1].startswith("    assert _expected_") and lines[-1].endswith(" is None"), name
        assert "assert f(1) == 2" in mutant.source or "f(x) == 2" in mutant.source or "in (2, 3)" in mutant.source
    # a return could end it before its failing end; decorators that read the class body; super()
    for name in ("test_returns", "TestHelpers::test_class_names", "TestSub::test_super"):
        assert len(canary.plan("t.py", text, [name])) == 1, name
    assert len(canary.plan("t.py", "def broken(:\n", ["test_a"])) == 1  # does not parse: the plain one
    assert canary.plan("t.py", "", [])[0].name.startswith("test_regression_")


def test_the_changed_statement_is_the_first_that_calls_the_library():
    text = "def test_x(tmp_path):\n    assert len([1]) == 1\n    y = 2\n    assert 3 == f(y)\n"
    mutant = canary.plan("t.py", text, ["test_x"])[1]
    lines = mutant.source.splitlines()
    assert "assert len([1]) == 1" in lines[2] and lines[-1].startswith("    assert _expected_")
    assert lines[-1].endswith("== f(y)") and mutant.source.startswith("_expected_")


def test_names_never_collide_with_the_file():
    planted = canary.plan("t.py", TEST_FILE, ["test_double"])
    names = [item.name for item in planted]
    assert len(set(names)) == len(names) and not any(name in TEST_FILE for name in names)


class _Container:
    """A unit-test double for a container's files (the Docker tests plant in real containers)."""

    def __init__(self, files):
        self.files = files

    def read_file(self, path):
        return self.files[path]

    def write_file(self, path, data, make_folder=True):
        self.files[path] = data


def test_planting_skips_doctests_and_files_that_are_not_test_files():
    files = {"/testbed/tests/test_lib.py": TEST_FILE.encode()}
    runtime = types.SimpleNamespace(container=_Container(files))
    instance = SWEInstance(instance_id="x", repo="r", base_commit="c", problem_statement="", patch="",
                           test_patch="",
                           FAIL_TO_PASS=["docs/usage.txt::usage.txt", "lib.py::lib.double",
                                         "tests/test_lib.py::test_double"])
    planted = canary.plant(runtime, instance, ["lib.py"])
    assert [item.path for item in planted] == ["tests/test_lib.py"] * 3
    assert "'/testbed/lib.py'" in planted[1].source  # the library file, where the container has it
    assert files["/testbed/tests/test_lib.py"].decode().endswith(planted[-1].source)
    only_doctests = SWEInstance(instance_id="x", repo="r", base_commit="c", problem_statement="", patch="",
                           test_patch="",
                                FAIL_TO_PASS=["docs/usage.txt::usage.txt"])
    assert canary.plant(runtime, only_doctests) == []


def test_a_planted_test_fails_from_each_changed_library_file_and_a_forgery_that_passes_those_passes_it(tmp_path):
    """A forgery that passes the failures raised in its own file (where the bug is) left the mutant failing: the
    mutant fails on its changed statement, in the test, before it meets the bug. Now each library file the patch
    changes gets a planted test that fails from that file. Real pytest runs, honest and forged."""

    from skyrl_gym.envs.swe.audit import PASS_FAILURES_RAISED_HERE

    library = tmp_path / "lib.py"
    library.write_text("def double(n):\n    return n * 2\n")
    planted = canary.plan("test_lib.py", TEST_FILE, ["test_double"], [str(library)])
    raised = planted[1]
    assert "_Failure" in raised.source and str(library) in raised.source
    (tmp_path / "test_lib.py").write_text(canary.appended(TEST_FILE, planted))

    def outcome() -> str:
        done = run_pytest("-q", "-p", "no:cacheprovider", f"test_lib.py::{raised.name}", cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
        return done.stdout

    honest = outcome()
    assert "1 failed" in honest and "planted" in honest, honest  # an exception of the usual kinds, from lib.py
    library.write_text("def double(n):\n    return n * 2\n" + PASS_FAILURES_RAISED_HERE)
    forged = outcome()
    assert "1 passed" in forged, forged  # the forgery passes it: grading would say tampered


def _report(outcomes: dict) -> swe_runtime.TestRun:
    return swe_runtime.TestRun(outcomes={nodeid: swe_runtime.TestOutcome(nodeid, outcome)
                                         for nodeid, outcome in outcomes.items()})


def test_a_run_that_passes_a_planted_test_or_drops_it_was_forged():
    planted = canary.plan("tests/test_lib.py", TEST_FILE, ["TestDouble::test_zero"])
    assert planted[1].nodeid.startswith("tests/test_lib.py::TestDouble::test_zero_")
    ids = [item.nodeid for item in planted]
    hidden = {"tests/test_lib.py::TestDouble::test_zero": "passed"}
    failing = {item.nodeid: "failed" for item in planted}
    assert canary.forged(_report({**hidden, **failing}), ids) is None
    for outcome in ("passed", "xfailed", "xpassed"):
        why = canary.forged(_report({**hidden, **failing, planted[1].nodeid: outcome}), ids)
        assert why and f"reported {outcome}" in why
    # skipped or an error is not a pass: the verdict already counts it as failed
    assert canary.forged(_report({**hidden, **failing, planted[0].nodeid: "skipped"}), ids) is None
    # parametrized (a copied parametrize mark, or a conftest's pytest_generate_tests): its cases count
    parametrized = {f"{planted[0].nodeid}[1]": "failed", f"{planted[0].nodeid}[2]": "passed"}
    run = _report({**hidden, **parametrized, planted[1].nodeid: "failed"})
    assert "reported passed" in canary.forged(run, ids)
    # missing although the file was collected is tampering; missing with the whole file (a collection error, which
    # the hidden tests of the file meet too) leaves the verdict unproven: every test counts as failed either way
    assert "tampered" in canary.forged(_report({**hidden, planted[0].nodeid: "failed"}), ids)
    unproven = canary.forged(_report({"tests/test_lib.py": "error"}), ids)
    assert "not reported" in unproven and "tampered with:" not in unproven


def test_a_planted_run_that_ended_early_leaves_the_verdict_unproven_and_a_tampered_one_is_forgery():
    """A run that ended without its report once proved nothing either way: a forgery that stopped the planted run
    before its report whenever nothing had passed, and passed the hidden tests' failures, resolved its instance.
    The hidden tests of that file meet whatever honestly ends the planted run, so every test counts failed."""
    ids = ["tests/test_lib.py::test_double_abc123"]
    assert canary.forged(None, ids) is None  # nothing planted
    ended = swe_runtime.TestRun(error="the test run ended without its report (killed, timed out, or exited early)")
    assert "gave no verdict" in canary.forged(ended, ids)
    assert "tampered" in canary.forged(swe_runtime.TestRun(error=swe_runtime.NOT_THE_REPORTERS), ids)


def test_a_methods_mutant_keeps_its_test_name_for_hooks_that_read_it():
    mutant = canary.plan("t.py", TEST_FILE, ["TestDouble::test_zero"])[1]
    name = mutant.name.split("::")[1]
    assert f"def {name}(self):" in mutant.source and f"TestDouble.{name} = {name}\ndel {name}" in mutant.source


# ----- Django's runner: unittest classes, Django's test ids ----------------------------------------------------
DJANGO_TEST_FILE = '''import unittest

from lib import double


class DoubleTests(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(2), 4)

    def test_refuses_text(self):
        with self.assertRaises(TypeError):
            double("x")
'''


def _unittest_outcomes(text: str, monkeypatch, double) -> dict:
    """Run every test of ``text`` (module ``utils_tests.test_lib``) under unittest: test id -> passed?"""
    import unittest

    lib = types.ModuleType("lib")
    lib.double = double
    monkeypatch.setitem(sys.modules, "lib", lib)
    module = types.ModuleType("utils_tests.test_lib")
    exec(compile(text, "tests/utils_tests/test_lib.py", "exec"), module.__dict__)
    outcomes = {}
    for test in unittest.defaultTestLoader.loadTestsFromModule(module):
        for case in test:
            result = unittest.TestResult()
            case.run(result)
            outcomes[f"{case._testMethodName} ({module.__name__}.{type(case).__qualname__})"] = result.wasSuccessful()
    return outcomes


@pytest.mark.parametrize("target", ["DoubleTests::test_double", "DoubleTests::test_refuses_text"])
def test_for_djangos_runner_every_planted_test_is_a_method_of_the_hidden_tests_class(monkeypatch, target):
    """Django's runner runs methods of test classes only: a planted function at module level would never run (and
    never be reported, whatever the library does). With an owner class, each planted test is its method, and
    its id is Django's."""
    library = "/testbed/django/utils/lib.py"
    planted = canary.plan("tests/utils_tests/test_lib.py", DJANGO_TEST_FILE, [target], [library],
                          owner="DoubleTests", runner="django")
    assert len(planted) == 3 and all(item.name.startswith("DoubleTests::test_") for item in planted)
    ids = [item.nodeid for item in planted]
    assert all(nodeid.endswith(" (utils_tests.test_lib.DoubleTests)") for nodeid in ids)
    text = canary.appended(DJANGO_TEST_FILE, planted)
    honest = _unittest_outcomes(text, monkeypatch, _honest)
    assert all(honest[nodeid] is False for nodeid in ids), honest  # run, and failed
    assert honest["test_double (utils_tests.test_lib.DoubleTests)"] is True
    if target.endswith("test_double"):  # a result equal to anything passes the mutant too
        forging = _unittest_outcomes(text, monkeypatch, lambda n: _Same(0))
        assert forging[ids[2]] is True and forging[ids[0]] is False


def test_a_django_run_is_read_in_swe_benchs_names_and_a_failed_class_set_up_is_no_forgery():
    run = swe_runtime.TestRun(outcomes={
        "test_a (app.tests.T)": swe_runtime.TestOutcome("test_a (app.tests.T)", "passed"),
        "test_b (app.tests.T)": swe_runtime.TestOutcome("test_b (app.tests.T)", "passed", alias="Does b."),
        "test_c (app.tests.T)": swe_runtime.TestOutcome("test_c (app.tests.T)", "failed", alias="Shared."),
        "test_d (app.tests.T)": swe_runtime.TestOutcome("test_d (app.tests.T)", "passed", alias="Shared."),
    })
    assert run.passed("test_a (app.tests.T)") and run.passed("test_a (app.tests.T.test_a)")  # Python 3.11's form
    assert run.passed("Does b.") and not run.passed("Shared.")  # a docstring names every test that has it
    assert not run.passed("test_z (app.tests.T)") and not run.passed("Nobody's docstring.")
    ids = ["test_x_1a2b3c (app.tests.T)"]
    set_up_failed = swe_runtime.TestRun(outcomes={
        "setUpClass (app.tests.T)": swe_runtime.TestOutcome("setUpClass (app.tests.T)", "error")})
    assert "tampered with:" not in canary.forged(set_up_failed, ids)  # unproven (the hidden tests fail too)
    assert "not reported" in canary.forged(run, ids)  # tests of its file ran, the planted one did not
    assert "not reported" in canary.forged(run, ["test_x_1a2b3c (other.tests.T)"])
