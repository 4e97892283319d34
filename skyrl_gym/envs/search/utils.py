"""The ``search`` reward: exact match of the last ``<answer>`` after SQuAD normalisation."""

from __future__ import annotations

from typing import Any, List, Optional, Union

from skyrl_gym.rewards.squad import exact_match, normalize_answer
from skyrl_gym.tools.parsers import extract_tag

__all__ = ["normalize_answer", "em_check", "subem_check", "extract_solution", "targets_of", "compute_score",
           "compute_score_subem"]


def em_check(prediction: str, golden_answers: Union[str, List[str]]) -> int:
    return int(exact_match(prediction, golden_answers))


def subem_check(prediction: str, golden_answers: Union[str, List[str]]) -> int:
    """1 when a normalised target occurs inside the normalised prediction, else 0."""
    targets = [golden_answers] if isinstance(golden_answers, str) else golden_answers
    normalized = normalize_answer(prediction)
    return int(any(normalize_answer(target) in normalized for target in targets))


def extract_solution(solution_str: str) -> Optional[str]:
    """The content of the last ``<answer>...</answer>``, stripped; ``None`` if there is none. (The tag scanner
    finds what ``<answer>(.*?)</answer>`` found, in linear time: the expression searched from every unclosed
    ``<answer>`` to the end, so a final answer followed by 400,000 characters of ``<answer>`` took 134 s.)"""
    return extract_tag(solution_str, "answer")


def targets_of(ground_truth: Any) -> List[str]:
    """The accepted answers: ``{"target": str | [str, ...]}`` (SkyRL-gym rows) or a str / list."""
    target = ground_truth.get("target") if isinstance(ground_truth, dict) else ground_truth
    if isinstance(target, str):
        return [target]
    if isinstance(target, (list, tuple)) or hasattr(target, "tolist"):
        values = target.tolist() if hasattr(target, "tolist") else target
        return [str(v) for v in values]
    raise ValueError(f"search ground_truth must be a string, a list of strings or {{'target': ...}}, got {ground_truth!r}")


def compute_score(solution_str: str, ground_truth: Any, method: str = "strict", format_score: float = 0.0, score: float = 1.0) -> float:
    """``score`` if the last answer matches a target, ``format_score`` if it does not, 0.0 without an answer."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0.0
    return float(score) if exact_match(answer, targets_of(ground_truth)) else float(format_score)


def compute_score_subem(solution_str: str, ground_truth: Any, method: str = "strict", format_score: float = 0.0, score: float = 1.0) -> float:
    """Like :func:`compute_score`, with a substring match (:func:`subem_check`) instead of an exact one."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0.0
    return float(score) if subem_check(answer, targets_of(ground_truth)) else float(format_score)
