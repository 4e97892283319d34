"""Runs SymPy's own test runner (``sympy.testing.runtests``; ``sympy.utilities.runtests`` before SymPy 1.6) in a
SWE container, as SWE-bench's ``bin/test -C --verbose`` does, and reports each test's outcome on the harness's
report channel (``_report_channel``, copied beside it). It runs under the container's Python (3.5 and later) and
SymPy, not ours, and is imported by a bootstrap that moved the working folder to the end of ``sys.path``.

Its arguments come from a file the harness wrote (``SKYGYM_RUNNER_ARGS``, NUL-separated, deleted once read), never
from the command line: the names of the tests to run (one a line; empty: all), the names to leave out, then the
test files. SymPy's runner runs in this process (``subprocess=False``; ``bin/test`` runs it in a child process with
its own hash seed, which the channel would not reach) with its cache off (``-C``).

One line per test: the nonce, then JSON ``{"nodeid", "outcome", "message", "alias"}``. ``nodeid`` is
``path::test_x``; ``alias`` is the bare name ``test_x``, SWE-bench's name for it. Outcomes: passed, failed (an
``XFAIL`` test too: SWE-bench's reading of SymPy's log finds no pass in it), error, skipped, xpassed;
a file that cannot be imported is one error under its path. The last line is ``{"end": true, "exitstatus": N}``,
written only when the runner returned. The hooks wrap the runner's reporter and its test selection
(``SymPyTests.matches``); their state lives in closures, not module globals.
"""

import os
import sys

try:  # beside it in the container
    from skygym_report_channel import error_message, open_channel, read_arguments, run_to_the_end, writer_of
except ImportError:  # imported as part of the package, outside a test run
    from skyrl_gym.envs.swe._report_channel import (
        error_message, open_channel, read_arguments, run_to_the_end, writer_of,
    )

TESTBED = "/testbed"


def _install(runtests, report, nonce, runs):
    """Wrap the reporter and the selection; returns ``finish(exitstatus)``, which writes the report."""
    results = {}
    where = {"file": "", "test": ""}
    reporter = runtests.PyTestReporter
    originals = {name: getattr(reporter, name) for name in (
        "entering_filename", "entering_test", "test_pass", "test_fail", "test_exception", "test_skip",
        "test_xfail", "test_xpass")}
    matches = runtests.SymPyTests.matches
    failure_kinds = ("failed", "error")

    def record(outcome, err=None, message=""):
        name = where["test"]
        nodeid = "%s::%s" % (where["file"], name) if name else where["file"]
        entry = results.get(nodeid)
        if entry is None:
            results[nodeid] = {"nodeid": nodeid, "outcome": outcome, "message": message or error_message(err),
                               "alias": name}
        elif entry["outcome"] not in failure_kinds and outcome in failure_kinds:
            entry["outcome"], entry["message"] = outcome, message or error_message(err)

    def entering_filename(self, filename, n):
        path = os.path.abspath(filename)
        where["file"] = path[len(TESTBED) + 1:] if path.startswith(TESTBED + "/") else path
        where["test"] = ""
        return originals["entering_filename"](self, filename, n)

    def entering_test(self, f):
        where["test"] = getattr(f, "__name__", str(f))
        return originals["entering_test"](self, f)

    def test_pass(self, *args, **kwargs):
        record("passed")
        return originals["test_pass"](self, *args, **kwargs)

    def test_fail(self, exc_info):
        record("failed", exc_info)
        return originals["test_fail"](self, exc_info)

    def test_exception(self, exc_info):
        record("error", exc_info)
        return originals["test_exception"](self, exc_info)

    def test_skip(self, *args, **kwargs):
        record("skipped")
        return originals["test_skip"](self, *args, **kwargs)

    def test_xfail(self, *args, **kwargs):  # SWE-bench's reading of SymPy's log finds no pass in an "f"
        record("failed", message="XFAIL: an expected failure, which is no pass")
        return originals["test_xfail"](self, *args, **kwargs)

    def test_xpass(self, *args, **kwargs):
        record("xpassed")
        return originals["test_xpass"](self, *args, **kwargs)

    for method in (entering_filename, entering_test, test_pass, test_fail, test_exception, test_skip, test_xfail,
                   test_xpass):
        setattr(reporter, method.__name__, method)

    def chosen(self, x):
        name = x if isinstance(x, str) else getattr(x, "__name__", "")
        if not runs(name):
            return False
        return matches(self, x)

    runtests.SymPyTests.matches = chosen

    return writer_of(report, nonce, results)


def main():
    report, nonce = open_channel()
    runs, paths = read_arguments()
    os.environ["SYMPY_USE_CACHE"] = "no"  # bin/test -C
    sys.path.insert(0, TESTBED)  # the patched repository's SymPy, as SWE-bench's (installed in place) has it
    try:
        from sympy.testing import runtests
    except ImportError:  # SymPy before 1.6
        from sympy.utilities import runtests
    finish = _install(runtests, report, nonce, runs)
    run_to_the_end(lambda: runtests.test(*paths, verbose=True, colors=False, subprocess=False), finish)


if os.environ.get("SKYGYM_RUNNER_ARGS"):  # set by the harness; imported anywhere else, the module does nothing
    main()
