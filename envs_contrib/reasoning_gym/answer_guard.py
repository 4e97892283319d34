"""Answers that reasoning-gym's scorers would run as code are refused before they are scored.

Some of reasoning-gym's ``score_answer`` methods read the model's answer with Python's ``eval``
(``string_insertion``, ``spiral_matrix``, ``binary_matrix``, ``n_queens``, for partial credit on a list
written as Python) or with sympy's ``parse_expr`` (``countdown``, ``puzzle24``, ``simple_integration``,
``intermediate_integration``, ``polynomial_multiplication``), which is ``eval`` with every built-in
function in reach. They run in the env's own process (the trainer, or ``serve-env``), so an answer of
``__import__('os').system(...)`` ran a shell command there, and ``9**9**9**9`` held the process for
ever, and ``oracle_answer`` (a name the scorer's ``eval`` resolves in its own frame) earned
``string_insertion``'s partial credit. :func:`refusal` says why an answer must not be scored, or ``None``
when it is safe to hand over:

* ``eval`` scorers: an answer that is not a Python expression reaches ``eval`` only to fail, and a
  Python literal (a list of characters, a list of lists) is what ``eval`` was meant to read; any other
  Python expression (a name, a call, arithmetic) is refused, unless it is exactly the expected answer,
  which the scorer pays before it evaluates anything;
* sympy scorers: the answer must be a Python expression (sympy rewrites some other texts, ``x!`` or
  ``0.[3]``, into calls before it evaluates them) made of numbers, names (symbols), ``+ - * /``, signs and
  calls of the elementary functions sympy prints (``sin(x)``, ``exp(2*x)``, ``log(x)``, ``Integral(...)``);
  never attributes, subscripts, other calls, lambdas, or names that start with ``_``. ``**`` only between
  operands that hold no other ``**``, with exponents of at most 1000, and at most 20 of them: what sympy
  computes from the answer stays small.

``coin_flip``'s scorer reads the answer with ``fractions.Fraction``, which computes ``10**exponent`` for a decimal
exponent: ``1e10000000`` (ten characters) held the process for 20 seconds, and one more digit for half an hour. An
exponent beyond what a float holds is refused there.

Other datasets' scorers do not evaluate the answer (``tests/envs_contrib/test_reasoning_gym.py`` reads every
``score_answer`` of the installed reasoning-gym to keep these lists complete).
"""

from __future__ import annotations

import ast
import re
from typing import Any, Optional

from skyrl_gym import threadsafe_ast

# The datasets whose score_answer calls Python's eval, or sympy's parse_expr, on the answer (reasoning-gym
# 0.1.25).
EVALUATED_AS_PYTHON = frozenset({"string_insertion", "spiral_matrix", "binary_matrix", "n_queens"})
PARSED_BY_SYMPY = frozenset(
    {"countdown", "puzzle24", "simple_integration", "intermediate_integration", "polynomial_multiplication"}
)
# The datasets whose score_answer reads the answer with fractions.Fraction (reasoning-gym 0.1.25), and the largest
# decimal exponent handed to it (a float's range ends near 1e308; Fraction computes 10**exponent exactly).
PARSED_BY_FRACTION = frozenset({"coin_flip"})
MAX_DECIMAL_EXPONENT = 400
# Each run of spaces can match one way only: as \s*[-+]?\s*, "e" and 20,000 spaces took 4.9 s (quadratic).
_EXPONENT = re.compile(r"[eE]\s*(?:[-+]\s*)?_?(\d[\d_]*)")
# Functions an answer of those datasets may call: the elementary functions sympy prints.
SAFE_FUNCTIONS = frozenset(
    {
        "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "sinh", "cosh", "tanh",
        "asinh", "acosh", "atanh", "exp", "log", "ln", "sqrt", "Abs", "abs", "Integral",
    }
)
MAX_EXPONENT = 1000
MAX_POWERS = 20
MAX_DEPTH = 100

_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)


