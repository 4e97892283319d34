"""The writing end of the test report channel, copied into SWE containers beside the runners' reporters (pytest's
plugin, the drivers of Django's and SymPy's runners, which share the rest of this module); it runs under the
container's Python (3.5 and later), not ours.

The harness hands a reporter a file descriptor (``SKYGYM_REPORT_FD``) and the path of a file holding this run's
nonce (``SKYGYM_REPORT_NONCE``). :func:`open_channel` takes both before any project code is imported: it duplicates
the descriptor and closes the original, and reads the nonce file and deletes it, so code under test finds neither
where the harness put them (the nonce was never in any process's environment or command line). Each line is the
nonce and then JSON written with builtin operations only (:func:`json_text`), never through a module (``json``)
that code under test could patch; ``runtime.parse_report`` reads them.
"""

import os
import sys

# JSON string escapes: '"', '\', control characters and lone surrogates (which UTF-8 cannot carry).
_ESCAPES = {code: "\\u%04x" % code for code in [*range(0x20), *range(0xD800, 0xE000)]}
_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\"})


def json_text(value, _escapes=_ESCAPES, _str=str, _int=int, _isinstance=isinstance, _type=type):
    """``value`` (None, bool, int, str, list/tuple, dict with str keys) as JSON text."""
    if value is None or _isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if _type(value) is _int:
        return _int.__repr__(value)
    if _isinstance(value, _str):
        return '"' + _str.translate(_str(value), _escapes) + '"'
    if _isinstance(value, (list, tuple)):
        return "[" + ", ".join([json_text(item) for item in value]) + "]"
    if _isinstance(value, dict):
        return "{" + ", ".join([json_text(_str(key)) + ": " + json_text(item) for key, item in value.items()]) + "}"
    return json_text(_str(value))


def open_channel():
    """``(writer, nonce)``: the report's file (line-buffered) and this run's nonce, taken from where the harness
    put them; ``(None, "")`` when the harness set no descriptor (imported anywhere else, it touches nothing)."""
    if "SKYGYM_REPORT_FD" not in os.environ:
        return None, ""
    fd = int(os.environ.pop("SKYGYM_REPORT_FD"))
    nonce = ""
    nonce_file = os.environ.pop("SKYGYM_REPORT_NONCE", "")
    if nonce_file:
        with open(nonce_file, encoding="utf-8") as handle:
            nonce = handle.read()
        os.unlink(nonce_file)
    writer = os.fdopen(os.dup(fd), "w", encoding="utf-8", buffering=1)
    os.close(fd)
    return writer, nonce


# ----- what the drivers of the projects' own runners (Django's, SymPy's) share ----------------------------------
def read_arguments():
    """``(runs, the runner's arguments)`` from the harness's file (``SKYGYM_RUNNER_ARGS``, NUL-separated: the
    tests to run, then the tests to leave out, one name a line; no test to run means all), read before any project
    code runs and deleted: never the command line, where code under test could read which tests a run holds.
    ``runs(name)`` says whether the test of that name is one this run holds."""
    path = os.environ.pop("SKYGYM_RUNNER_ARGS")
    with open(path, encoding="utf-8") as handle:
        fields = handle.read().split("\0")
    os.unlink(path)
    selected, left_out = [{line for line in field.split("\n") if line} for field in fields[:2]]

    def runs(name):
        return (not selected or name in selected) and name not in left_out

    return runs, fields[2:]


def error_message(err):
    """One line for an ``exc_info`` triple (600 characters at most)."""
    if not err:
        return ""
    return ("%s: %s" % (getattr(err[0], "__name__", err[0]), err[1])).strip()[:600]


def writer_of(report, nonce, results):
    """``finish(exitstatus)``: writes each entry of ``results`` (test id -> entry), then the end line."""

    def finish(exitstatus):
        if report is None:
            return
        for entry in results.values():
            report.write(nonce + json_text(entry) + "\n")
        report.write(nonce + json_text({"end": True, "exitstatus": exitstatus}) + "\n")
        report.flush()

    return finish


def run_to_the_end(run, finish):
    """Call ``run()`` (the runner; its result: whether every test passed), write the report with its exit status,
    and end the process there (nothing after the runner writes on the channel)."""
    try:
        status = 0 if run() else 1
    except SystemExit as stop:  # Django's runtests.py ends with sys.exit(bool(failures))
        code = stop.code
        status = code if isinstance(code, int) and not isinstance(code, bool) else int(bool(code))
    finish(status)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
