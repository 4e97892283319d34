"""What the math reward's helper processes run (see :mod:`skyrl_gym.rewards.math` and
:mod:`skyrl_gym.helper_processes`): math-verify's verdict on one prediction against one gold answer.

It imports math-verify (and sympy) on first use, in the helper: the pool preloads it before any call's time
limit runs, and the caller's process never imports it.
"""

from __future__ import annotations

import logging
from typing import Any, List, Tuple

# Decimal places at which math-verify compares a decimal with another value (its default, 6, paid 0.5000001 for 1/2).
FLOAT_ROUNDING = 10
# Those places are absolute: at 10, any two values under 5e-11 were one (0.0 was paid for 1.6 x 10^-19). So a verdict
# of equal where a decimal takes part must also hold relatively: a decimal is paid for an exact value it names to
# 12 significant digits (0.5 for 1/2), not for one it rounds to (0.3333333333 for 1/3, 1.414214 for sqrt(2)). Two
# attackers' passes found these.
RELATIVE_TOLERANCE = 1e-12


def verify(prediction: str, gold: str) -> Tuple[bool, str]:
    """``(equal, reason)``; any error of the parser or of sympy is a False verdict that names it."""
    from math_verify import parse, verify as math_verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # the caller bounds the time; silence its warning
    try:
        # Wrap in $...$ so that plain LaTeX and plain numbers both parse.
        gold_parsed = parse(f"${gold}$", parsing_timeout=None)
        prediction_parsed = parse(f"${prediction}$", parsing_timeout=None)
        if not gold_parsed or not prediction_parsed:
            return False, "math-verify could not parse the answer"
        if not math_verify(gold_parsed, prediction_parsed, float_rounding=FLOAT_ROUNDING, timeout_seconds=None):
            return False, "math-verify: not the same value as the ground truth"
        if _decimal_only_rounds_to(prediction_parsed[0], gold_parsed[0]):
            return False, (f"math-verify: a decimal that only rounds to the ground truth (not within "
                           f"{RELATIVE_TOLERANCE:g} of it, relatively)")
        return True, "math-verify"
    except Exception as exc:  # sympy raises all sorts of things on odd input
        return False, f"error: {type(exc).__name__}: {exc}"[:200]


def _decimal_only_rounds_to(prediction: Any, gold: Any) -> bool:
    """Whether a decimal on either side has no value on the other side within :data:`RELATIVE_TOLERANCE` of it,
    comparing the numbers each side is made of (:func:`_numbers`: an equation's sides, a tuple's, set's, interval's
    or matrix's elements, an expression's numeric parts; a percentage read either as itself or as its number, as
    math-verify reads it). Only a number with a decimal in it needs a partner: ``x = 0.3333333333`` and
    ``(0.3333333333, 1)`` are refused for ``x = 1/3`` and ``(1/3, 1)`` as ``0.3333333333`` is for ``1/3``."""
    import sympy

    sides = [[(number, _values(number)) for number in _numbers(expr)] for expr in (prediction, gold)]
    for mine, theirs in (sides, sides[::-1]):
        for number, values in mine:
            if number.has(sympy.Float) and not any(
                bool(sympy.Abs(a - b) <= RELATIVE_TOLERANCE * sympy.Max(sympy.Abs(a), sympy.Abs(b)))
                for a in values for _, others in theirs for b in others
            ):
                return True
    return False


def _numbers(expr: Any) -> List[Any]:
    """The largest parts of ``expr`` that are numbers (a number itself is one)."""
    import sympy
    from sympy.matrices import MatrixBase

    if isinstance(expr, sympy.Expr) and expr.is_number:
        return [expr]
    parts = list(expr) if isinstance(expr, MatrixBase) else list(getattr(expr, "args", ()))
    return [number for part in parts for number in _numbers(part)]


def _values(number: Any) -> List[Any]:
    """``number`` at 30 digits, in sympy (a float overflows past 1e308), and a percentage's number too."""
    import sympy
    from math_verify.grader import get_pct_val

    return [sympy.N(sympy.UnevaluatedExpr(r).doit(deep=True), 30) for r in {number, get_pct_val(number, number)}]
