"""Minerva-style normalisation of final answers (Lewkowycz et al., 2022, appendix D).

The steps and their order follow the published procedure, so that normalised answers (and hence
rewards) agree with SkyRL-gym's ``aime`` env and veRL's DAPO math scorer.
"""

from __future__ import annotations

import re
from typing import Optional

# Literal replacements, applied in order.
_REPLACEMENTS = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (r"\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)

# Units, words and spacing commands deleted outright, in order.
_DELETIONS = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
    "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
    "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;",
    r",\!", "{,}", '"', "\\dots",
)

_REWRITES = (
    (re.compile(r"(.*?)(\$)(.*?)(\$)(.*)"), "$\\3$"),  # keep only the first $...$ span
    (re.compile(r"(\\text\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\textbf\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\overline\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\boxed\{)(.*)(\})"), "\\2"),
    (re.compile(r"(frac)([^{])(.)"), "frac{\\2}{\\3}"),  # \fracab -> \frac{a}{b}
    (re.compile(r"(sqrt)([^{])"), "sqrt{\\2}"),  # \sqrta -> \sqrt{a}
)

_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n<]+)")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?")


def without_thousands_commas(number: str) -> str:
    """``number`` without its commas where they group its digits in thousands (``1,000,000``), else unchanged:
    ``1,7`` is a list of two values or a decimal comma, not 17."""
    return number.replace(",", "") if _THOUSANDS.fullmatch(number.strip()) else number


def normalize_final_answer(answer: str) -> str:
    """Normalise a final answer so that equivalent writings compare equal as strings."""
    answer = answer.split("=")[-1]
    for before, after in _REPLACEMENTS:
        answer = answer.replace(before, after)
    for word in _DELETIONS:
        answer = answer.replace(word, "")
    for pattern, replacement in _REWRITES:
        answer = pattern.sub(replacement, answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


def extract_answer_line(text: str) -> Optional[str]:
    """The text after the last ``Answer:`` (up to a newline or ``<``), or ``None``."""
    matches = _ANSWER_LINE.findall(text)
    return matches[-1] if matches else None


def minerva_match(solution_str: str, ground_truth: str) -> tuple[bool, str]:
    """Whether the ``Answer:`` line of the solution matches the ground truth after normalisation,
    and the normalised prediction (``"[INVALID]"`` when there is no answer line)."""
    extracted = extract_answer_line(solution_str)
    prediction = normalize_final_answer(extracted if extracted is not None else "[INVALID]")
    return prediction == normalize_final_answer(ground_truth), prediction
