"""Hangman: find a word one letter at a time, six misses allowed."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional

from skygym_contrib.games.base import GameEnv, InvalidMove, Outcome
from skygym_contrib.games.wordle import WORDS

MAX_MISSES = 6
LETTER_BONUS = 0.05  # per newly revealed position


class HangmanEnv(GameEnv):
    """Hangman with six misses: 1.0 for the whole word, 0.05 per letter revealed on the way."""

    game_id = "games/hangman"
    default_max_turns = 26
    move_hint = "<move>L</move> with one letter"

    @classmethod
    def generate(cls, rng: random.Random, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has no settings, got {sorted(settings)}")
        return {"secret": rng.choice(WORDS)}

    @classmethod
    def pool(cls, **settings: Any) -> Optional[List[Dict[str, Any]]]:
        return [{"secret": secret} for secret in WORDS]

    def setup(self, params: Dict[str, Any]) -> None:
        self.secret = str(params["secret"]).lower()
        if not self.secret.isalpha():
            raise ValueError("the secret must be a word of letters")
        self.guessed: set = set()
        self.misses = 0

    def rules(self) -> str:
        return (f"Let's play hangman. Find the hidden word by guessing one letter per turn as <move>L</move>. "
                f"{MAX_MISSES} wrong letters and you lose. The whole word scores 1.0; each revealed letter 0.05.")

    def render(self) -> str:
        shown = " ".join(c if c in self.guessed else "_" for c in self.secret)
        tried = ", ".join(sorted(self.guessed)) or "none"
        return f"Word: {shown}\nLetters tried: {tried}. Misses left: {MAX_MISSES - self.misses}."

    def play(self, move: str) -> Outcome:
        letter = move.strip().lower()
        if len(letter) != 1 or not letter.isascii() or not letter.isalpha():
            raise InvalidMove(f"{move!r} is not one letter; send e.g. <move>e</move>.")
        if letter in self.guessed:
            raise InvalidMove(f"{letter!r} was tried already; pick another letter.")
        self.guessed.add(letter)
        hits = self.secret.count(letter)
        if hits == 0:
            self.misses += 1
            if self.misses >= MAX_MISSES:
                return Outcome(0.0, True, f"No {letter!r}. Out of misses; the word was {self.secret!r}.",
                               reason=f"lost: {MAX_MISSES} misses; the word was {self.secret!r}")
            return Outcome(0.0, False, f"No {letter!r}.", reason=f"{letter!r} is not in the word")
        if all(c in self.guessed for c in self.secret):
            return Outcome(1.0, True, f"You found {self.secret!r}.")
        return Outcome(LETTER_BONUS * hits, False, f"{letter!r} appears {hits} time(s).")
