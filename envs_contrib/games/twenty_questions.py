"""Twenty questions with a scripted answerer that knows a fixed set of yes/no properties."""

from __future__ import annotations

import random
import re
from typing import Any, Dict, List, Optional

from skygym_contrib.games.base import GameEnv, InvalidMove, Outcome

# property -> the words a question may use for it
PROPERTIES = {
    "alive": ("alive", "living", "animal or plant"),
    "animal": ("animal",),
    "plant": ("plant",),
    "food": ("food", "eat", "edible"),
    "fly": ("fly", "flies"),
    "water": ("water", "swim", "sea"),
    "machine": ("machine", "electric", "engine"),
    "big": ("big", "bigger than a person", "large"),
    "indoors": ("indoors", "inside", "in a house"),
    "tool": ("tool", "used to make"),
}
THINGS = {
    "dog": {"alive", "animal", "indoors"},
    "eagle": {"alive", "animal", "fly"},
    "shark": {"alive", "animal", "water", "big"},
    "whale": {"alive", "animal", "water", "big"},
    "oak": {"alive", "plant", "big"},
    "apple": {"alive", "plant", "food"},
    "bread": {"food", "indoors"},
    "airplane": {"machine", "fly", "big"},
    "submarine": {"machine", "water", "big"},
    "fridge": {"machine", "indoors", "big"},
    "hammer": {"tool", "indoors"},
    "spoon": {"tool", "indoors", "food"},
    "boat": {"water", "big"},
    "kite": {"fly"},
    "cactus": {"alive", "plant"},
    "laptop": {"machine", "indoors", "tool"},
}
ASK_RE = re.compile(r"^\s*ask\s*:\s*(.+)$", re.IGNORECASE | re.DOTALL)
GUESS_RE = re.compile(r"^\s*guess\s*:\s*(.+)$", re.IGNORECASE | re.DOTALL)
WRONG_GUESS_COST = 0.1
"""What a wrong guess takes off the right one's score (five questions' worth: four questions halve the 16 things
down to one)."""


class TwentyQuestionsEnv(GameEnv):
    """Twenty questions against a scripted answerer: 1.0 - 0.02 per question - 0.1 per wrong guess."""

    game_id = "games/twenty_questions"
    default_max_turns = 20
    move_hint = "<move>ask: is it an animal?</move> or <move>guess: dog</move>"

    @classmethod
    def generate(cls, rng: random.Random, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has no settings, got {sorted(settings)}")
        return {"secret": rng.choice(sorted(THINGS))}

    @classmethod
    def pool(cls, **settings: Any) -> Optional[List[Dict[str, Any]]]:
        return [{"secret": secret} for secret in sorted(THINGS)]

    @classmethod
    def winning_move(cls, params: Dict[str, Any]) -> Optional[str]:
        return f"guess: {params['secret']}"

    @classmethod
    def wrong_moves(cls, params: Dict[str, Any], count: int) -> List[str]:
        return [f"guess: {thing}" for thing in sorted(THINGS) if thing != params["secret"]][:count]

    def setup(self, params: Dict[str, Any]) -> None:
        self.secret = str(params["secret"])
        if self.secret not in THINGS:
            raise ValueError(f"the secret must be one of {sorted(THINGS)}")
        self.questions = self.wrong_guesses = 0
        self.log: list = []

    def rules(self) -> str:
        return ("Let's play twenty questions. I am thinking of one of: " + ", ".join(sorted(THINGS)) + ". Ask yes/no "
                "questions as <move>ask: is it an animal?</move>; I understand questions about whether it is "
                + ", ".join(PROPERTIES) + ". Guess with <move>guess: dog</move>. "
                "You have 20 turns. The right guess scores 1.0 minus 0.02 per question asked and 0.1 per wrong guess.")

    def render(self) -> str:
        return "\n".join(self.log[-5:]) if self.log else "Ask your first question."

    def play(self, move: str) -> Outcome:
        asked, guessed = ASK_RE.match(move), GUESS_RE.match(move)
        if guessed:
            guess = guessed.group(1).strip().lower().rstrip(".!?")
            if guess == self.secret:
                # wrong guesses cost more than questions: naming all 16 things in turn scored 1.0 for every secret
                score = max(0.0, 1.0 - 0.02 * self.questions - WRONG_GUESS_COST * self.wrong_guesses)
                return Outcome(round(score, 10), True, f"Yes, it is {guess}.")
            self.wrong_guesses += 1
            self.log.append(f"guess {guess}: no")
            return Outcome(0.0, False, f"No, it is not {guess}.", reason=f"wrong guess {guess!r}")
        if asked:
            question = asked.group(1).lower()
            found = [name for name, words in PROPERTIES.items() if any(re.search(rf"\b{re.escape(w)}\b", question)
                                                                          for w in words)]
            if len(found) != 1:
                what = "no property I know" if not found else f"several properties at once ({', '.join(found)})"
                raise InvalidMove(f"that question is about {what}; ask about exactly one of: {', '.join(PROPERTIES)}.")
            self.questions += 1
            answer = "yes" if found[0] in THINGS[self.secret] else "no"
            self.log.append(f"{found[0]}? {answer}")
            return Outcome(0.0, False, f"Answer: {answer}.", reason="a question earns nothing by itself")
        raise InvalidMove("a move starts with 'ask:' or 'guess:', e.g. <move>ask: can it fly?</move>.")
