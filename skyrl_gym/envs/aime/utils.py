"""SkyRL-gym's import path for the AIME scorer."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym.rewards import normalize as _normalize
from skyrl_gym.rewards.boxed import last_boxed_only_string, remove_boxed  # noqa: F401
from skyrl_gym.rewards.normalize import extract_answer_line, minerva_match, normalize_final_answer  # noqa: F401

# SkyRL-gym's names for the normalisation tables (read-only here: normalize_final_answer uses its own copies).
SUBSTITUTIONS = list(_normalize._REPLACEMENTS)
REMOVED_EXPRESSIONS = list(_normalize._DELETIONS)

DEFAULT_ANSWER_PATTERN = r"(?i)Answer\s*:\s*([^\n<]+)"


def is_correct_minerva(
    solution_str: str, gt: str, gt_need_extract: bool = False, answer_pattern: str = DEFAULT_ANSWER_PATTERN
) -> Tuple[bool, str]:
    """``(correct, normalised prediction)``: the last ``Answer:`` line against ``gt`` after normalisation.

    ``gt_need_extract``: ``gt`` is a worked solution whose last ``\\boxed{}`` holds the answer.
    ``answer_pattern``: a regex whose first group is the answer (the default is :func:`minerva_match`'s)."""
    if not gt_need_extract and answer_pattern == DEFAULT_ANSWER_PATTERN:
        return minerva_match(solution_str, gt)
    matches = re.findall(answer_pattern, solution_str)
    prediction = normalize_final_answer(matches[-1] if matches else "[INVALID]")
    if gt_need_extract:
        boxed = last_boxed_only_string(gt)
        gt = remove_boxed(boxed) if boxed is not None else gt
    return prediction == normalize_final_answer(gt), prediction


def is_correct_strict_box(
    pred: str, gt: str, pause_tokens_index: Optional[List[int]] = None
) -> Tuple[int, Optional[str]]:
    """``(1 | -1, boxed content)``: the last ``\\boxed{}`` of the tail of ``pred`` equals ``gt`` exactly.

    The tail is the last 100 characters, or those after ``pause_tokens_index[-1] - 100`` (4 indices)."""
    if pause_tokens_index is not None:
        if len(pause_tokens_index) != 4:
            raise ValueError(f"pause_tokens_index must hold 4 indices, got {pause_tokens_index!r}")
        pred = pred[pause_tokens_index[-1] - 100 :]
    else:
        pred = pred[-100:]
    boxed = last_boxed_only_string(pred)
    extracted = remove_boxed(boxed) if boxed is not None else None
    return (1 if extracted == gt else -1), extracted


def verify(
    solution_str: str, answer: str, strict_box_verify: bool = False, pause_tokens_index: Optional[List[int]] = None
) -> Tuple[bool, Optional[str]]:
    """``(correct, prediction)`` by the strict boxed check or the Minerva ``Answer:`` check."""
    if strict_box_verify:
        score, prediction = is_correct_strict_box(solution_str, answer, pause_tokens_index)
        return score == 1, prediction
    return is_correct_minerva(solution_str, answer)


def compute_score(
    solution_str: str,
    ground_truth: str,
    strict_box_verify: bool = False,
    pause_tokens_index: Optional[List[int]] = None,
) -> Dict[str, Any]:
    """``{"score": +1.0 | -1.0, "acc": bool, "pred": normalised prediction}`` (the last 300 characters count)."""
    correct, prediction = verify(solution_str[-300:], ground_truth, strict_box_verify, pause_tokens_index)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": prediction}
