"""Registers ``reasoning_gym/<name>`` for every dataset in :data:`names.DATASETS`, with its dataset builder.

Read through the ``skyrl_gym.envs`` and ``skyrl_gym.datasets`` entry points (a module entry point: imported
on the first registry lookup). Nothing here imports reasoning-gym: entry points are strings, and each
builder is a small callable that imports :mod:`skygym_contrib.reasoning_gym.dataset` when rows are built.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable

from skyrl_gym.datasets import register_dataset
from skyrl_gym.errors import RegistrationError
from skyrl_gym.registration import register, registry

from skygym_contrib.reasoning_gym.names import DATASETS, description, env_id

ENV_ENTRY_POINT = "skygym_contrib.reasoning_gym.env:ReasoningGymEnv"


class DatasetBuilder:
    """The dataset builder of one ``reasoning_gym/<name>`` id (``build_rows`` with the name bound)."""

    __module__ = "skygym_contrib.reasoning_gym.dataset"

    def __init__(self, name: str) -> None:
        self.name = name
        self.__qualname__ = f"build_rows[{name}]"

    def __call__(self, split: str, size: Any, seed: int, **config: Any) -> Iterable[Dict[str, Any]]:
        from skygym_contrib.reasoning_gym.dataset import build_rows

        return build_rows(self.name, split=split, size=size, seed=seed, **config)


def _register_all() -> None:
    for name in DATASETS:
        if not dict.__contains__(registry, env_id(name)):
            register(id=env_id(name), entry_point=ENV_ENTRY_POINT, kwargs={"dataset": name},
                     description=description(name))
        try:
            register_dataset(env_id(name), DatasetBuilder(name))
        except RegistrationError:  # a builder registered by hand for this id wins
            pass


_register_all()
