"""``ast.parse`` and ``ast.literal_eval`` for code that runs on many threads at once (envs stepped by a trainer's
executor, SWE gradings in parallel, audit cases played at once).

CPython 3.11 keeps the AST converter's recursion depth in state that every thread shares. A thread that parses
while another is half-way through building its tree (a garbage collection between two allocations lets it run)
leaves that count wrong, and one of them raises ``SystemError: AST constructor recursion depth mismatch``
(CPython issue 106905): a spurious env error. Four threads parsing a 200-function module 200 times each, with
finalizers running in between, met it 6 times on 3.11.7 and never on 3.10, 3.12 or 3.13. Here the parses of
this package take turns, and a parse that still meets the error (beside a parse outside this package, such as
3.11's traceback formatting) is run again.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_lock = threading.Lock()
_ATTEMPTS = 3


def parse(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)``; its errors (``SyntaxError``, ``ValueError``, ...) are raised as they are."""
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            with _lock:
                return ast.parse(source, mode=mode)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == _ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def literal_eval(node_or_string: Any) -> Any:
    """``ast.literal_eval``, parsing a string with :func:`parse` (leading spaces and tabs dropped, as it does)."""
    if isinstance(node_or_string, str):
        node_or_string = parse(node_or_string.lstrip(" \t"), mode="eval")
    return ast.literal_eval(node_or_string)
