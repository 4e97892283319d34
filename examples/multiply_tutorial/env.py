"""The tutorial's environment: multiply two numbers, answer in \\boxed{}, retry after feedback.

This is the file a user writes for a new environment; it is registered at run time by ``main_multiply.py``
(no change to any installed package).
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


class MultiplyEnv(BaseTextEnv):
    """1.0 for the right product in ``\\boxed{}``, 0.5 for a boxed wrong one when the episode ends, else 0.

    A wrong or missing answer gets feedback and another turn, up to ``extras["max_turns"]`` (default 5).
    """

    def __init__(self, env_config: Optional[Dict[str, Any]] = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        spec = (extras or {}).get("reward_spec") or {}
        if "ground_truth" not in spec:
            raise ValueError("multiply: each dataset row needs reward_spec.ground_truth")
        self.answer = str(spec["ground_truth"]).strip()
        self.max_turns = int((extras or {}).get("max_turns", 5))

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        found = _BOXED.findall(action)
        guess = found[-1].strip() if found else None
        solved = guess == self.answer
        if solved or self.turns >= self.max_turns:
            reward = 1.0 if solved else (0.5 if guess else 0.0)
            return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={"guess": guess})
        hint = (f"{guess} is not the product. Try again." if guess is not None
                else "Give the product as \\boxed{...}.")
        return BaseTextEnvStepOutput(observations=[{"role": "user", "content": hint}], reward=0.0, done=False,
                                     metadata={"guess": guess})
