"""Runs Django's own test runner (``tests/runtests.py``) in a SWE container and reports each test's outcome on
the harness's report channel (``_report_channel``, copied beside it). It runs under the container's Python (3.6
and later) and Django, not ours, and is imported by a bootstrap that moved the working folder to the end of
``sys.path``: no file of the repository can stand in for it or for what it imports.

Its arguments come from a file the harness wrote (``SKYGYM_RUNNER_ARGS``, NUL-separated, deleted once read),
never from the command line, where code under test could read which tests a run holds (the planted tests' run
from the hidden tests'). The first field lists the tests to run (one id a line; empty: all), the second those to
leave out, the rest go to ``runtests.py``: the same modules in both runs.

One line per test: the nonce, then JSON ``{"nodeid", "outcome", "message", "alias"}``. ``nodeid`` is
``test_x (module.Class)``, as Django's runner printed tests before Python 3.11 and as SWE-bench's rows name
them; ``alias`` is the first line of the test's docstring, which SWE-bench's rows use as the name of a
test that has one. Outcomes: passed, failed, error (a failure outside an assertion, or a subtest's error),
skipped, xfailed (an expected failure), xpassed (an unexpected success); the first failure of a test stands,
whatever is reported after it. The last line is ``{"end": true, "exitstatus": N}``, written only when the
runner returned. The hooks wrap ``unittest.TestResult``'s methods (every result class Django's runner uses
calls them; of what they hear that is not a test, only the error of unittest's stand-in for a class or module
that failed to set up is reported) and ``unittest.TestSuite.addTest`` (the tests not run never enter a suite); their
state lives in closures, not module globals.
"""

import os
import runpy
import sys
import unittest

try:  # beside it in the container
    from skygym_report_channel import error_message, open_channel, read_arguments, run_to_the_end, writer_of
except ImportError:  # imported as part of the package, outside a test run
    from skyrl_gym.envs.swe._report_channel import (
        error_message, open_channel, read_arguments, run_to_the_end, writer_of,
    )

TESTBED = "/testbed"
_RESULT_METHODS = ("addSuccess", "addFailure", "addError", "addSkip", "addExpectedFailure",
                   "addUnexpectedSuccess", "addSubTest")


def _test_id(test, _testcase=unittest.TestCase, _isinstance=isinstance, _type=type):
    """``test_x (module.Class)`` for a test; what ``str()`` says for anything else a result hears of (a class
    whose ``setUpClass`` failed)."""
    method = getattr(test, "_testMethodName", None)
    if method is None or not _isinstance(test, _testcase):
        return str(test)
    cls = _type(test)
    return "%s (%s.%s)" % (method, cls.__module__, cls.__qualname__)


def _description(test):
    doc = getattr(test, "_testMethodDoc", None)
    return doc.strip().split("\n")[0].strip() if isinstance(doc, str) and doc.strip() else ""


def _install(report, nonce, runs):
    """Wrap the result and suite methods; returns ``finish(exitstatus)``, which writes the report."""
    results = {}
    base = unittest.TestResult
    error_holder = getattr(unittest.suite, "_ErrorHolder", ())
    originals = {name: getattr(base, name) for name in _RESULT_METHODS}
    failure_kinds = ("failed", "error")

    def record(test, outcome, err=None):
        if not isinstance(test, unittest.TestCase) and (outcome != "error" or not isinstance(test, error_holder)):
            # Not a test: only unittest's stand-in for a class or module that failed to set up is reported, and only
            # its error (a stand-in that passed, named like a failing test, once took that test's place).
            return
        name = _test_id(test)
        entry = results.get(name)
        if entry is None:
            results[name] = {"nodeid": name, "outcome": outcome, "message": error_message(err),
                             "alias": _description(test)}
        elif entry["outcome"] not in failure_kinds and outcome in failure_kinds:
            entry["outcome"], entry["message"] = outcome, error_message(err)

    def failure_of(test, err):
        kind = err[0] if err else None
        expected = getattr(test, "failureException", AssertionError)
        return "failed" if isinstance(kind, type) and issubclass(kind, expected) else "error"

    def addSuccess(self, test):
        record(test, "passed")
        return originals["addSuccess"](self, test)

    def addFailure(self, test, err):
        record(test, "failed", err)
        return originals["addFailure"](self, test, err)

    def addError(self, test, err):
        record(test, "error", err)
        return originals["addError"](self, test, err)

    def addSkip(self, test, reason):
        record(test, "skipped")
        return originals["addSkip"](self, test, reason)

    def addExpectedFailure(self, test, err):
        record(test, "xfailed")
        return originals["addExpectedFailure"](self, test, err)

    def addUnexpectedSuccess(self, test):
        record(test, "xpassed")
        return originals["addUnexpectedSuccess"](self, test)

    def addSubTest(self, test, subtest, err):
        if err is not None:  # a failing subtest fails its test
            record(test, failure_of(test, err), err)
        return originals["addSubTest"](self, test, subtest, err)

    for method in (addSuccess, addFailure, addError, addSkip, addExpectedFailure, addUnexpectedSuccess,
                   addSubTest):
        setattr(base, method.__name__, method)

    add_test = unittest.TestSuite.addTest

    def addTest(self, test):
        if isinstance(test, unittest.TestCase) and type(test).__name__ != "_FailedTest":
            name = _test_id(test)
            if not runs(name):
                return None
        return add_test(self, test)

    unittest.TestSuite.addTest = addTest

    return writer_of(report, nonce, results)


def main():
    report, nonce = open_channel()
    runs, arguments = read_arguments()
    finish = _install(report, nonce, runs)
    runner = os.path.join(TESTBED, "tests", "runtests.py")
    sys.argv = [runner] + arguments
    # As `python tests/runtests.py` has it (the test apps import from there), and the repository next: the code
    # under test is the patched /testbed's, as SWE-bench's grading has it by installing the repository again
    # after the patch (its Django 1.x and 2.x images install a copy, `setup.py install`, not a link to /testbed).
    sys.path[0:0] = [os.path.dirname(runner), TESTBED]
    run_to_the_end(lambda: runpy.run_path(runner, run_name="__main__") or True, finish)


if os.environ.get("SKYGYM_RUNNER_ARGS"):  # set by the harness; imported anywhere else, the module does nothing
    main()
