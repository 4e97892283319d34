"""Take test functions out of a test file, leaving the rest of it (the tests the agent may run) in place.

    hide_tests(source, ["TestGet::test_missing_key", "test_merge[dicts]"])  -> the file without those functions

A test id's last part names a function (parameters in brackets are dropped: every case of a parametrized
function goes); the parts before it name the classes it is in. The function's lines, decorators included,
are removed; a class left without a statement gets ``pass``. The result must parse, and every name must be
found: otherwise :class:`HideError` says which.
"""

from __future__ import annotations

import ast
import re
from typing import Iterable, List, Optional, Sequence, Set, Tuple

from skyrl_gym import threadsafe_ast


class HideError(ValueError):
    """A test cannot be taken out of its file (not a function definition, or the file would break)."""


def file_of_test(test_id: str) -> str:
    """``"tests/test_x.py::TestA::test_b[1]"`` -> ``"tests/test_x.py"``."""
    return test_id.split("::", 1)[0]


def _qualname(test_id: str) -> Tuple[str, ...]:
    parts = test_id.split("::")[1:]
    if not parts:
        raise HideError(f"{test_id!r} names a file, not a test function")
    return (*parts[:-1], re.sub(r"\[.*\]$", "", parts[-1]))


def _find(body: Sequence[ast.stmt], names: Tuple[str, ...]) -> Optional[Tuple[ast.stmt, Sequence[ast.stmt]]]:
    """The definition at ``names`` (classes, then the function) and the body it is in."""
    for node in body:
        if getattr(node, "name", None) != names[0]:
            continue
        if len(names) == 1 and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node, body
        if len(names) > 1 and isinstance(node, ast.ClassDef):
            return _find(node.body, names[1:])
    return None


def hide_tests(source: bytes, test_ids: Iterable[str]) -> bytes:
    """``source`` without the functions of ``test_ids`` (ids of one file; the path part is ignored)."""
    try:
        tree = threadsafe_ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise HideError(f"the test file does not parse: {exc}") from None
    lines = source.decode("utf-8").splitlines(keepends=True)
    removed: Set[int] = set()  # 0-based line numbers
    emptied: List[Tuple[Sequence[ast.stmt], ast.stmt]] = []
    seen: Set[Tuple[str, ...]] = set()
    for test_id in test_ids:
        names = _qualname(test_id)
        if names in seen:
            continue
        seen.add(names)
        found = _find(tree.body, names)
        if found is None:
            raise HideError(f"{test_id!r} is not a function defined in its file (generated or inherited)")
        node, body = found
        first = _first(node)
        removed.update(range(first - 1, node.end_lineno))  # type: ignore[attr-defined]
        emptied.append((body, node))
    pads = {}
    for body, node in emptied:
        spans = [set(range(_first(statement) - 1, statement.end_lineno or statement.lineno)) for statement in body]
        if all(span <= removed for span in spans):
            pads[body[0].lineno - 1] = " " * node.col_offset + "pass\n"
    out = []
    for index, line in enumerate(lines):
        if index in pads:
            out.append(pads[index])
        if index not in removed:
            out.append(line)
    result = "".join(out).encode("utf-8")
    try:
        threadsafe_ast.parse(result)
    except SyntaxError as exc:
        raise HideError(f"the file would not parse without those tests: {exc}") from None
    return result


def _first(statement: ast.stmt) -> int:
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])


__all__ = ["HideError", "file_of_test", "hide_tests"]
