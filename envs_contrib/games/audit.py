"""The audit profile of the ``games/*`` envs (``skyrl-gym audit games/nim``): moves go in
``<move>...</move>``; a row's winning move, where the game has one, is the golden answer and the answer the
hacks hide among others (several moves in one reply, move spam). The known-wrong replies are near misses of
the winning move, or an invalid move where the game has none."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from skyrl_gym.audit.library import AnswerFormat
from skyrl_gym.audit.profiles import AuditProfile, reference_action, text_profile
from skyrl_gym.tools.parsers import extract_tag

MOVE = AnswerFormat("<move>", lambda move: f"<move>{move}</move>", "<move></move>")


def winning_move(row: Mapping[str, Any]) -> Optional[str]:
    reference = reference_action(row)
    return extract_tag(reference, "move") if reference else None


def audit_profile(env_id: str) -> AuditProfile:
    return text_profile(MOVE, answer_of=winning_move)
