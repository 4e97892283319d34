"""Lights Out: switch every light off; pressing a cell toggles it and its neighbours."""

from __future__ import annotations

import random
from typing import Any, Dict, List

from skygym_contrib.games.base import GENERATE_TRIES, GameEnv, InvalidMove, Outcome, no_game, setting


class LightsOutEnv(GameEnv):
    """Lights Out on a small grid, solvable by construction: 1.0 when every light is off."""

    game_id = "games/lights_out"
    default_max_turns = 15
    move_hint = "<move>R C</move>, row and column from 1"

    @classmethod
    def split_key(cls, params: Dict[str, Any]) -> Any:
        return params["grid"]  # the puzzle; its solution is one order of the presses that made it

    @classmethod
    def generate(cls, rng: random.Random, size: int = 3, presses: int = 3, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has settings size and presses, got {sorted(settings)}")
        size = setting(cls.game_id, "size", size, 2, 9)
        presses = setting(cls.game_id, "presses", presses, 1, size * size)
        for _ in range(GENERATE_TRIES):
            cells = rng.sample([(r, c) for r in range(size) for c in range(size)], presses)
            grid = [[0] * size for _ in range(size)]
            for r, c in cells:
                _toggle(grid, r, c)
            if any(any(row) for row in grid):
                return {"grid": ["".join(map(str, row)) for row in grid],
                        "solution": [[r + 1, c + 1] for r, c in cells]}
        raise no_game(cls.game_id, {"size": size, "presses": presses})

    def setup(self, params: Dict[str, Any]) -> None:
        self.grid: List[List[int]] = [[int(ch) for ch in row] for row in params["grid"]]
        if not self.grid or any(len(row) != len(self.grid) for row in self.grid):
            raise ValueError("the grid must be square")

    def rules(self) -> str:
        n = len(self.grid)
        return (f"Let's play Lights Out on a {n}x{n} grid (1 = on, 0 = off). Pressing a cell toggles it and the cells "
                "above, below, left and right of it. Switch every light off. Send <move>R C</move> (row, column, "
                "from 1). All lights off scores 1.0.")

    def render(self) -> str:
        return "Grid:\n" + "\n".join(" ".join(map(str, row)) for row in self.grid)

    def play(self, move: str) -> Outcome:
        parts = move.split()
        n = len(self.grid)
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise InvalidMove(f"{move!r} is not 'ROW COLUMN'; send e.g. <move>2 3</move>.")
        r, c = int(parts[0]) - 1, int(parts[1]) - 1
        if not (0 <= r < n and 0 <= c < n):
            raise InvalidMove(f"({r + 1}, {c + 1}) is off the {n}x{n} grid.")
        _toggle(self.grid, r, c)
        if not any(any(row) for row in self.grid):
            return Outcome(1.0, True, "All lights are off.")
        on = sum(map(sum, self.grid))
        return Outcome(0.0, False, f"Pressed ({r + 1}, {c + 1}).", reason=f"{on} light(s) still on")


def _toggle(grid: List[List[int]], r: int, c: int) -> None:
    n = len(grid)
    for dr, dc in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)):
        if 0 <= r + dr < n and 0 <= c + dc < n:
            grid[r + dr][c + dc] ^= 1
