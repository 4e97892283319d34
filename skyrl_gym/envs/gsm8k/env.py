"""GSM8K, single turn: 1.0 when the first ``#### N`` of the answer equals the ground truth."""

from __future__ import annotations

from typing import Any, Dict, Optional

from skyrl_gym.core import StepOutput
from skyrl_gym.envs._common import clip_action, require_ground_truth
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.rewards.gsm8k import extract_solution, score_answer


class GSM8kEnv(BaseTextEnv):
    """Grade-school math, one step, strict '#### N' scoring (1.0 / 0.0)."""

    config_defaults: Dict[str, Any] = {}  # it reads no env_config key

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        self.ground_truth = str(require_ground_truth(extras, "gsm8k"))

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {}
        text = clip_action(action, metadata)
        answer = metadata["parsed_answer"] = extract_solution(text, method="strict")
        reward = score_answer(answer, self.ground_truth)
        return StepOutput(observations=[], reward=reward, done=True, metadata=metadata)
