"""``generator.max_turns`` is 1 by default (as in SkyRL-train): a multi-turn env trained without setting it
gets one turn an episode. The trainer says so when it starts, once per env_class, naming the env, its turn
limit and the key to set, from the envs its row check builds anyway."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from skyrl_gym.core import StepOutput
from skyrl_gym.data import write_jsonl
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import register_toy_env, toy_overrides, toy_rows

TWO_TRIES = "test_two_tries"


class TwoTriesEnv(BaseTextEnv):
    """Like the scaffold's env: up to two tries (its own ``max_turns``), done early on a right answer."""

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        self.max_turns = 2

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        correct = "e" in action
        done = correct or self.turns >= self.max_turns
        return StepOutput(observations=[] if done else [{"role": "user", "content": "Try again."}],
                          reward=float(correct), done=done, metadata={})


def _rows() -> list:
    import skyrl_gym

    register_toy_env()
    if TWO_TRIES not in skyrl_gym.registry:
        skyrl_gym.register(TWO_TRIES, entry_point=TwoTriesEnv)
    letter = toy_rows(4)
    for row in letter:  # the row's max_turns extra sets the limit of a one-turn env
        row["max_turns"] = 3
    tries = [dict(row, env_class=TWO_TRIES) for row in toy_rows(4)]
    return letter + tries


def _train(model, tmp_path, caplog, **extra) -> list:
    data = tmp_path / "rows.jsonl"
    write_jsonl(_rows(), data)
    cfg = load_config(toy_overrides(model, data, tmp_path, **{"trainer.max_training_steps": 1, **extra}))
    with caplog.at_level(logging.WARNING, logger="skygym_train.trainer"):
        with PPOTrainer(cfg) as trainer:
            result = trainer.fit()
    assert result["global_step"] == 1
    return [r.getMessage() for r in caplog.records if "generator.max_turns" in r.getMessage()]


def _cap_reached(tmp_path) -> float:
    """The step's share of trajectories that played every turn generator.max_turns allowed, fewer than their
    env's (recorded as such: their env said done on that turn, so episode_end is env_done)."""
    import json

    [path] = list((tmp_path / "logs").rglob("metrics.jsonl"))
    [step] = [json.loads(line) for line in path.read_text().splitlines()]
    return step["rollout/generate/max_turns_cap_reached"]


def test_a_multi_turn_env_capped_at_one_turn_is_named_once_with_the_key_to_set(tiny_chat_model, tmp_path,
                                                                                caplog):
    said = _train(tiny_chat_model, tmp_path, caplog)
    assert said == [
        "env test_letter_e plays up to 3 turns (its max_turns) but generator.max_turns=1 ends every episode "
        "after 1; set generator.max_turns=3 to play all of them",
        "env test_two_tries plays up to 2 turns (its max_turns) but generator.max_turns=1 ends every episode "
        "after 1; set generator.max_turns=2 to play all of them",
    ]
    assert _cap_reached(tmp_path) == 1.0  # every episode was cut at 1 turn, below its env's 2 or 3


def test_nothing_is_said_when_generator_max_turns_covers_every_env(tiny_chat_model, tmp_path, caplog):
    assert _train(tiny_chat_model, tmp_path, caplog, **{"generator.max_turns": 3}) == []
    assert _cap_reached(tmp_path) == 0.0
