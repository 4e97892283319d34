"""Wordle: find a five-letter word in six guesses."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional

from skygym_contrib.games.base import GameEnv, InvalidMove, Outcome

WORDS = (
    "apple beach brain bread chair chess cloud crane dance dream earth eagle field flame fruit ghost glass grape "
    "heart horse house juice knife lemon light money mouse music night ocean paper party piano plant queen radio "
    "river robot salad sheep shirt smile snake sound space spoon stone storm sugar table tiger toast tower train "
    "truck water whale world zebra"
).split()
# Per green letter of a wrong guess beyond the most greens of any earlier guess: a guess repeated, or one no better,
# earns nothing (an attacker's pass: five near misses, then the word, earned 1.4 where the word at once earned 1.0).
# The word earns what takes the episode's return to 1.0, so however it was reached, finding it is worth 1.0.
GREEN_BONUS = 0.02


def feedback(guess: str, secret: str) -> str:
    """G right letter right place, Y in the word elsewhere, _ not (repeated letters counted as in Wordle)."""
    marks = ["_"] * 5
    left: Dict[str, int] = {}
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            marks[i] = "G"
        else:
            left[s] = left.get(s, 0) + 1
    for i, g in enumerate(guess):
        if marks[i] != "G" and left.get(g, 0) > 0:
            marks[i] = "Y"
            left[g] -= 1
    return "".join(marks)


class WordleEnv(GameEnv):
    """Wordle in six guesses: 1.0 in all for the word, 0.02 per new best green letter of a wrong guess."""

    game_id = "games/wordle"
    default_max_turns = 6
    move_hint = "<move>WORD</move> with a five-letter word"

    @classmethod
    def generate(cls, rng: random.Random, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has no settings, got {sorted(settings)}")
        return {"secret": rng.choice(WORDS)}

    @classmethod
    def pool(cls, **settings: Any) -> Optional[List[Dict[str, Any]]]:
        return [{"secret": secret} for secret in WORDS]

    @classmethod
    def winning_move(cls, params: Dict[str, Any]) -> Optional[str]:
        return str(params["secret"])

    @classmethod
    def wrong_moves(cls, params: Dict[str, Any], count: int) -> List[str]:
        others = [word for word in WORDS if word != str(params["secret"]).lower()]
        return others[:count]

    def setup(self, params: Dict[str, Any]) -> None:
        self.secret = str(params["secret"]).lower()
        if len(self.secret) != 5 or not self.secret.isalpha():
            raise ValueError("the secret must be a five-letter word")
        self.history: list = []
        self.best_greens = 0  # the most green letters of any guess so far

    def rules(self) -> str:
        return ("Let's play Wordle. Guess the secret five-letter English word in 6 tries. After each guess you get "
                "one mark per letter: G (right letter, right place), Y (in the word, elsewhere), _ (not in the word). "
                "Give each guess as <move>WORD</move>. Finding the word scores 1.0 in all; a wrong guess scores "
                "0.02 for each green letter more than any earlier guess had.")

    def render(self) -> str:
        if not self.history:
            return "No guesses yet. 6 left."
        lines = [f"{guess.upper()}  {marks}" for guess, marks in self.history]
        return "Guesses:\n" + "\n".join(lines) + f"\n{6 - len(self.history)} left."

    def play(self, move: str) -> Outcome:
        guess = move.strip().lower()
        if len(guess) != 5 or not guess.isascii() or not guess.isalpha():
            raise InvalidMove(f"{move!r} is not a five-letter word; send e.g. <move>CRANE</move>.")
        marks = feedback(guess, self.secret)
        self.history.append((guess, marks))
        paid = GREEN_BONUS * self.best_greens  # what the earlier guesses earned
        if guess == self.secret:
            return Outcome(round(1.0 - paid, 10), True, f"{guess.upper()} is the word.")
        greens = marks.count("G")
        bonus = GREEN_BONUS * max(0, greens - self.best_greens)
        self.best_greens = max(self.best_greens, greens)
        if len(self.history) >= 6:
            return Outcome(bonus, True, f"Out of guesses; the word was {self.secret.upper()}.",
                           reason=f"out of guesses; the word was {self.secret!r}")
        return Outcome(bonus, False, f"{guess.upper()}: {marks}",
                       reason=f"{guess!r} is not the word and has no green letter" if not greens
                       else f"{guess!r} is not the word and has no more green letters than an earlier guess")
