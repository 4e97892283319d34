"""What every ``games/<name>`` env shares: the game's parameters, the ``<move>`` tag, invalid moves, turn limits.

A game is a :class:`GameEnv` subclass with

* ``generate(rng, **settings) -> params``: a new game as a JSON-able dict (the row's ``reward_spec.ground_truth``);
* ``setup(params)``: the state, rebuilt from ``params`` (all randomness, opponents included, comes from them);
* ``rules()`` and ``render()``: text; the prompt is the rules then the rendered state;
* ``play(move) -> Outcome``: one move. An invalid move raises :class:`InvalidMove`, whose message goes back
  to the model as the next observation (the state is unchanged); it is never an exception out of ``step``.

Moves are the body of the last ``<move>...</move>`` block. Every zero reward says why in ``metadata["reason"]``.
After :data:`MAX_INVALID_IN_A_ROW` invalid moves in a row, or ``max_turns`` moves (the row's ``max_turns``, else
``env_config["max_turns"]``, else the game's default), the game ends.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym import BaseTextEnv, StepOutput
from skyrl_gym.errors import DataError
from skyrl_gym.tools.parsers import extract_tag, has_look_alike_digits

MAX_INVALID_IN_A_ROW = 3
MAX_MOVE_CHARS = 200
GENERATE_TRIES = 1000
"""Draws a game's ``generate`` makes before its settings are judged to allow no game (a client picks the settings
of a ``serve-env`` session: ``presses=0`` looped for ever)."""


def setting(game_id: str, name: str, value: Any, low: int, high: int) -> int:
    """A game's integer setting, or a ``ValueError`` naming it and its range (a client picks settings: one of
    ``size=10**5`` would build a board of 10^10 cells)."""
    if isinstance(value, bool) or not isinstance(value, int) and not (isinstance(value, str) and value.isdigit()):
        raise ValueError(f"{game_id}: {name} must be an integer from {low} to {high}, got {value!r:.40}")
    number = int(value)
    if not low <= number <= high:
        raise ValueError(f"{game_id}: {name} must be from {low} to {high}, got {number}")
    return number


def no_game(game_id: str, settings: Dict[str, Any]) -> ValueError:
    """The error for settings under which ``generate`` found no game in :data:`GENERATE_TRIES` draws."""
    return ValueError(f"{game_id}: no game in {GENERATE_TRIES} draws with {settings}; these settings allow none")


class InvalidMove(ValueError):
    """A move the rules do not allow; the message tells the model why and what to send instead."""


@dataclasses.dataclass
class Outcome:
    reward: float = 0.0
    done: bool = False
    text: str = ""  # what happened, shown to the model (the new state is appended when the game goes on)
    reason: Optional[str] = None  # why the reward is zero (or the game ended)


class GameEnv(BaseTextEnv):
    """Base of the ``games/*`` envs."""

    game_id = ""
    default_max_turns = 10
    move_hint = "<move>...</move>"

    # --- what a game defines ------------------------------------------------------------------------
    @classmethod
    def generate(cls, rng: random.Random, **settings: Any) -> Dict[str, Any]:
        """The game's parameters for one row, drawn from ``rng`` (each game defines it)."""
        raise NotImplementedError(f"{cls.__name__} must define generate(rng, **settings)")

    @classmethod
    def split_key(cls, params: Dict[str, Any]) -> Any:
        """What makes two games the same game, for keeping the splits apart: the parameters (default), or the part
        of them the player meets where the rest is a detail of how it was drawn (lights_out's presses)."""
        return params

    @classmethod
    def pool(cls, **settings: Any) -> Optional[List[Dict[str, Any]]]:
        """Every game's parameters, for a game with few (a secret word from a list): the dataset splits the pool
        so that no game is in two splits. ``None`` (the default): the splits keep apart by a hash of what
        ``generate`` draws."""
        return None

    def setup(self, params: Dict[str, Any]) -> None:
        """Set the starting state from a row's parameters (each game defines it)."""
        raise NotImplementedError(f"{type(self).__name__} must define setup(params)")

    @classmethod
    def winning_move(cls, params: Dict[str, Any]) -> Optional[str]:
        """A move that wins at once, where the game has one (the rows' reference action, which the checker plays)."""
        return None

    @classmethod
    def wrong_moves(cls, params: Dict[str, Any], count: int) -> List[str]:
        """Up to ``count`` legal moves that do not win, for a game with a :meth:`winning_move`: what ``skyrl-gym
        audit`` plays as known-wrong replies and hides the winning move among (a move the rules refuse tests only
        the refusal). ``[]`` (the default): the audit's own wrong answers."""
        return []

    def rules(self) -> str:
        """The rules as the prompt states them (each game defines it)."""
        raise NotImplementedError(f"{type(self).__name__} must define rules()")

    def render(self) -> str:
        """The state as text (each game defines it)."""
        raise NotImplementedError(f"{type(self).__name__} must define render()")

    def play(self, move: str) -> Outcome:
        """Apply one parsed move (each game defines it)."""
        raise NotImplementedError(f"{type(self).__name__} must define play(move)")

    # seed/settings: the game when no row is given; max_turns: None is the game's own default_max_turns.
    config_defaults = {"seed": 0, "settings": None, "max_turns": None}

    # --- shared -------------------------------------------------------------------------------------
    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        config = self.env_config if isinstance(self.env_config, dict) else {}
        params = ((extras or {}).get("reward_spec") or {}).get("ground_truth")
        self.generated_prompt = params is None
        if params is None:  # no row: a game from env_config {"seed": S, "settings": {...}}
            params = self.generate(random.Random(f"{self.game_id}:{config.get('seed', 0)}"),
                                   **(config.get("settings") or {}))
        if not isinstance(params, dict):
            raise DataError(f"env {self.game_id!r}: reward_spec.ground_truth must be the game's parameters (a dict) "
                            f"as made by skyrl_gym.datasets.build_rows({self.game_id!r}, size=N), got {params!r:.80}")
        try:
            self.setup(dict(params))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"env {self.game_id!r}: bad game parameters {params!r:.120} ({type(exc).__name__}: "
                            f"{exc}); build rows with skyrl_gym.datasets.build_rows({self.game_id!r}, size=N)") from exc
        row_limit = (extras or {}).get("max_turns")  # a row's max_turns wins over env_config's, as in other envs
        self.max_turns = int(row_limit if row_limit else config.get("max_turns", self.default_max_turns))
        self.invalid_in_a_row = 0
        self.finished = False

    def prompt_text(self) -> str:
        return f"{self.rules()}\n\n{self.render()}"

    def init(self, prompt: Any = None) -> Tuple[Any, Dict[str, Any]]:
        if self.generated_prompt:
            prompt = [{"role": "user", "content": self.prompt_text()}]
        return super().init(prompt)

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {"turn": self.turns}
        move = extract_tag(action if isinstance(action, str) else "", "move")
        if self.finished:
            return StepOutput(observations=[], reward=0.0, done=True, metadata={"reason": "the game is already over"})
        try:
            if move is None:
                raise InvalidMove(f"No move found: put your move in {self.move_hint}.")
            if len(move) > MAX_MOVE_CHARS:
                raise InvalidMove(f"That move is {len(move):,} characters long; a move is at most {MAX_MOVE_CHARS}.")
            if has_look_alike_digits(move):
                raise InvalidMove("Write numbers with the digits 0-9.")
            outcome = self.play(move)
        except InvalidMove as exc:
            self.invalid_in_a_row += 1
            metadata.update(move=move, invalid=True)
            outcome = Outcome(0.0, False, f"Invalid move: {exc}", reason=f"invalid move: {exc}")
            if self.invalid_in_a_row >= MAX_INVALID_IN_A_ROW:
                outcome.done = True
                outcome.reason = f"{MAX_INVALID_IN_A_ROW} invalid moves in a row end the game (last: {exc})"
        else:
            self.invalid_in_a_row = 0
            metadata["move"] = move
        if not outcome.done and self.turns >= self.max_turns:
            outcome.done = True
            if outcome.reward == 0.0:
                last = f" ({outcome.reason})" if outcome.reason else ""
                outcome.reason = f"out of moves after {self.max_turns} turns{last}"
        if outcome.reward == 0.0:
            metadata["reason"] = outcome.reason or "the move was played; no reward for it"
        self.finished = outcome.done
        observations: List[Dict[str, str]] = []
        if not outcome.done:
            text = f"{outcome.text}\n\n{self.render()}" if outcome.text else self.render()
            observations = [{"role": "user", "content": text}]
        else:
            metadata["final"] = outcome.text
        return StepOutput(observations=observations, reward=float(outcome.reward), done=outcome.done, metadata=metadata)
