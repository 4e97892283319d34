"""Sokoban: push the box onto the goal in a small walled room."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Tuple

from skygym_contrib.games.base import GENERATE_TRIES, GameEnv, InvalidMove, Outcome, no_game, setting

STEPS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
ALIASES = {"u": "up", "d": "down", "l": "left", "r": "right"}
Cell = Tuple[int, int]


class SokobanEnv(GameEnv):
    """Sokoban with one box, solvable by construction: 1.0 when the box is on the goal."""

    game_id = "games/sokoban"
    default_max_turns = 30
    move_hint = "<move>up</move>, <move>down</move>, <move>left</move> or <move>right</move>"

    @classmethod
    def generate(cls, rng: random.Random, size: int = 6, pulls: int = 10, **settings: Any) -> Dict[str, Any]:
        """A room of ``size`` x ``size`` (walls included); the level is made by pulling the box away from the goal
        (reverse play), so it can always be solved."""
        if settings:
            raise TypeError(f"{cls.game_id} has settings size and pulls, got {sorted(settings)}")
        size = setting(cls.game_id, "size", size, 5, 12)
        pulls = setting(cls.game_id, "pulls", pulls, 1, 1000)
        inside = [(r, c) for r in range(1, size - 1) for c in range(1, size - 1)]
        for _ in range(GENERATE_TRIES):
            goal = rng.choice(inside)
            box, player = goal, None
            neighbours = [(goal[0] + dr, goal[1] + dc) for dr, dc in STEPS.values()]
            player = rng.choice([n for n in neighbours if n in inside])
            for _ in range(pulls):
                dr, dc = rng.choice(list(STEPS.values()))
                target = (player[0] + dr, player[1] + dc)
                if target not in inside or target == box:
                    continue
                if box == (player[0] - dr, player[1] - dc):  # the box is behind the player: pull it along
                    box = player
                player = target
            if box != goal:
                rows = ["".join("#" if r in (0, size - 1) or c in (0, size - 1) else "." for c in range(size))
                        for r in range(size)]
                return {"rows": rows, "goal": list(goal), "box": list(box), "player": list(player)}
        raise no_game(cls.game_id, {"size": size, "pulls": pulls})

    def setup(self, params: Dict[str, Any]) -> None:
        self.rows: List[str] = [str(row) for row in params["rows"]]
        self.goal: Cell = tuple(params["goal"])  # type: ignore[assignment]
        self.box: Cell = tuple(params["box"])  # type: ignore[assignment]
        self.player: Cell = tuple(params["player"])  # type: ignore[assignment]
        for cell in (self.goal, self.box, self.player):
            if self._wall(cell):
                raise ValueError(f"{cell} is a wall")

    def _wall(self, cell: Cell) -> bool:
        r, c = cell
        return not (0 <= r < len(self.rows) and 0 <= c < len(self.rows[r])) or self.rows[r][c] == "#"

    def rules(self) -> str:
        return ("Let's play Sokoban. You are @, the box is $, the goal is . (shown * when the box is on it, + when "
                "you stand on it); # is a wall. Walk, and push the box by walking into it; you cannot pull it. Push the "
                f"box onto the goal. Send {self.move_hint}. The box on the goal scores 1.0.")

    def render(self) -> str:
        grid = [list(row) for row in self.rows]
        for r, row in enumerate(grid):
            for c, ch in enumerate(row):
                if ch == ".":
                    grid[r][c] = " "
        grid[self.goal[0]][self.goal[1]] = "."
        grid[self.box[0]][self.box[1]] = "*" if self.box == self.goal else "$"
        grid[self.player[0]][self.player[1]] = "+" if self.player == self.goal else "@"
        return "Room:\n" + "\n".join("".join(row) for row in grid)

    def _cornered(self) -> bool:
        """The box is in a corner that is not the goal: it can never move again."""
        r, c = self.box
        vertical = self._wall((r - 1, c)) or self._wall((r + 1, c))
        horizontal = self._wall((r, c - 1)) or self._wall((r, c + 1))
        return self.box != self.goal and vertical and horizontal

    def play(self, move: str) -> Outcome:
        direction = ALIASES.get(move.strip().lower(), move.strip().lower())
        if direction not in STEPS:
            raise InvalidMove(f"{move!r} is not a direction; send one of up, down, left, right.")
        dr, dc = STEPS[direction]
        target = (self.player[0] + dr, self.player[1] + dc)
        if self._wall(target):
            raise InvalidMove(f"a wall blocks {direction}.")
        if target == self.box:
            beyond = (target[0] + dr, target[1] + dc)
            if self._wall(beyond):
                raise InvalidMove(f"the box cannot be pushed {direction}: a wall is behind it.")
            self.box = beyond
        self.player = target
        if self.box == self.goal:
            return Outcome(1.0, True, "The box is on the goal.")
        if self._cornered():
            return Outcome(0.0, True, "The box is stuck in a corner.", reason="lost: the box is stuck in a corner")
        return Outcome(0.0, False, f"Moved {direction}.", reason="the box is not on the goal yet")
