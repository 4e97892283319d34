"""The audit profile of ``lcb`` (``skyrl-gym audit lcb``): the code hacks on the golden cases beside this
module (one stdin problem, one functional problem), whose reference programs are the golden positives."""

from __future__ import annotations

from typing import Any, Dict, List

from skyrl_gym.audit.profiles import AuditProfile, code_profile


def golden_rows(size: int, seed: int) -> List[Dict[str, Any]]:
    from skyrl_gym.checker import golden_rows as shipped

    return shipped("lcb")[0][:size]


def audit_profile(env_id: str) -> AuditProfile:
    return code_profile(rows=golden_rows, env_config=lambda: {"timeout": 3})
