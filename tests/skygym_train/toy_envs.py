"""A toy env for learning tests: the reward is the share of the letter ``e`` in the response.

A randomly initialised model writes about 8% ``e``; the only way to raise the reward is to learn to
prefer tokens full of ``e``, which a working trainer does within a few dozen steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from skyrl_gym.core import StepOutput
from skyrl_gym.envs.base_text_env import BaseTextEnv

TARGET_ENV_ID = "test_letter_e"


class LetterShareEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        self.letter = (self.extras.get("reward_spec") or {}).get("ground_truth", "e")

    def step(self, action: str) -> StepOutput:
        letters = [c for c in action.lower() if c.isalpha()]
        share = sum(c == self.letter for c in letters) / len(letters) if letters else 0.0
        return StepOutput(observations=[], reward=float(share), done=True, metadata={"letters": len(letters)})


def register_toy_env() -> None:
    import skyrl_gym

    if TARGET_ENV_ID not in skyrl_gym.registry:
        skyrl_gym.register(TARGET_ENV_ID, entry_point=LetterShareEnv)


def toy_rows(count: int, split: str = "train") -> List[Dict[str, Any]]:
    words = ["apple", "river", "stone", "cloud", "green", "house", "light", "table"]
    return [
        {
            "data_source": "toy_letter_e",
            "prompt": [{"role": "user", "content": f"Say something about {words[i % len(words)]} #{i} ({split})"}],
            "env_class": TARGET_ENV_ID,
            "reward_spec": {"method": "rule", "ground_truth": "e"},
        }
        for i in range(count)
    ]


def toy_overrides(model: Path, data: Path, tmp: Path, **extra: object) -> list:
    """A small, fast local-path config for the toy env; ``extra`` adds or replaces dotted keys."""
    base = {
        "trainer.policy.model.path": str(model),
        "data.train_data": f"[{data}]",
        "environment.env_class": "test_letter_e",
        "trainer.use_ray": "false",
        "trainer.train_batch_size": 4,
        "trainer.policy_mini_batch_size": 4,
        "trainer.critic_mini_batch_size": 4,
        "generator.n_samples_per_prompt": 4,
        "trainer.micro_train_batch_size_per_gpu": 16,
        "trainer.micro_forward_batch_size_per_gpu": 16,
        "generator.sampling_params.max_generate_length": 8,
        "trainer.epochs": 100,
        "trainer.ckpt_interval": -1,
        "trainer.resume_mode": "none",
        "trainer.logger": "jsonl",
        "trainer.log_path": str(tmp / "logs"),
        "trainer.ckpt_path": str(tmp / "ckpts"),
        "trainer.progress_bar": "false",
        "trainer.eval_interval": -1,
        "trainer.eval_before_train": "false",
        "trainer.gradient_checkpointing": "false",
        "trainer.policy.optimizer_config.lr": 5e-2,
        "trainer.policy.optimizer_config.weight_decay": 0.0,
        "trainer.critic.optimizer_config.lr": 1e-2,  # 1e-3 left the critic too slow to help in 30 steps
        # the engine in the policy's dtype, and the policy computing in it: tests compare the engine's weights and
        # log-probs to the policy's exactly (auto is bf16 on GPUs and on CPUs with AVX512-BF16 or AMX; on a GPU the
        # policy would autocast to bf16)
        "generator.model_dtype": "float32",
        "trainer.bf16": "false",
    }
    base.update({k: v for k, v in extra.items()})
    return [f"{k}={v}" for k, v in base.items()]
