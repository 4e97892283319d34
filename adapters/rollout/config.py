"""``RolloutConfig``: the options of the rollout loop (names follow SkyRL's generator config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from skygym_adapters.types import SamplingParams


@dataclass
class RolloutConfig:
    """How trajectories are generated.

    Attributes:
        sampling_params: default sampling parameters (a call may pass its own).
        max_turns: assistant turns per trajectory; also passed to the env as ``extras["max_turns"]`` (as SkyRL
            does). The loop ends a trajectory after this many turns even if the env is not done.
        max_input_length: a turn is not started when the context (prompt + response so far) is longer than
            this; the trajectory then ends with stop reason ``"length"``. None: no cap.
        use_conversation_multi_turn: True: observations become new chat messages (templated). False: the whole
            episode is one assistant message and observations are appended as raw text tokens inside it.
        append_eos_token_after_stop_str_in_multi_turn: when a turn ends on a stop string (not EOS), append the
            end-of-turn token (loss mask 0) so the next turn starts a well-formed message.
        batched: SkyRL's single-turn batched generation: every trajectory is in flight at once (no
            ``max_concurrent_trajectories`` cap), so the engine decodes the prompts as one batch; episodes still run
            through the one episode driver.
        step_wise_trajectories: return one sample per turn (prompt = context at that turn) instead of one
            per trajectory, with ``is_last_step`` marking each trajectory's last turn.
        apply_overlong_filtering: zero the loss mask of trajectories that did not end with ``"stop"``.
        zero_reward_on_non_stop: zero the reward of trajectories that did not end with ``"stop"``.
        check_drift: run :func:`skygym_adapters.rollout.drift.check_drift` on every trajectory; the reports go to
            ``rollout_metrics["drift/..."]`` and to each trajectory.
        max_env_workers: threads for blocking env calls (make, init, step, close); 0 runs them on the loop.
        ray_env_workers: 0 builds envs in this process. N > 0: every env is built and stepped in one of N Ray
            actors (:class:`skygym_adapters.ray_envs.EnvWorkerPool`, started on first use, ended by
            ``RolloutGenerator.close``), spread over the Ray cluster's nodes.
        ray_env_worker_options: more arguments of that pool (``num_cpus_per_worker``, ``resources_per_worker``,
            ``scheduling_strategy``, ``max_concurrency``, ``imports``, ...).
        max_concurrent_trajectories: trajectories in flight at once (None: all of them).
        env_configs: ``env_config`` per env class, passed to ``skyrl_gym.make``.
        chat_template / chat_template_kwargs: override the tokenizer's template / pass template variables.
        per_token_rewards: True: ``rewards`` holds a list per trajectory with each turn's reward on the last
            token of that turn; False: one float per trajectory (``trajectory_rewards`` always has the floats).
        show_progress: a tqdm progress bar over trajectories.
    """

    sampling_params: SamplingParams = field(default_factory=lambda: SamplingParams(max_generate_length=256))
    max_turns: int = 1
    max_input_length: Optional[int] = None
    use_conversation_multi_turn: bool = True
    append_eos_token_after_stop_str_in_multi_turn: bool = True
    batched: bool = False
    step_wise_trajectories: bool = False
    apply_overlong_filtering: bool = False
    zero_reward_on_non_stop: bool = False
    check_drift: bool = False
    max_env_workers: int = 32
    ray_env_workers: int = 0
    ray_env_worker_options: Dict[str, Any] = field(default_factory=dict)
    max_concurrent_trajectories: Optional[int] = None
    env_configs: Dict[str, Any] = field(default_factory=dict)
    chat_template: Optional[str] = None
    chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    per_token_rewards: bool = True
    show_progress: bool = False

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_input_length is not None and self.max_input_length < 1:
            raise ValueError(f"max_input_length must be >= 1 or None, got {self.max_input_length}")
        if self.max_env_workers < 0:
            raise ValueError(f"max_env_workers must be >= 0, got {self.max_env_workers}")
        if not isinstance(self.ray_env_workers, int) or self.ray_env_workers < 0:
            raise ValueError(f"ray_env_workers must be an integer >= 0, got {self.ray_env_workers!r}")
        if self.step_wise_trajectories and self.batched:
            raise ValueError("step_wise_trajectories cannot be combined with batched (single-turn) mode")
        if self.step_wise_trajectories and not self.use_conversation_multi_turn:
            raise ValueError("step_wise_trajectories needs use_conversation_multi_turn=True")
        if self.batched and self.max_turns != 1:
            raise ValueError(f"batched mode is single-turn; got max_turns={self.max_turns}")


__all__ = ["RolloutConfig"]
