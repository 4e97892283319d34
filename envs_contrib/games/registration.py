"""Registers every ``games/*`` env and its dataset builder (a module entry point of both groups; imports no game)."""

from __future__ import annotations

from typing import Any, Dict, Iterable

from skyrl_gym.datasets import register_dataset
from skyrl_gym.errors import RegistrationError
from skyrl_gym.registration import register, registry

from skygym_contrib.games.catalog import GAMES


class GameRows:
    """The dataset builder of one game (``dataset.build_rows`` with the id bound), importing it only when called."""

    __module__ = "skygym_contrib.games.dataset"

    def __init__(self, game_id: str) -> None:
        self.game_id = game_id
        self.__qualname__ = f"build_rows[{game_id}]"

    def __call__(self, split: str, size: Any, seed: int, **settings: Any) -> Iterable[Dict[str, Any]]:
        from skygym_contrib.games.dataset import build_rows

        return build_rows(self.game_id, split=split, size=size, seed=seed, **settings)


for _game_id, _entry_point in GAMES.items():
    if not dict.__contains__(registry, _game_id):
        register(id=_game_id, entry_point=_entry_point)  # described by its class docstring
    try:
        register_dataset(_game_id, GameRows(_game_id))
    except RegistrationError:  # a builder registered by hand for this id wins
        pass
