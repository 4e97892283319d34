"""A pytest plugin copied into SWE containers (it runs under the container's Python and pytest, not ours).

It reports one line per test on the harness's report channel (``_report_channel``, copied beside it):
this run's nonce, then JSON ``{"nodeid", "outcome", "message"}`` (and ``"where"``, ``[file, line]`` of a
failure), outcome one of passed, failed, error, skipped, xfailed, xpassed (an xfailed test whose ``xfail`` was
raised while it ran, not declared by a mark, also has ``"raised": true``); the last line is
``{"end": true, "exitstatus": N}``. The plugin loads before pytest imports any project code and takes the
channel then (the descriptor and the nonce are gone from where the harness put them before code under test
runs); its state lives in closures, not module globals. With
``SKYGYM_TRACE_ROOT`` set, each line also lists the functions under that folder the test called
(``[file, name, first line]``): the task builder maps code to the tests that cover it.
"""

import os
import sys

from _pytest.config import hookimpl
from _pytest.outcomes import XFailed

try:  # beside it in the container
    from skygym_report_channel import json_text, open_channel
except ImportError:  # imported as part of the package, outside a test run
    from skyrl_gym.envs.swe._report_channel import json_text, open_channel


def _message(report):
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(getattr(report, "longrepr", "") or "")
    return text.strip()[:600]


def _where(report):
    """Where the failure was raised: [file, line] (the builder rejects bugs that crash on the line they change)."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    return [str(crash.path), int(crash.lineno)] if crash is not None else None


def _hooks(report, nonce, trace_root):
    """The plugin's hooks, holding the report writer, the nonce and the results in their closures."""
    results = {}
    called = set()
    raised = set()  # tests whose xfail was raised while they ran (pytest.xfail()), not declared by a mark

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(trace_root):
                name = code.co_filename[len(trace_root):].lstrip("/")
                called.add((name, code.co_name, code.co_firstlineno))

    def pytest_runtest_logreport(report):
        fresh = {"nodeid": report.nodeid, "outcome": "passed", "message": ""}
        entry = results.setdefault(report.nodeid, fresh)
        if report.failed:
            if entry["outcome"] not in ("failed", "error"):
                entry["outcome"] = "failed" if report.when == "call" else "error"
                entry["message"] = _message(report)
                entry["where"] = _where(report)
        elif report.skipped:
            if hasattr(report, "wasxfail"):
                entry["outcome"] = "xfailed"
                if report.nodeid in raised:
                    entry["raised"] = True
            elif entry["outcome"] == "passed":
                entry["outcome"] = "skipped"
        elif report.when == "call" and hasattr(report, "wasxfail"):
            entry["outcome"] = "xpassed"

    @hookimpl(tryfirst=True)
    def pytest_runtest_makereport(item, call):
        # Only looks: returning None leaves the report to pytest.
        if call.excinfo is not None and isinstance(call.excinfo.value, XFailed):
            raised.add(item.nodeid)

    def pytest_runtest_protocol(item, nextitem):
        if not trace_root:
            return None
        called.clear()
        sys.setprofile(profile)
        try:
            from _pytest.runner import runtestprotocol

            item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            runtestprotocol(item, nextitem=nextitem)
            item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        finally:
            sys.setprofile(None)
        unreported = {"nodeid": item.nodeid, "outcome": "error", "message": "not run"}
        results.setdefault(item.nodeid, unreported)["calls"] = sorted(called)
        return True

    def pytest_collectreport(report):
        if report.failed:
            nodeid = report.nodeid or "<collection>"
            results[nodeid] = {"nodeid": nodeid, "outcome": "error", "message": _message(report)}

    def pytest_sessionfinish(session, exitstatus):
        if report is None:
            return
        for entry in results.values():
            report.write(nonce + json_text(entry) + "\n")
        report.write(nonce + json_text({"end": True, "exitstatus": int(exitstatus)}) + "\n")
        report.flush()

    return [pytest_runtest_logreport, pytest_runtest_makereport, pytest_runtest_protocol, pytest_collectreport,
            pytest_sessionfinish]


def _setup():
    report, nonce = open_channel()  # set by the harness; imported anywhere else, the module touches nothing
    return _hooks(report, nonce, os.environ.pop("SKYGYM_TRACE_ROOT", ""))


for _hook in _setup():
    globals()[_hook.__name__] = _hook
del _hook
