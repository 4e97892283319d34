"""SkyRL-gym's import path for the AIME scorer."""

from __future__ import annotations

from typing import Any, Dict

from skyrl_gym.rewards.boxed import last_boxed_only_string, remove_boxed  # noqa: F401
from skyrl_gym.rewards.normalize import minerva_match, normalize_final_answer  # noqa: F401


def compute_score(solution_str: str, ground_truth: str) -> Dict[str, Any]:
    """``{"score": +1.0 | -1.0, "acc": bool, "pred": normalised prediction}``."""
    correct, prediction = minerva_match(solution_str[-300:], ground_truth)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": prediction}
