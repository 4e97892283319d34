"""What the math reward's helper processes run (see :mod:`skyrl_gym.rewards.math` and
:mod:`skyrl_gym.helper_processes`): math-verify's verdict on one prediction against one gold answer.

It imports math-verify (and sympy) on first use, in the helper: the pool preloads it before any call's time
limit runs, and the caller's process never imports it.
"""

from __future__ import annotations

import logging
from typing import Tuple

# Decimal places at which math-verify compares a decimal with an exact value. Its default, 6, paid 0.5000001 for
# 1/2, 1.414214 for sqrt(2) and 0.3333333 for 1/3 (an attacker's pass): a decimal is paid for an exact ground truth
# when it names it, 0.5 for 1/2, not when it rounds to it. The price: a ground truth written as a rounded decimal
# (0.333333) no longer pays the exact form (1/3).
FLOAT_ROUNDING = 10


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
        if math_verify(gold_parsed, prediction_parsed, float_rounding=FLOAT_ROUNDING, timeout_seconds=None):
            return True, "math-verify"
        return False, "math-verify: not the same value as the ground truth"
    except Exception as exc:  # sympy raises all sorts of things on odd input
        return False, f"error: {type(exc).__name__}: {exc}"[:200]
