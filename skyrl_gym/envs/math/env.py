"""Math with a boxed answer, graded for mathematical equivalence by math-verify (``0.5`` = ``\\frac{1}{2}``)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from skyrl_gym.core import StepOutput
from skyrl_gym.envs._common import clip_action, config_number, require_ground_truth
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.rewards.math import DEFAULT_TIMEOUT_S, compute_math_score


class MathEnv(BaseTextEnv):
    """Math word problems; the last \\boxed{} answer is checked with math-verify (1.0 / 0.0)."""

    # The defaults of the env_config keys it reads: also serve-env's ceilings of what a client may set.
    config_defaults = {"verify_timeout": DEFAULT_TIMEOUT_S}

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        self.ground_truth = str(require_ground_truth(extras, "math"))
        config = self.env_config if isinstance(self.env_config, dict) else {}
        self.timeout = config_number(config, "verify_timeout", self.config_defaults["verify_timeout"], "math")

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {}
        text = clip_action(action, metadata)
        result = compute_math_score(text, self.ground_truth, timeout=self.timeout)
        metadata.update({"pred": result["pred"], "reason": result["reason"]})
        return StepOutput(observations=[], reward=result["score"], done=True, metadata=metadata)
