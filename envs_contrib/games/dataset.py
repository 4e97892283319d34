"""Dataset rows for the ``games/*`` envs (reach them through ``skyrl_gym.datasets.build_rows``).

    build_rows("games/nim", split="train", size=64, seed=0, heaps=4)

Row ``i`` is a new game from ``random.Random(f"{id}:{seed}:{split}:{i}")``; keyword arguments are the game's
settings (see each game's ``generate``). ``reward_spec.ground_truth`` holds the game's parameters, from which the
env rebuilds the whole game, opponent included; the prompt is the rules and the starting state.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, Optional

from skyrl_gym.datasets import check_generated_split, draw_for_split, split_items
from skyrl_gym.registration import load_env_creator

from skygym_contrib.games.catalog import GAMES


def build_rows(game_id: str, split: str, size: Optional[int], seed: int, **settings: Any) -> Iterator[Dict[str, Any]]:
    if size is None:
        raise ValueError(f"{game_id} games are generated: give a size, e.g. build_rows({game_id!r}, size=64)")
    check_generated_split(game_id, split)
    cls = load_env_creator(GAMES[game_id], env_id=game_id)
    cls.generate(random.Random(0), **settings)  # bad settings fail here, with the game's message
    pool = cls.pool(**settings)
    if pool is not None:
        pool = _in_split(game_id, settings, lambda: split_items(pool, split))
    return (_row(cls, game_id, split, seed, index, settings, pool) for index in range(size))


def _in_split(game_id: str, settings: Dict[str, Any], draw: Any) -> Any:
    try:
        return draw()
    except ValueError as exc:
        raise ValueError(f"{game_id} with settings {settings or 'the defaults'}: {exc}") from None


def _row(cls: Any, game_id: str, split: str, seed: int, index: int, settings: Dict[str, Any],
         pool: Optional[list]) -> Dict[str, Any]:
    """Row ``index``: a game of the split's share of the pool, else one drawn until it is the split's (no game in
    two splits: a test score measures play on games training never showed)."""
    rng = random.Random(f"{game_id}:{seed}:{split}:{index}")
    params = rng.choice(pool) if pool is not None else _in_split(
        game_id, settings, lambda: draw_for_split(split, lambda: cls.generate(rng, **settings), key=cls.split_key))
    env = cls(extras={"reward_spec": {"ground_truth": params}})
    extra_info: Dict[str, Any] = {"split": split, "index": index}
    winning = cls.winning_move(params)
    if winning is not None:
        extra_info["reference_action"] = f"<move>{winning}</move>"
    return {
        "data_source": game_id,
        "prompt": [{"role": "user", "content": env.prompt_text()}],
        "env_class": game_id,
        "reward_spec": {"method": "rule", "ground_truth": params},
        "extra_info": extra_info,
    }
