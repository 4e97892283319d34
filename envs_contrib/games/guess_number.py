"""Guess a secret number with higher/lower hints."""

from __future__ import annotations

import itertools
import random
from typing import Any, Dict, List, Optional

from skygym_contrib.games.base import GameEnv, InvalidMove, Outcome, setting


POOL_MAX = 10_000  # up to here the secrets are split as a list; above, by a hash of each drawn one


class GuessNumberEnv(GameEnv):
    """Find a secret number 1-100 from higher/lower hints in 7 guesses: 1.0 when found."""

    game_id = "games/guess_number"
    default_max_turns = 7
    move_hint = "<move>N</move> with a whole number"

    @classmethod
    def generate(cls, rng: random.Random, high: int = 100, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has one setting, high, got {sorted(settings)}")
        high = setting(cls.game_id, "high", high, 2, 10**9)
        return {"secret": rng.randint(1, high), "high": high}

    @classmethod
    def pool(cls, high: int = 100, **settings: Any) -> Optional[List[Dict[str, Any]]]:
        high = setting(cls.game_id, "high", high, 2, 10**9)
        return [{"secret": secret, "high": high} for secret in range(1, high + 1)] if high <= POOL_MAX else None

    @classmethod
    def winning_move(cls, params: Dict[str, Any]) -> Optional[str]:
        return str(params["secret"])

    @classmethod
    def wrong_moves(cls, params: Dict[str, Any], count: int) -> List[str]:
        secret, high = int(params["secret"]), int(params["high"])
        near = (secret + step * sign for step in range(1, high + 1) for sign in (1, -1))
        return [str(guess) for guess in itertools.islice((g for g in near if 1 <= g <= high), count)]

    def setup(self, params: Dict[str, Any]) -> None:
        self.secret, self.high = int(params["secret"]), int(params["high"])
        self.low_bound, self.high_bound = 1, self.high

    def rules(self) -> str:
        return (f"I am thinking of a whole number from 1 to {self.high}. Guess it as <move>N</move>; after each guess "
                "I say whether the number is higher or lower. Finding it scores 1.0.")

    def render(self) -> str:
        return f"The number is between {self.low_bound} and {self.high_bound}."

    def play(self, move: str) -> Outcome:
        text = move.strip()
        if not text.lstrip("-").isdigit():
            raise InvalidMove(f"{move!r} is not a whole number; send e.g. <move>50</move>.")
        guess = int(text)
        if not 1 <= guess <= self.high:
            raise InvalidMove(f"{guess} is outside 1-{self.high}.")
        if guess == self.secret:
            return Outcome(1.0, True, f"{guess} is right.")
        if guess < self.secret:
            self.low_bound = max(self.low_bound, guess + 1)
            return Outcome(0.0, False, f"{guess}: higher.", reason=f"{guess} is too low")
        self.high_bound = min(self.high_bound, guess - 1)
        return Outcome(0.0, False, f"{guess}: lower.", reason=f"{guess} is too high")
