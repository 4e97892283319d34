"""The audit profile of the ``reasoning_gym/*`` envs (``skyrl-gym audit reasoning_gym/chain_sum``): the answer
and size hacks on the ``<answer>`` block; reasoning-gym's answer is the golden one (datasets checked by rules,
whose rows carry no answer, are audited by their hacks alone)."""

from __future__ import annotations

from skyrl_gym.audit.profiles import ANSWER_TAG, AuditProfile, text_profile


def audit_profile(env_id: str) -> AuditProfile:
    return text_profile(ANSWER_TAG)
