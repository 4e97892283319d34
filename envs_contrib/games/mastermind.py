"""Mastermind: find a hidden code from black/white peg feedback."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Tuple

from skygym_contrib.games.base import GameEnv, InvalidMove, Outcome, setting

# Per black peg of a wrong guess beyond the most of any earlier guess: a guess repeated, or one no better, earns
# nothing (an attacker's pass: nine near misses, then the code, earned 1.54 where the code at once earned 1.0). The
# code earns what takes the episode's return to 1.0.
BLACK_BONUS = 0.02


def score(guess: List[int], code: List[int]) -> Tuple[int, int]:
    black = sum(g == c for g, c in zip(guess, code))
    common = sum(min(guess.count(d), code.count(d)) for d in set(guess))
    return black, common - black


class MastermindEnv(GameEnv):
    """Mastermind, a 4-digit code of colours 1-6 in 10 guesses: 1.0 in all for the code, 0.02 per new best black peg."""

    game_id = "games/mastermind"
    default_max_turns = 10
    move_hint = "<move>DDDD</move>, four digits 1-6"

    @classmethod
    def generate(cls, rng: random.Random, length: int = 4, colours: int = 6, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has settings length and colours, got {sorted(settings)}")
        length = setting(cls.game_id, "length", length, 1, 10)
        colours = setting(cls.game_id, "colours", colours, 1, 9)
        return {"code": [rng.randint(1, colours) for _ in range(length)], "colours": colours}

    @classmethod
    def winning_move(cls, params: Dict[str, Any]) -> Optional[str]:
        return "".join(str(int(d)) for d in params["code"])

    @classmethod
    def wrong_moves(cls, params: Dict[str, Any], count: int) -> List[str]:
        """Codes one peg off the hidden one (each earns the bonus of its other black pegs)."""
        code, colours = [int(d) for d in params["code"]], int(params["colours"])
        moves = []
        for at in range(len(code)):
            for colour in range(1, colours + 1):
                if colour != code[at] and len(moves) < count:
                    moves.append("".join(str(d) for d in code[:at] + [colour] + code[at + 1:]))
        return moves

    def setup(self, params: Dict[str, Any]) -> None:
        self.code = [int(d) for d in params["code"]]
        self.colours = int(params["colours"])
        if not 1 <= self.colours <= 9 or not all(1 <= d <= self.colours for d in self.code):
            raise ValueError("code digits must lie in 1..colours, colours at most 9")
        self.history: list = []
        self.best_black = 0  # the most black pegs of any guess so far

    def rules(self) -> str:
        n = len(self.code)
        return (f"Let's play Mastermind. I hide a code of {n} digits, each 1-{self.colours} (repeats allowed). Guess it "
                f"as <move>{'1234'[:n] if n <= 4 else '1' * n}</move>. For each guess you get black pegs (right digit, "
                f"right place) and white pegs (right digit, wrong place). You have {self.max_turns} guesses. "
                "The code scores 1.0 in all; a wrong guess 0.02 for each black peg more than any earlier guess had.")

    def render(self) -> str:
        if not self.history:
            return "No guesses yet."
        return "Guesses:\n" + "\n".join(f"{g}: {b} black, {w} white" for g, b, w in self.history)

    def play(self, move: str) -> Outcome:
        text = move.strip().replace(" ", "")
        if len(text) != len(self.code) or not text.isdigit() or not all(1 <= int(d) <= self.colours for d in text):
            raise InvalidMove(f"{move!r} is not {len(self.code)} digits 1-{self.colours}.")
        guess = [int(d) for d in text]
        black, white = score(guess, self.code)
        self.history.append((text, black, white))
        paid = BLACK_BONUS * self.best_black  # what the earlier guesses earned
        if black == len(self.code):
            return Outcome(round(1.0 - paid, 10), True, f"{text} is the code.")
        bonus = BLACK_BONUS * max(0, black - self.best_black)
        self.best_black = max(self.best_black, black)
        return Outcome(bonus, False, f"{text}: {black} black, {white} white.",
                       reason=f"{text} has no digit in the right place" if not black
                       else f"{text} has no more digits in the right place than an earlier guess")
