"""Nim against an opponent who plays the perfect (nim-sum) strategy."""

from __future__ import annotations

import functools
import operator
import random
import re
from typing import Any, Dict, List

from skygym_contrib.games.base import GENERATE_TRIES, GameEnv, InvalidMove, Outcome, no_game, setting

MOVE_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s*$")


class NimEnv(GameEnv):
    """Nim (take the last object to win) against a perfect opponent; every game can be won: 1.0 for a win."""

    game_id = "games/nim"
    default_max_turns = 30
    move_hint = "<move>HEAP COUNT</move>, e.g. <move>2 3</move> takes 3 from heap 2"

    @classmethod
    def generate(cls, rng: random.Random, heaps: int = 3, max_size: int = 7, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has settings heaps and max_size, got {sorted(settings)}")
        heaps = setting(cls.game_id, "heaps", heaps, 1, 20)
        max_size = setting(cls.game_id, "max_size", max_size, 1, 1000)
        for _ in range(GENERATE_TRIES):  # a winning position for the first player: non-zero nim-sum
            sizes = [rng.randint(1, max_size) for _ in range(heaps)]
            if functools.reduce(operator.xor, sizes):
                return {"heaps": sizes}
        raise no_game(cls.game_id, {"heaps": heaps, "max_size": max_size})  # two heaps of at most 1: always 0

    def setup(self, params: Dict[str, Any]) -> None:
        self.heaps: List[int] = [int(h) for h in params["heaps"]]
        if not self.heaps or min(self.heaps) < 0:
            raise ValueError("heaps must be non-negative sizes")

    def rules(self) -> str:
        return ("Let's play Nim. Players take turns removing one or more objects from a single heap; whoever takes "
                "the last object wins. You move first. Send <move>HEAP COUNT</move>, e.g. <move>2 3</move> removes 3 "
                "from heap 2. A win scores 1.0.")

    def render(self) -> str:
        return "Heaps: " + ", ".join(f"{i + 1}: {size}" for i, size in enumerate(self.heaps))

    def _opponent(self) -> str:
        nim_sum = functools.reduce(operator.xor, self.heaps)
        if nim_sum:
            for i, size in enumerate(self.heaps):
                if size ^ nim_sum < size:
                    take = size - (size ^ nim_sum)
                    break
        else:  # losing position: take one from the largest heap
            i = max(range(len(self.heaps)), key=lambda k: self.heaps[k])
            take = 1
        self.heaps[i] -= take
        return f"Opponent takes {take} from heap {i + 1}."

    def play(self, move: str) -> Outcome:
        match = MOVE_RE.match(move)
        if not match:
            raise InvalidMove(f"{move!r} is not HEAP COUNT; send e.g. <move>1 2</move>.")
        heap, count = int(match.group(1)), int(match.group(2))
        if not 1 <= heap <= len(self.heaps):
            raise InvalidMove(f"there is no heap {heap}; heaps are 1-{len(self.heaps)}.")
        if not 1 <= count <= self.heaps[heap - 1]:
            raise InvalidMove(f"heap {heap} has {self.heaps[heap - 1]}; take 1 to {self.heaps[heap - 1]}.")
        self.heaps[heap - 1] -= count
        if not any(self.heaps):
            return Outcome(1.0, True, "You took the last object and win.")
        reply = self._opponent()
        if not any(self.heaps):
            return Outcome(0.0, True, reply + " It took the last object and wins.",
                           reason="lost: the opponent took the last object")
        return Outcome(0.0, False, reply, reason="the game goes on; rewards come at the end")
