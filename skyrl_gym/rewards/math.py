"""Mathematical equivalence with ``math-verify``, bounded in time.

``math-verify`` (through sympy) can take seconds or hang on adversarial input, and its own time
limits use ``SIGALRM``, which only works in a process's main thread. So the check runs in a helper process
(:mod:`skyrl_gym.helper_processes` running :mod:`skyrl_gym.rewards._math_worker`): on time-out the check is stopped
by an alarm in the helper's main thread (the helper is killed and replaced if it does not stop), and the caller
gets ``False`` with the reason. Cheap cases (equal strings after normalisation, two
plain numbers) never leave the process.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Dict, Optional

from skyrl_gym.helper_processes import DEFAULT_SIZE, HelperDied, HelperPool, HelperTimeout
from skyrl_gym.rewards import _math_worker  # what the helper runs (and so part of the reward's fingerprint)
from skyrl_gym.rewards.boxed import last_boxed_content
from skyrl_gym.rewards.normalize import normalize_final_answer, without_thousands_commas

DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 2_000  # longer "answers" are not answers; do not feed them to sympy


@dataclasses.dataclass
class MathVerdict:
    equal: bool
    reason: str  # "string", "numeric", "math-verify" (each with why when not equal), "timeout", "too long", "error: ..."


# Where Minerva's normalisation can change the value a text names, the string comparison is not made and the
# readers below decide: it deletes powers of units, spacing, dots and commas between digits and unwraps \text{},
# which math-verify reads, so one reply was paid for two ground truths ("5\text{}^2" normalised to 5 and was read
# as 25 by math-verify; "1\;7" to 17 and was read as 8; "1\text{7}" to 17 and read as 1), "17" was paid for a
# ground truth of "1, 7", and the normaliser's "keep what follows the last =" paid "2" for "a=1, b=2".
_VALUE_CHANGING = re.compile(
    r"="  # an equation: math-verify reads it whole
    r"|\^(?!\s*(?:\{\s*)?\\circ)"  # a power (not a degree sign)
    r"|\\[;:! ]|\\l?dots"  # spacing or dots, deleted between digits
    r"|\d\s*\\(?:text|mbox|textbf|overline)\s*\{\s*\d|\d\s*\}\s*\d"  # digits joined by unwrapping
    # a comma between digits: a list or thousands (the number check reads those). Each space run once: written
    # \s*\{?\s* it backtracked cubically, 10 s in the caller's own process for 2,000 characters of spaces
    r"|\d\s*(?:\{\s*)?,\s*(?:\}\s*)?\d"
    # the article the normaliser deletes as a word ("a prime"), where it stands for a variable: "a - b" read as -b
    r"|(?<![A-Za-z\\])an? (?![A-Za-z]{2})"
)


_DIGITS = re.compile(r"\d+")
# A repeating decimal, 0.\overline{3} (math-verify reads the bar as a conjugate: 0.\overline{3} was refused for 1/3)
_REPEATING = re.compile(r"(-?)(\d*)\.(\d*)\\overline\s*\{(\d+)\}")
# Scientific notation math-verify reads as Euler's e: "1.6e-19" was 1.6 e - 19. Rewritten as a power of ten where
# the power is small enough to build (the plain number check, which reads it exactly, decides where both sides
# are plain numbers)
_LARGEST_POWER = 1_000
_BOX = re.compile(r"\\(?:boxed|fbox)\b")
_THIN_SPACE_THOUSANDS = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")


def _normalises_to_its_own_digits(text: str) -> bool:
    """Whether Minerva's normalisation of ``text`` keeps its runs of digits as they were. What it deletes between
    two numbers (a space, a unit word, a degree sign, an ``\\text{}``, a quote) joins them into one: "12^\\circ 30"
    and "1 \\text{ and } 8" read as 1230 and 18, "2 feet 6 inches" as 26, while math-verify reads other values (an
    attacker's pass found each way round a list of such patterns, _VALUE_CHANGING)."""
    return _DIGITS.findall(normalize_final_answer(text)) == _DIGITS.findall(text)


def _as_number(text: str) -> Optional[Decimal]:
    """The number a plain integer or decimal names (commas only as thousands separators), else None. Numbers are
    compared exactly, as decimals: ``math.isclose`` let 1000000000999 pass for 1000000000000 (and, once the reply
    said 1000000000999.0, still did), and its absolute tolerance paid 0 for 1e-10."""
    # ASCII only: Decimal() also reads look-alike digits (fullwidth, Arabic-Indic, math bold), which would let a
    # reply in spoofed digits be paid here while math-verify, the reference, rejects it (skyrl-gym audit).
    text = without_thousands_commas(text)
    if not text.isascii() or "," in text or "_" in text:
        return None
    try:
        value = Decimal(text)  # "1e999999999" is cheap as a Decimal; as a Fraction or int it is not
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


# Helpers start on demand (a single-threaded caller only ever starts one); several, so a check that times out holds
# one helper, not every caller's math reward (a serve-env client running that many hard checks at once still makes
# the others wait; docs/security.md).
_helper = HelperPool(DEFAULT_SIZE, preload=("math_verify",))


@functools.lru_cache(maxsize=None)
def _require_math_verify() -> None:
    """Once a process: a lookup of the package took 42 us, half a helper's round trip (a missing one raises each
    call: lru_cache keeps no exception)."""
    if importlib.util.find_spec("math_verify") is None:
        raise ImportError("the math reward needs the math-verify package: pip install math-verify")

def _percentage(text: str) -> Optional[Decimal]:
    """The number of a plain percentage (``12.5\\%``, ``12.5%``, ``12.5 percent``), else None."""
    body = text.rstrip()
    for mark in ("\\%", "%", "percent"):
        if body.endswith(mark):
            return _as_number(body[: -len(mark)])
    return None


def _as_latex_value(text: str) -> str:
    """``text`` as math-verify reads what it means: a whole answer in scientific notation (``1.6e-19``) as a power
    of ten, a repeating decimal (``0.1\\overline{6}``) as the fraction it is; other text as it is. The value is
    the same, so no reply is paid for more than it says."""
    number = _as_number(text)
    if number is not None and "e" in text.lower():
        mantissa, _, power = without_thousands_commas(text).strip().lower().partition("e")
        sign = "-" if power.startswith("-") else ""
        digits = power.lstrip("+-").lstrip("0") or "0"  # Decimal reads "1e0005"; int() refuses past 4,300 digits
        if len(digits) <= 4 and int(digits) <= _LARGEST_POWER:
            return f"{mantissa} \\times 10^{{{sign}{digits}}}"
        return text
    # spaces kept: "1 2.\\overline{3}" is two numbers (read as 12.333... it was paid for 37/3), not a repeating decimal
    whole = _REPEATING.fullmatch(text)
    if whole is not None and len(text) <= MAX_ANSWER_CHARS:  # within int()'s 4,300 digits
        sign, integer, fixed, repeated = whole.groups()
        # 0.1(6) = (16 - 1) / 90: the digits through one period, less those before it, over 9s then 0s
        numerator = int(integer + fixed + repeated) - int(integer + fixed or "0")
        denominator = int("9" * len(repeated) + "0" * len(fixed))
        return f"{sign}\\frac{{{numerator}}}{{{denominator}}}"
    return text


def math_equal(prediction: str, gold: str, timeout: float = DEFAULT_TIMEOUT_S) -> MathVerdict:
    """Whether ``prediction`` and ``gold`` are the same mathematical answer (``0.5`` and ``\\frac{1}{2}``)."""
    prediction, gold = str(prediction).strip(), str(gold).strip()
    if len(prediction) > MAX_ANSWER_CHARS:
        return MathVerdict(False, "too long")
    # Every reader below judges the whole answer, never a part it picks. Dollar signs go first (as a currency sign
    # or math-mode delimiters they change no value): Minerva's normaliser keeps the first $...$ span while
    # math-verify read the last value of "$19$ 18", so that one reply was paid for a ground truth of 19 and of 18.
    prediction = prediction.replace("\\$", "").replace("$", "").strip()
    # LaTeX's thin space between groups of three digits is a thousands separator (1\,000), which math-verify reads
    # as nothing it knows: 1\,000 was not paid for 1000
    prediction, gold = (_THIN_SPACE_THOUSANDS.sub("", text) for text in (prediction, gold))
    if not prediction:
        return MathVerdict(False, "empty answer")
    if _BOX.search(prediction):  # the normaliser unwraps it, math-verify reads it alone: "-\boxed{5}" was paid for 5 and -5
        return MathVerdict(False, "a box inside the answer")
    # The normaliser also keeps only what follows the last "=": "18 \\text{ or } x = 19" read as 19. math-verify
    # reads an equation whole ("x = 19" is 19; the "or" is no answer), so an answer with "=" goes to it, as does one
    # whose normalising could change its value (_VALUE_CHANGING, or digits it joins).
    normalised_whole = (not _VALUE_CHANGING.search(prediction) and not _VALUE_CHANGING.search(gold)
                        and _normalises_to_its_own_digits(prediction) and _normalises_to_its_own_digits(gold)
                        and normalize_final_answer(prediction) == normalize_final_answer(gold))
    if prediction == gold or normalised_whole:
        return MathVerdict(True, "string")
    prediction_number, gold_number = _as_number(prediction), _as_number(gold)
    if prediction_number is not None and gold_number is not None:
        equal = prediction_number == gold_number
        return MathVerdict(equal, "numeric" if equal else "numeric: not the same number as the ground truth")
    # A percentage for a plain number, either way round, is paid where the numbers are one: math-verify pays 50\%
    # for 50 (and for 0.5, which it decides below) but not 12.5\% for 12.5 (its rule is for integers alone)
    predicted_percent, gold_percent = _percentage(prediction), _percentage(gold)
    if ((predicted_percent is not None and predicted_percent == gold_number)
            or (gold_percent is not None and gold_percent == prediction_number)):
        return MathVerdict(True, "numeric: a percentage of the same number")
    _require_math_verify()
    prediction, gold = _as_latex_value(prediction), _as_latex_value(gold)
    try:
        equal, reason = _helper.call(_math_worker.verify, prediction, gold, timeout=timeout)
    except HelperTimeout:
        return MathVerdict(False, "timeout")
    except HelperDied as exc:
        return MathVerdict(False, f"error: math-verify helper died ({exc})")
    return MathVerdict(bool(equal), str(reason))


def compute_math_score(solution_str: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT_S) -> Dict[str, Any]:
    """Score the last boxed answer of ``solution_str``: ``{"score": 1.0 | 0.0, "pred": ..., "reason": ...}``."""
    prediction = last_boxed_content(solution_str)
    if prediction is None:
        return {"score": 0.0, "pred": None, "reason": "no \\boxed{} answer"}
    verdict = math_equal(prediction, ground_truth, timeout=timeout)
    return {"score": 1.0 if verdict.equal else 0.0, "pred": prediction, "reason": verdict.reason}
