"""GSM8K scoring, value-compatible with SkyRL-gym and veRL.

``strict``: the first ``#### N`` in the text; commas and ``$`` are dropped and the result is compared
as a string with the ground truth. ``flexible``: the last number anywhere in the text.
"""

from __future__ import annotations

import re
from typing import Optional

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")


def extract_solution(solution_str: str, method: str = "strict") -> Optional[str]:
    """The answer the model gave, or ``None`` if it gave none in the expected form."""
    if method == "strict":
        match = _STRICT.search(solution_str)
        return None if match is None else match.group(1).replace(",", "").replace("$", "")
    if method == "flexible":
        for candidate in reversed(_NUMBER.findall(solution_str)):
            if candidate not in ("", "."):
                return candidate
        return None
    raise ValueError(f"unknown GSM8K extraction method {method!r}; use 'strict' or 'flexible'")


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` if the extracted answer equals ``ground_truth``, ``format_score`` if an answer was
    given in the right form but is wrong, else 0.0."""
    return score_answer(extract_solution(solution_str, method=method), ground_truth, format_score, score)


def score_answer(answer: Optional[str], ground_truth: str, format_score: float = 0.0, score: float = 1.0) -> float:
    """:func:`compute_score` of an answer already extracted (``None``: none was given)."""
    if answer is None:
        return 0.0
    return float(score) if answer == str(ground_truth) else float(format_score)


def ground_truth_from_reference(answer: str) -> str:
    """The ground truth of a GSM8K reference solution (the number after its ``####``)."""
    extracted = extract_solution(answer, method="strict")
    if extracted is None:
        raise ValueError(f"GSM8K reference solution has no '#### N' line: {answer[-80:]!r}")
    return extracted
