"""A pytest plugin copied into SWE containers (it runs under the container's Python and pytest, not ours).

It reports one JSON line per test on a file descriptor that the harness hands it
(``SKYGYM_REPORT_FD``): ``{"nodeid", "outcome", "message"}`` (and ``"where"``, ``[file, line]`` of a failure), outcome one of passed, failed,
error, skipped, xfailed, xpassed. The descriptor is duplicated and the original closed when the
plugin loads, before pytest imports any project code, and the test run's own output goes elsewhere.
With ``SKYGYM_TRACE_ROOT`` set, each line also lists the functions under that folder the test
called (``[file, name, first line]``): the task builder maps code to the tests that cover it.
"""

import json
import os
import sys

_report = None
if "SKYGYM_REPORT_FD" in os.environ:  # set by the harness; imported anywhere else, the module touches nothing
    _fd = int(os.environ.pop("SKYGYM_REPORT_FD"))
    _report = os.fdopen(os.dup(_fd), "w", encoding="utf-8", buffering=1)
    os.close(_fd)
_trace_root = os.environ.pop("SKYGYM_TRACE_ROOT", "")
_results = {}
_called = set()


def _profile(frame, event, arg):
    if event == "call":
        code = frame.f_code
        if code.co_filename.startswith(_trace_root):
            _called.add((code.co_filename[len(_trace_root):].lstrip("/"), code.co_name, code.co_firstlineno))


def _message(report):
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(getattr(report, "longrepr", "") or "")
    return text.strip()[:600]


def _where(report):
    """Where the failure was raised: [file, line] (the builder rejects bugs that crash on the line they change)."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    return [str(crash.path), int(crash.lineno)] if crash is not None else None


def pytest_runtest_logreport(report):
    entry = _results.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "message": ""})
    if report.failed:
        if entry["outcome"] not in ("failed", "error"):
            entry["outcome"] = "failed" if report.when == "call" else "error"
            entry["message"] = _message(report)
            entry["where"] = _where(report)
    elif report.skipped:
        if hasattr(report, "wasxfail"):
            entry["outcome"] = "xfailed"
        elif entry["outcome"] == "passed":
            entry["outcome"] = "skipped"
    elif report.when == "call" and hasattr(report, "wasxfail"):
        entry["outcome"] = "xpassed"


def pytest_runtest_protocol(item, nextitem):
    if not _trace_root:
        return None
    _called.clear()
    sys.setprofile(_profile)
    try:
        from _pytest.runner import runtestprotocol

        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        runtestprotocol(item, nextitem=nextitem)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    finally:
        sys.setprofile(None)
    _results.setdefault(item.nodeid, {"nodeid": item.nodeid, "outcome": "error", "message": "not run"})["calls"] = sorted(_called)
    return True


def pytest_collectreport(report):
    if report.failed:
        nodeid = report.nodeid or "<collection>"
        _results[nodeid] = {"nodeid": nodeid, "outcome": "error", "message": _message(report)}


def pytest_sessionfinish(session, exitstatus):
    if _report is None:
        return
    for entry in _results.values():
        _report.write(json.dumps(entry) + "\n")
    _report.write(json.dumps({"end": True, "exitstatus": int(exitstatus)}) + "\n")
    _report.flush()
