"""2048 on a 4x4 board: slide and merge tiles up to a target tile."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Tuple

from skygym_contrib.games.base import GameEnv, InvalidMove, Outcome, setting

DIRECTIONS = ("up", "down", "left", "right")


def slide_row_left(row: List[int]) -> Tuple[List[int], int]:
    """One row slid left: the new row and the value of the tiles merged."""
    tiles = [v for v in row if v]
    out: List[int] = []
    merged = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] * 2)
            merged += tiles[i] * 2
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(row) - len(out)), merged


def slide(board: List[List[int]], direction: str) -> Tuple[List[List[int]], int]:
    n = len(board)
    if direction in ("left", "right"):
        rows = [row[::-1] if direction == "right" else row[:] for row in board]
    else:
        rows = [[board[r][c] for r in range(n)] for c in range(n)]
        rows = [row[::-1] for row in rows] if direction == "down" else rows
    slid, merged = zip(*(slide_row_left(row) for row in rows))
    slid = [list(row) for row in slid]
    if direction == "right":
        return [row[::-1] for row in slid], sum(merged)
    if direction == "left":
        return slid, sum(merged)
    cols = [row[::-1] for row in slid] if direction == "down" else slid
    return [[cols[c][r] for c in range(n)] for r in range(n)], sum(merged)


class Game2048Env(GameEnv):
    """2048 to a target tile (64 by default): 1.0 on reaching it, merged value / 1000 per move."""

    game_id = "games/2048"
    default_max_turns = 60
    move_hint = "<move>up</move>, <move>down</move>, <move>left</move> or <move>right</move>"

    @classmethod
    def generate(cls, rng: random.Random, target: int = 64, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has one setting, target, got {sorted(settings)}")
        return {"seed": rng.randrange(2**31), "target": setting(cls.game_id, "target", target, 4, 2**17)}

    def setup(self, params: Dict[str, Any]) -> None:
        self.rng = random.Random(int(params["seed"]))
        self.target = int(params["target"])
        self.board = [[0] * 4 for _ in range(4)]
        self._spawn()
        self._spawn()

    def _spawn(self) -> None:
        empty = [(r, c) for r in range(4) for c in range(4) if not self.board[r][c]]
        r, c = self.rng.choice(empty)
        self.board[r][c] = 4 if self.rng.random() < 0.1 else 2

    def rules(self) -> str:
        return (f"Let's play 2048. Slide all tiles up, down, left or right; two equal tiles that meet merge into their "
                f"sum, and a new 2 (sometimes 4) appears. Reach a {self.target} tile. Send {self.move_hint}. Each move "
                f"scores the merged value / 1000; reaching {self.target} scores 1.0.")

    def render(self) -> str:
        return "Board:\n" + "\n".join(" ".join(f"{v or '.':>4}" for v in row) for row in self.board)

    def play(self, move: str) -> Outcome:
        direction = move.strip().lower()
        if direction not in DIRECTIONS:
            raise InvalidMove(f"{move!r} is not a direction; send one of {', '.join(DIRECTIONS)}.")
        board, merged = slide(self.board, direction)
        if board == self.board:
            raise InvalidMove(f"sliding {direction} moves no tile; try another direction.")
        self.board = board
        if max(map(max, board)) >= self.target:
            return Outcome(1.0, True, f"You made {self.target}.")
        self._spawn()
        if all(slide(self.board, d)[0] == self.board for d in DIRECTIONS):
            return Outcome(merged / 1000, True, "No move is left.", reason="lost: no move is left")
        return Outcome(merged / 1000, False, f"Slid {direction}.", reason="no tiles merged")
