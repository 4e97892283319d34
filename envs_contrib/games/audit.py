"""The audit profile of the ``games/*`` envs (``skyrl-gym audit games/nim``): moves go in
``<move>...</move>``; a row's winning move, where the game has one, is the golden answer and the answer the
hacks hide among others (several moves in one reply, move spam). The known-wrong replies and the moves the
hedges hide it among are legal moves that do not win (the game's ``wrong_moves``), so the audit plays how the
game scores legal play, not only how it refuses a move; a game with no winning move gets an invalid one."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

from skyrl_gym.audit.library import AnswerFormat
from skyrl_gym.audit.profiles import AuditProfile, reference_action, text_profile
from skyrl_gym.registration import load_env_creator, spec
from skyrl_gym.tools.parsers import extract_tag

MOVE = AnswerFormat("<move>", lambda move: f"<move>{move}</move>", "<move></move>")


def winning_move(row: Mapping[str, Any]) -> Optional[str]:
    reference = reference_action(row)
    return extract_tag(reference, "move") if reference else None


def audit_profile(env_id: str) -> AuditProfile:
    game = load_env_creator(spec(env_id).entry_point, env_id=env_id)  # a game registered under another id too

    def wrong_moves(row: Mapping[str, Any], count: int) -> List[str]:
        if not hasattr(game, "wrong_moves"):  # a class that is no GameEnv: the audit's own wrong answers
            return []
        return game.wrong_moves(dict(row["reward_spec"]["ground_truth"]), count)

    return text_profile(MOVE, answer_of=winning_move, wrong_answers_of=wrong_moves)
