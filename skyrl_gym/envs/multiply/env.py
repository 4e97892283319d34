"""Multiplication with a ``\\boxed{}`` answer (the seed's example env), optionally with retries."""

from __future__ import annotations

from typing import Any, Dict, Optional

from skyrl_gym.core import StepOutput
from skyrl_gym.envs._common import (clip_action, config_number, require_ground_truth, row_extra_info,
                                    row_turn_limit)
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.errors import DataError
from skyrl_gym.rewards.boxed import last_boxed_content
from skyrl_gym.rewards.normalize import without_thousands_commas

BOXED_WRONG_REWARD = 0.5  # the seed's value for a boxed but wrong final answer


def _row_partial_credit(value: Any) -> float:
    """A row's ``boxed_wrong_reward``: a number from 0 to 1 (the bound a served env's policy puts on
    ``env_config.boxed_wrong_reward``), or a ``DataError`` that names the field."""
    if not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= 1:
        return float(value)
    raise DataError(f"env 'multiply': the row's boxed_wrong_reward must be a number from 0 to 1, "
                    f"got {value!r:.80}")


class MultiplyEnv(BaseTextEnv):
    """Multiply two numbers; 1.0 for the right \\boxed{} product, partial credit for a boxed wrong one.

    ``extras["max_turns"]`` (default 5) allows retries with feedback; the partial credit is the row's
    ``boxed_wrong_reward`` (from 0 to 1: rows that carry it score the same wherever they are stepped), else
    ``env_config["boxed_wrong_reward"]`` (default 0.5). The answer is the last complete, non-empty box, so an
    empty ``\\boxed{}`` copied from the instruction or a box cut off by the length limit earns nothing.
    """

    config_defaults: Dict[str, Any] = {"boxed_wrong_reward": BOXED_WRONG_REWARD}

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        self.ground_truth = str(require_ground_truth(extras, "multiply")).strip()
        self.max_turns = row_turn_limit(self.extras, row_extra_info(self.extras, "multiply").get("max_turns", 5),
                                        "multiply")
        config = self.env_config if isinstance(self.env_config, dict) else {}
        self.boxed_wrong_reward = config_number(config, "boxed_wrong_reward", self.config_defaults["boxed_wrong_reward"],
                                                 "multiply")
        if self.extras.get("boxed_wrong_reward") is not None:
            self.boxed_wrong_reward = _row_partial_credit(self.extras["boxed_wrong_reward"])

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {}
        answer = last_boxed_content(clip_action(action, metadata))
        metadata["parsed_answer"] = answer
        correct = answer is not None and without_thousands_commas(answer) == self.ground_truth
        done = correct or self.turns >= self.max_turns
        if correct:
            reward = 1.0
        elif done and answer is not None:
            reward = self.boxed_wrong_reward
        else:
            reward = 0.0
        if done:
            return StepOutput(observations=[], reward=reward, done=True, metadata=metadata)
        feedback = (
            f"Your answer '{answer}' is incorrect. Please try again."
            if answer is not None
            else "Please provide your answer in the format \\boxed{your_answer}."
        )
        return StepOutput(observations=[{"role": "user", "content": feedback}], reward=0.0, done=False, metadata=metadata)
