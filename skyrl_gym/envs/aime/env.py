"""AIME-style answers: the ``Answer:`` line of the last 300 characters, +1.0 when it matches, else -1.0."""

from __future__ import annotations

from typing import Any, Dict, Optional

from skyrl_gym.core import StepOutput
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs._common import clip_action, require_ground_truth
from skyrl_gym.rewards.normalize import minerva_match

ANSWER_WINDOW_CHARS = 300  # the longest MATH-500 answer has 159 characters


class AIMEEnv(BaseTextEnv):
    """Competition math; reward +1.0 / -1.0 on the normalised 'Answer:' line (boxed or not)."""

    config_defaults: Dict[str, Any] = {}  # it reads no env_config key

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        # SkyRL keeps the AIME ground truth under `reward_model`; `reward_spec` is accepted as well.
        field = "reward_model" if isinstance((extras or {}).get("reward_model"), dict) else "reward_spec"
        self.ground_truth = str(require_ground_truth(extras, "aime", field=field))

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {}
        text = clip_action(action, metadata)[-ANSWER_WINDOW_CHARS:]
        correct, prediction = minerva_match(text, self.ground_truth)
        metadata.update({"acc": correct, "pred": prediction})
        return StepOutput(observations=[], reward=1.0 if correct else -1.0, done=True, metadata=metadata)
