"""Blackjack against a dealer who draws to 17, from a deck shuffled by the row's seed."""

from __future__ import annotations

import random
from typing import Any, Dict, List

from skygym_contrib.games.base import GameEnv, InvalidMove, Outcome

RANKS = ["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"]


def hand_value(cards: List[str]) -> int:
    total = sum(11 if c == "A" else 10 if c in "JQK" or c == "10" else int(c) for c in cards)
    aces = cards.count("A")
    while total > 21 and aces:
        total, aces = total - 10, aces - 1
    return total


class BlackjackEnv(GameEnv):
    """Blackjack, hit or stand against a dealer drawing to 17: 1.0 win, 0.5 push, 0.0 loss."""

    game_id = "games/blackjack"
    default_max_turns = 10
    move_hint = "<move>hit</move> or <move>stand</move>"

    @classmethod
    def generate(cls, rng: random.Random, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has no settings, got {sorted(settings)}")
        return {"seed": rng.randrange(2**31)}

    def setup(self, params: Dict[str, Any]) -> None:
        self.deck = RANKS * 4
        random.Random(int(params["seed"])).shuffle(self.deck)
        self.player = [self.deck.pop(), self.deck.pop()]
        self.dealer = [self.deck.pop(), self.deck.pop()]

    def rules(self) -> str:
        return ("Let's play blackjack. Get closer to 21 than the dealer without going over. Aces count 1 or 11, "
                "J Q K count 10. Each turn send <move>hit</move> (take a card) or <move>stand</move> (the dealer then "
                "draws until 17 or more). A win scores 1.0, a push 0.5, a loss 0.0.")

    def render(self) -> str:
        return (f"Your hand: {' '.join(self.player)} (total {hand_value(self.player)}). "
                f"Dealer shows: {self.dealer[0]}.")

    def play(self, move: str) -> Outcome:
        choice = move.strip().lower()
        if choice == "hit":
            self.player.append(self.deck.pop())
            total = hand_value(self.player)
            if total > 21:
                return Outcome(0.0, True, f"You drew {self.player[-1]}: {total}, bust.", reason=f"bust with {total}")
            if total == 21:
                return self._stand()
            return Outcome(0.0, False, f"You drew {self.player[-1]}.",
                           reason="the hand goes on; rewards come at the end")
        if choice == "stand":
            return self._stand()
        raise InvalidMove(f"{move!r} is not a blackjack move; send <move>hit</move> or <move>stand</move>.")

    def _stand(self) -> Outcome:
        while hand_value(self.dealer) < 17:
            self.dealer.append(self.deck.pop())
        mine, theirs = hand_value(self.player), hand_value(self.dealer)
        text = f"You {mine}, dealer {' '.join(self.dealer)} = {theirs}."
        if theirs > 21 or mine > theirs:
            return Outcome(1.0, True, text + " You win.")
        if mine == theirs:
            return Outcome(0.5, True, text + " Push.")
        return Outcome(0.0, True, text + " Dealer wins.", reason=f"lost: {mine} against the dealer's {theirs}")
