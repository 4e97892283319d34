"""The writing end of the test report channel, copied into SWE containers beside the runners' reporters (pytest's
plugin, the driver of Django's runner); it runs under the container's Python (3.6 and later), not ours.

The harness hands a reporter a file descriptor (``SKYGYM_REPORT_FD``) and the path of a file holding this run's
nonce (``SKYGYM_REPORT_NONCE``). :func:`open_channel` takes both before any project code is imported: it duplicates
the descriptor and closes the original, and reads the nonce file and deletes it, so code under test finds neither
where the harness put them (the nonce was never in any process's environment or command line). Each line is the
nonce and then JSON written with builtin operations only (:func:`json_text`), never through a module (``json``)
that code under test could patch; ``runtime.parse_report`` reads them.
"""

import os

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
