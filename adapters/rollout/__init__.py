"""The rollout loop: where skyrl-gym envs meet inference engines, token for token.

Public API::

    from skygym_adapters.rollout import RolloutConfig, RolloutGenerator, generate_rollouts, check_drift

    generator = RolloutGenerator(engine, tokenizer, RolloutConfig(max_turns=3, check_drift=True))
    output = await generator.generate({"prompts": [...], "env_classes": [...], "env_extras": [...]})
    # output: a SkyRL GeneratorOutput (prompt_token_ids, response_ids, rewards, loss_masks, stop_reasons,
    # rollout_logprobs, rollout_metrics, trajectory_ids, env_metrics, is_last_step, ...)

    trajectories = await generator.run_rows(rows, n_samples_per_prompt=4)   # Trajectory records
    report = check_drift(trajectories[0], generator.chat)                   # DriftReport

The engine receives token ids and returns token ids; observation ids come from the chat template (the
difference between templating the conversation with and without the new messages, checked to be a pure
extension). Nothing the model generated is ever re-tokenized. See docs/rollouts.md.
"""

from skygym_adapters.rollout.chat import ChatTokenizer, ObservationIds, TemplateError
from skygym_adapters.rollout.config import RolloutConfig
from skygym_adapters.rollout.drift import DriftReport, check_drift
from skygym_adapters.rollout.generator import RolloutGenerator, generate_rollouts
from skygym_adapters.rollout.loop import EnvCallError, run_trajectory
from skygym_adapters.rollout.metrics import pass_at_k, rollout_metrics
from skygym_adapters.rollout.trajectory import Trajectory, Turn

__all__ = [
    "ChatTokenizer",
    "DriftReport",
    "EnvCallError",
    "ObservationIds",
    "RolloutConfig",
    "RolloutGenerator",
    "TemplateError",
    "Trajectory",
    "Turn",
    "check_drift",
    "generate_rollouts",
    "pass_at_k",
    "rollout_metrics",
    "run_trajectory",
]
