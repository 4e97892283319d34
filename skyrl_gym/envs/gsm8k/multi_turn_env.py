"""GSM8K over several turns, with per-turn rewards and a request to try again."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from skyrl_gym.core import StepOutput
from skyrl_gym.envs._common import clip_action, config_number, require_ground_truth, row_extra_info, row_turn_limit
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.errors import DataError, EnvConfigError
from skyrl_gym.rewards.gsm8k import compute_score, extract_solution

FORMAT_SCORE = 0.2  # shared over the turns: a formatted but wrong answer earns 0.2 / max_turns
RETRY_MESSAGE = (
    "Please provide your step-by-step reasoning, "
    "and also include a tentative numeric answer at the end in the exact format: '#### ANSWER'."
)
LAST_TURN_MESSAGE = "Now provide only the final numeric answer in the exact format: '#### ANSWER'."


class GSM8kMultiTurnEnv(BaseTextEnv):
    """Grade-school math with retries: 1.0 and done when correct, 0.2/max_turns when formatted but wrong.

    ``env_config``: ``format_score`` (default 0.2, SkyRL-gym's), shared over the turns. An episode's summed reward
    pays stalling: four formatted wrong turns then the right answer sum to 1.16, the right answer at once to 1.0.
    ``format_score: 0`` pays the right answer alone.
    """

    config_defaults: Dict[str, Any] = {"format_score": FORMAT_SCORE}

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        self.ground_truth = str(require_ground_truth(extras, "gsm8k_multi_turn"))
        extra_info = row_extra_info(self.extras, "gsm8k_multi_turn")
        self.max_turns = row_turn_limit(self.extras, extra_info.get("max_turns", 5), "gsm8k_multi_turn")
        if self.max_turns < 1:
            raise DataError(f"env 'gsm8k_multi_turn': max_turns must be at least 1, got {self.max_turns}")
        config = self.env_config if isinstance(self.env_config, dict) else {}
        format_score = config_number(config, "format_score", self.config_defaults["format_score"], "gsm8k_multi_turn")
        if not 0.0 <= format_score <= 1.0:
            raise EnvConfigError(f"env 'gsm8k_multi_turn': env_config.format_score must be in [0, 1], "
                                 f"got {format_score}")
        self.format_score_per_turn = format_score / self.max_turns

    def _next_observation(self) -> List[Dict[str, str]]:
        remaining = self.max_turns - self.turns
        return [{"role": "user", "content": RETRY_MESSAGE if remaining > 1 else LAST_TURN_MESSAGE}]

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {}
        text = clip_action(action, metadata)
        reward = compute_score(text, self.ground_truth, method="strict", format_score=self.format_score_per_turn)
        metadata["parsed_answer"] = extract_solution(text, method="strict")
        done = reward == 1.0 or self.turns >= self.max_turns
        observations = [] if done else self._next_observation()
        return StepOutput(observations=observations, reward=reward, done=done, metadata=metadata)

    def get_metrics(self) -> Dict[str, Any]:
        return {"steps": self.turns}

    @staticmethod
    def aggregate_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
        if not metrics:
            return {}
        return {"avg_steps": sum(float(m.get("steps", 0)) for m in metrics) / len(metrics)}
