"""A pytest plugin copied into SWE containers (it runs under the container's Python and pytest, not ours).

It reports one line per test on a file descriptor that the harness hands it (``SKYGYM_REPORT_FD``):
this run's nonce, then JSON ``{"nodeid", "outcome", "message"}`` (and ``"where"``, ``[file, line]`` of a
failure), outcome one of passed, failed, error, skipped, xfailed, xpassed (an xfailed test whose ``xfail`` was
raised while it ran, not declared by a mark, also has ``"raised": true``); the last line is
``{"end": true, "exitstatus": N}``. The plugin loads before pytest imports any project code; it then
duplicates the descriptor and closes the original, and reads the nonce from the file
``SKYGYM_REPORT_NONCE`` names and deletes that file, so code under test finds neither the number nor
the nonce where the harness put them (the nonce was never in any process's environment or command
line). The lines are written with builtin operations only, never through a module (``json``) that
code under test could patch, and the plugin's state lives in closures, not module globals. With
``SKYGYM_TRACE_ROOT`` set, each line also lists the functions under that folder the test called
(``[file, name, first line]``): the task builder maps code to the tests that cover it.
"""

import os
import sys

from _pytest.config import hookimpl
from _pytest.outcomes import XFailed

# JSON string escapes: '"', '\', control characters and lone surrogates (which UTF-8 cannot carry).
_ESCAPES = {code: "\\u%04x" % code for code in [*range(0x20), *range(0xD800, 0xE000)]}
_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\"})


def _json(value, _escapes=_ESCAPES, _str=str, _int=int, _isinstance=isinstance, _type=type):
    """``value`` (None, bool, int, str, list/tuple, dict with str keys) as JSON text."""
    if value is None or _isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if _type(value) is _int:
        return _int.__repr__(value)
    if _isinstance(value, _str):
        return '"' + _str.translate(_str(value), _escapes) + '"'
    if _isinstance(value, (list, tuple)):
        return "[" + ", ".join([_json(item) for item in value]) + "]"
    if _isinstance(value, dict):
        return "{" + ", ".join([_json(_str(key)) + ": " + _json(item) for key, item in value.items()]) + "}"
    return _json(_str(value))


def _message(report):
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(getattr(report, "longrepr", "") or "")
    return text.strip()[:600]


def _where(report):
    """Where the failure was raised: [file, line] (the builder rejects bugs that crash on the line they change)."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    return [str(crash.path), int(crash.lineno)] if crash is not None else None


def _hooks(fd, nonce, trace_root):
    """The plugin's hooks, holding the report writer, the nonce and the results in their closures."""
    report = os.fdopen(os.dup(fd), "w", encoding="utf-8", buffering=1) if fd is not None else None
    if fd is not None:
        os.close(fd)
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
            report.write(nonce + _json(entry) + "\n")
        report.write(nonce + _json({"end": True, "exitstatus": int(exitstatus)}) + "\n")
        report.flush()

    return [pytest_runtest_logreport, pytest_runtest_makereport, pytest_runtest_protocol, pytest_collectreport,
            pytest_sessionfinish]


def _setup():
    fd, nonce = None, ""
    # Set by the harness; imported anywhere else, the module touches nothing.
    if "SKYGYM_REPORT_FD" in os.environ:
        fd = int(os.environ.pop("SKYGYM_REPORT_FD"))
        nonce_file = os.environ.pop("SKYGYM_REPORT_NONCE", "")
        if nonce_file:
            with open(nonce_file, encoding="utf-8") as handle:
                nonce = handle.read()
            os.unlink(nonce_file)
    return _hooks(fd, nonce, os.environ.pop("SKYGYM_TRACE_ROOT", ""))


for _hook in _setup():
    globals()[_hook.__name__] = _hook
del _hook
