"""The audit profile of ``humaneval`` (``skyrl-gym audit humaneval``): the code hacks on HumanEval problems,
whose canonical solutions are the golden positives."""

from __future__ import annotations

from typing import Any, Dict, List

from skyrl_gym.audit.library import fenced
from skyrl_gym.audit.profiles import AuditProfile, code_profile


def golden_rows(size: int, seed: int) -> List[Dict[str, Any]]:
    """The first ``size`` problems, each with its canonical solution as ``extra_info.reference_action``."""
    from skyrl_gym.envs.humaneval.dataset import load_problems, problem_to_row

    rows = []
    for problem in list(load_problems().values())[:size]:
        row = problem_to_row(problem)
        row["extra_info"]["reference_action"] = fenced(problem["prompt"] + problem["canonical_solution"])
        rows.append(row)
    return rows


def audit_profile(env_id: str) -> AuditProfile:
    return code_profile(rows=golden_rows, env_config=lambda: {"timeout": 3})
