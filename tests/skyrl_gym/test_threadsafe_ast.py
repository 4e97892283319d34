"""``skyrl_gym.threadsafe_ast``: parses from many threads at once never raise CPython 3.11's spurious
``SystemError: AST constructor recursion depth mismatch``, and give what ``ast`` gives."""

from __future__ import annotations

import ast
import gc
import threading

import pytest

from skyrl_gym import threadsafe_ast

SOURCE = "\n".join(f"def f{i}(a, b):\n    return [x * (a + b) for x in range({i}) if x % 3 == (a or b)]"
                   for i in range(100))


class _Finalized:
    """Garbage with a finalizer: a collection in the middle of building a tree runs Python code, and another
    thread may take the interpreter there (how 3.11's shared recursion count goes wrong)."""

    def __del__(self) -> None:
        sum(range(50))


def test_parses_on_many_threads_at_once_never_raise_and_match_ast():
    expected = ast.dump(ast.parse(SOURCE))
    errors, dumps = [], []
    threshold = gc.get_threshold()
    gc.set_threshold(50, 5, 5)

    def work() -> None:
        for _ in range(40):
            junk = [_Finalized() for _ in range(20)]
            for item in junk:
                item.cycle = item  # collected by the garbage collector, finalizers and all
            del junk
            try:
                dumps.append(ast.dump(threadsafe_ast.parse(SOURCE)))
            except SystemError as exc:
                errors.append(str(exc))

    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.set_threshold(*threshold)
    assert errors == [] and len(dumps) == 160 and set(dumps) == {expected}


def test_errors_and_literals_are_as_ast_has_them():
    with pytest.raises(SyntaxError):
        threadsafe_ast.parse("def (")
    assert isinstance(threadsafe_ast.parse("1 + 2", mode="eval"), ast.Expression)
    assert threadsafe_ast.literal_eval(" \t{'a': (1, 2.5, None)}") == {"a": (1, 2.5, None)}
    assert threadsafe_ast.literal_eval(ast.parse("[1]", mode="eval")) == [1]
    with pytest.raises(ValueError):
        threadsafe_ast.literal_eval("__import__('os')")