def dataset_name(dataset: Any, default: str) -> str:
    """The name reasoning-gym registers ``dataset``'s class under (``default`` when it has none)."""
    from reasoning_gym.factory import DATASETS

    return next((name for name, (cls, _) in DATASETS.items() if type(dataset) is cls), default)


def refusal(dataset: str, answer: str, expected: Any = None) -> Optional[str]:
    """Why ``answer`` must not reach ``dataset``'s scorer, or ``None`` when it may (``expected``: the entry's
    answer)."""
    if dataset in PARSED_BY_FRACTION:
        exponents = [int(digits.replace("_", "")) for digits in _EXPONENT.findall(answer)]
        if any(exponent > MAX_DECIMAL_EXPONENT for exponent in exponents):
            return (f"it has a decimal exponent over {MAX_DECIMAL_EXPONENT} (reasoning-gym reads it with "
                    "fractions.Fraction, which would compute 10 to that power)")
        return None
    if dataset not in EVALUATED_AS_PYTHON and dataset not in PARSED_BY_SYMPY:
        return None
    symbolic = dataset in PARSED_BY_SYMPY
    trees = []
    for text in {answer, answer.strip(), answer.strip(" \t")}:  # eval() strips spaces and tabs itself
        try:
            trees.append(threadsafe_ast.parse(text, mode="eval"))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    if not trees:
        if symbolic:
            return (
                "it is not a plain expression (reasoning-gym reads it with sympy, which runs what it reads)"
            )
        return None  # eval fails on it as well
    for tree in trees:
        problem = _python_problem(tree, answer == expected) if not symbolic else _sympy_problem(tree)
        if problem is not None:
            return f"{problem}: reasoning-gym's scorer would run it as Python code"
    return None


def _python_problem(tree: ast.Expression, expected: bool) -> Optional[str]:
    if expected:  # the scorer pays the expected answer before it evaluates anything
        return None
    try:
        ast.literal_eval(tree)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return "it is a Python expression, not a literal"
    return None


def _sympy_problem(tree: ast.Expression) -> Optional[str]:
    try:
        return _Checker().arithmetic(tree.body, 0)
    except RecursionError:
        return "it is nested too deeply"


class _Checker:
    """The sympy datasets' answers: arithmetic on numbers and symbols, calls of the elementary functions."""

    def __init__(self) -> None:
        self.powers = 0

    def arithmetic(self, node: ast.AST, depth: int) -> Optional[str]:
        """What is wrong with ``node`` as a number: the answer, an operand or a function's argument."""
        if depth > MAX_DEPTH:
            return "it is nested too deeply"
        if isinstance(node, ast.Constant):
            if type(node.value) in (int, float, complex):
                return None
            return f"it computes with a {type(node.value).__name__} constant"
        if isinstance(node, ast.Name):
            return f"it names {node.id[:40]!r}" if node.id.startswith("_") else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.arithmetic(node.operand, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
            if isinstance(node.op, ast.Pow):
                found = self.power(node)
                if found:
                    return found
            return self.arithmetic(node.left, depth + 1) or self.arithmetic(node.right, depth + 1)
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name not in SAFE_FUNCTIONS or node.keywords:
                keywords = " with keywords" if node.keywords else ""
                return f"it calls {ast.unparse(node.func)[:40]!r}{keywords}"
            for argument in node.args:
                if isinstance(argument, ast.Starred):
                    return "it unpacks arguments (*)"
                found = self.arithmetic(argument, depth + 1)
                if found:
                    return found
            return None
        return f"it holds a {type(node).__name__} expression"

    def power(self, node: ast.BinOp) -> Optional[str]:
        self.powers += 1
        if self.powers > MAX_POWERS:
            return f"it raises to a power more than {MAX_POWERS} times"
        for side in (node.left, node.right):
            if any(_is_power(inner) for inner in ast.walk(side)):
                return "it raises a power to a power"
        for inner in ast.walk(node.right):
            number = isinstance(inner, ast.Constant) and type(inner.value) in (int, float, complex)
            if number and abs(inner.value) > MAX_EXPONENT:
                return f"its exponent {inner.value!r:.20} is over {MAX_EXPONENT}"
        return None


def _is_power(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow)
