"""Tic-tac-toe against a perfect (minimax) or a random opponent."""

from __future__ import annotations

import functools
import random
from typing import Any, Dict, Optional

from skygym_contrib.games.base import GameEnv, InvalidMove, Outcome

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
WIN, DRAW = 1.0, 0.5


def winner(board: str) -> Optional[str]:
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


@functools.lru_cache(maxsize=None)
def minimax(board: str, player: str) -> int:
    """Value of ``board`` for O with ``player`` to move: +1 O wins, 0 draw, -1 X wins (perfect play)."""
    found = winner(board)
    if found:
        return 1 if found == "O" else -1
    if "." not in board:
        return 0
    values = [minimax(board[:i] + player + board[i + 1:], "X" if player == "O" else "O")
              for i, cell in enumerate(board) if cell == "."]
    return max(values) if player == "O" else min(values)


def best_move(board: str) -> int:
    """O's perfect move; ties go to the lowest cell."""
    moves = [i for i, cell in enumerate(board) if cell == "."]
    return max(moves, key=lambda i: (minimax(board[:i] + "O" + board[i + 1:], "X"), -i))


class TicTacToeEnv(GameEnv):
    """Tic-tac-toe as X against a perfect minimax O: 1.0 win, 0.5 draw, cells 1-9 in <move>."""

    game_id = "games/tictactoe"
    default_max_turns = 9
    move_hint = "<move>N</move> with N the cell number 1-9"
    opponent = "minimax"

    @classmethod
    def generate(cls, rng: random.Random, **settings: Any) -> Dict[str, Any]:
        if settings:
            raise TypeError(f"{cls.game_id} has no settings, got {sorted(settings)}")
        return {"opponent_first": rng.random() < 0.5, "seed": rng.randrange(2**31)}

    def setup(self, params: Dict[str, Any]) -> None:
        self.rng = random.Random(int(params["seed"]))
        self.board = "........."
        self.opponent_first = bool(params["opponent_first"])
        if self.opponent_first:
            self._opponent_moves()

    def _opponent_moves(self) -> int:
        if self.opponent == "minimax":
            cell = best_move(self.board)
        else:
            cell = self.rng.choice([i for i, c in enumerate(self.board) if c == "."])
        self.board = self.board[:cell] + "O" + self.board[cell + 1:]
        return cell

    def rules(self) -> str:
        who = "a perfect player" if self.opponent == "minimax" else "a player who moves at random"
        return (f"Let's play tic-tac-toe. You are X, your opponent O is {who}. Cells are numbered 1-9, left to right, "
                "top to bottom. Each turn, give the cell you take as <move>N</move>. A win scores 1.0, a draw 0.5.")

    def render(self) -> str:
        rows = [" ".join(self.board[r * 3 + c] if self.board[r * 3 + c] != "." else str(r * 3 + c + 1)
                         for c in range(3)) for r in range(3)]
        return "Board:\n" + "\n".join(rows)

    def play(self, move: str) -> Outcome:
        if not move.strip().isdigit() or not 1 <= int(move) <= 9:
            raise InvalidMove(f"{move!r} is not a cell: send a number 1-9, e.g. <move>5</move>.")
        cell = int(move) - 1
        if self.board[cell] != ".":
            raise InvalidMove(f"cell {cell + 1} is taken by {self.board[cell]}; pick a free cell.")
        self.board = self.board[:cell] + "X" + self.board[cell + 1:]
        if winner(self.board) == "X":
            return Outcome(WIN, True, "You win.")
        if "." not in self.board:
            return Outcome(DRAW, True, "Draw.")
        reply = self._opponent_moves()
        if winner(self.board) == "O":
            return Outcome(0.0, True, f"O takes {reply + 1} and wins.", reason=f"lost: O took cell {reply + 1} and won")
        if "." not in self.board:
            return Outcome(DRAW, True, f"O takes {reply + 1}. Draw.")
        return Outcome(0.0, False, f"O takes cell {reply + 1}.", reason="the game goes on; rewards come at the end")


class RandomTicTacToeEnv(TicTacToeEnv):
    """Tic-tac-toe as X against an O that moves at random (seeded): 1.0 win, 0.5 draw."""

    game_id = "games/tictactoe_random"
    opponent = "random"
