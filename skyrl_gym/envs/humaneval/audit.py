"""The audit profile of ``humaneval`` (``skyrl-gym audit humaneval``): the code hacks on HumanEval problems,
whose canonical solutions (each row's ``extra_info.reference_action``) are the golden positives."""

from __future__ import annotations

from typing import Any, Dict, List

from skyrl_gym.audit.profiles import AuditProfile, code_profile


def golden_rows(size: int, seed: int) -> List[Dict[str, Any]]:
    """The first ``size`` problems."""
    from skyrl_gym.envs.humaneval.dataset import make_rows

    return make_rows(size)


def audit_profile(env_id: str) -> AuditProfile:
    return code_profile(rows=golden_rows, env_config=lambda: {"timeout": 3})
