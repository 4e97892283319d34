"""What one rollout records: the turns of a trajectory, token for token, and how they become training samples."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from skygym_adapters.types import TrajectoryID


@dataclass
class Turn:
    """One assistant turn and the observation that followed it.

    ``start``/``output_end``/``end`` are offsets into :attr:`Trajectory.ids` (the tokens after the prompt):
    ``ids[start:output_end]`` are the model's tokens (plus an appended end-of-turn token if ``added_eos``),
    ``ids[output_end:end]`` the observation/template tokens. ``context_length`` is how many tokens (prompt
    included) the model saw when it produced this turn.
    """

    start: int
    output_end: int
    end: int
    context_length: int
    reward: float
    stop_reason: str
    text: str
    added_eos: bool = False
    observation_method: str = ""  # "delta", "fixed_base", "raw" or "" (no observation)
    observation_note: str = ""


@dataclass
class Trajectory:
    """A finished (or failed) episode. ``ids``/``loss_mask``/``logprobs`` cover everything after the prompt,
    including the observation of the last turn; :meth:`response_ids` cuts that off."""

    trajectory_id: TrajectoryID
    env_class: str
    prompt_ids: List[int]
    ids: List[int] = field(default_factory=list)
    loss_mask: List[int] = field(default_factory=list)
    logprobs: Optional[List[float]] = None
    turns: List[Turn] = field(default_factory=list)
    conversation: List[Dict[str, Any]] = field(default_factory=list)
    prompt_message_count: int = 0
    stop_reason: str = "stop"
    env_metrics: Dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None
    truncated_by_max_turns: bool = False
    # Every turn the caller's cap (generator.max_turns) allowed was played, fewer than the row's or env's
    # own max_turns: the env said done (episode_end env_done) on the turn the cap made its last
    # (Episode.cap_reached).
    max_turns_cap_reached: bool = False
    # How the episode ended (skyrl_gym.episode.EpisodeEnd: env_done, max_turns, length, aborted, error).
    episode_end: Optional[Any] = None
    # Single-message mode appends a final EOS (loss mask 1, as SkyRL does) after the last turn.
    final_eos_appended: bool = False
    model_seconds: float = 0.0
    env_seconds: float = 0.0
    total_seconds: float = 0.0
    drift: Optional[Any] = None  # a DriftReport when the rollout ran with check_drift
    # The reward fingerprint of env_class (skyrl_gym.fingerprint): which verifier gave the reward.
    env_fingerprint: Optional[str] = None

    # ------------------------------------------------------------------ views
    @property
    def response_end(self) -> int:
        """End of the last assistant turn in ``ids`` (the final observation is not part of the response)."""
        end = self.turns[-1].output_end if self.turns else 0
        return end + (1 if self.final_eos_appended else 0)

    def response_ids(self) -> List[int]:
        return self.ids[: self.response_end]

    def response_loss_mask(self) -> List[int]:
        if self.error is not None:
            return [0] * self.response_end
        return self.loss_mask[: self.response_end]

    def response_logprobs(self) -> Optional[List[float]]:
        return None if self.logprobs is None else self.logprobs[: self.response_end]

    @property
    def total_reward(self) -> float:
        return 0.0 if self.error is not None else float(sum(t.reward for t in self.turns))

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def per_token_rewards(self) -> List[float]:
        """Each turn's reward on its last token (the appended final EOS takes the last turn's reward)."""
        rewards = [0.0] * self.response_end
        if self.error is not None:
            return rewards
        for i, turn in enumerate(self.turns):
            index = turn.output_end - 1
            if self.final_eos_appended and i == len(self.turns) - 1:
                index = self.response_end - 1
            if 0 <= index < len(rewards):
                rewards[index] += float(turn.reward)
        return rewards

    def step_samples(self) -> List[Dict[str, Any]]:
        """One training sample per turn: the context the model saw, its output plus the following observation."""
        samples = []
        full = self.prompt_ids + self.ids
        for i, turn in enumerate(self.turns):
            response = self.ids[turn.start : turn.end]
            mask = [0] * len(response) if self.error is not None else self.loss_mask[turn.start : turn.end]
            rewards = [0.0] * len(response)
            if self.error is None and turn.output_end > turn.start:
                rewards[turn.output_end - 1 - turn.start] = float(turn.reward)
            samples.append(
                {
                    "prompt_ids": full[: turn.context_length],
                    "response_ids": response,
                    "loss_mask": mask,
                    "rewards": rewards,
                    "logprobs": None if self.logprobs is None else self.logprobs[turn.start : turn.end],
                    "stop_reason": turn.stop_reason,
                    "is_last_step": i == len(self.turns) - 1,
                }
            )
        return samples

    def to_json_dict(self) -> Dict[str, Any]:
        """Everything needed to inspect or replay the trajectory (token ids included)."""
        data = {
            "trajectory_id": dict(self.trajectory_id),
            "env_class": self.env_class,
            "env_fingerprint": self.env_fingerprint,
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids(),
            "loss_mask": self.response_loss_mask(),
            "rewards": self.per_token_rewards(),
            "total_reward": self.total_reward,
            "logprobs": self.response_logprobs(),
            "stop_reason": self.stop_reason,
            "episode_end": None if self.episode_end is None else str(getattr(self.episode_end, "value", self.episode_end)),
            "max_turns_cap_reached": self.max_turns_cap_reached,
            "num_turns": self.num_turns,
            "conversation": self.conversation,
            "turns": [asdict(t) for t in self.turns],
            "env_metrics": self.env_metrics,
            "error": self.error,
            "timing": {"model_s": self.model_seconds, "env_s": self.env_seconds, "total_s": self.total_seconds},
        }
        if self.drift is not None:
            data["drift"] = self.drift.to_dict()
        return data


__all__ = ["Trajectory", "Turn"]
