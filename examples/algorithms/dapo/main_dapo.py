"""DAPO as a user plug-in of the bundled trainer (nothing in skygym_train knows about it).

    python examples/algorithms/dapo/main_dapo.py data.train_data="['train.parquet']" ... \
        trainer.algorithm.overlong_buffer_len=512 trainer.algorithm.overlong_buffer_penalty_factor=1.0

What DAPO adds, and where it lives:
- clip-higher: ``trainer.algorithm.eps_clip_high=0.28`` (the built-in PPO loss is asymmetric-capable);
- dynamic sampling: ``trainer.algorithm.dynamic_sampling.type=filter`` (built in);
- token-level loss: ``trainer.algorithm.loss_reduction=token_mean`` (built in);
- overlong filtering: ``generator.apply_overlong_filtering=true`` (built in);
- soft overlong punishment: here, as two new config keys and a trainer hook.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

from skygym_train.config import AlgorithmConfig, make_config
from skygym_train.trainer import PPOTrainer


@dataclass
class DAPOAlgorithmConfig(AlgorithmConfig):
    overlong_buffer_len: int = 512
    """Responses longer than max_generate_length - overlong_buffer_len are penalised linearly."""
    overlong_buffer_penalty_factor: float = 1.0


DAPOConfig = make_config(algorithm_cls=DAPOAlgorithmConfig)


def soft_overlong_punishment(
    rewards: Sequence[float], response_lengths: Sequence[int], max_length: int, buffer_len: int, factor: float
) -> List[float]:
    """DAPO's length penalty: 0 up to ``max_length - buffer_len``, then linear down to ``-factor``."""
    start = max_length - buffer_len
    out = []
    for reward, length in zip(rewards, response_lengths):
        if start < length <= max_length:
            reward = reward - (length - start) / buffer_len * factor
        elif length > max_length:
            reward = 0.0
        out.append(float(reward))
    return out


class DAPOTrainer(PPOTrainer):
    def postprocess_generator_output(self, output: Any, uids: List[str]) -> Tuple[Any, List[str]]:
        algo = self.cfg.trainer.algorithm
        rewards = output["rewards"]
        per_token = bool(rewards) and isinstance(rewards[0], list)
        totals = [float(sum(r)) for r in rewards] if per_token else [float(r) for r in rewards]
        punished = soft_overlong_punishment(
            totals,
            [len(r) for r in output["response_ids"]],
            self.cfg.generator.sampling_params.max_generate_length,
            algo.overlong_buffer_len,
            algo.overlong_buffer_penalty_factor,
        )
        if per_token:
            # keep per-turn rewards where they were; the length penalty lands on the last token
            new_rewards = []
            for token_rewards, total, new_total in zip(rewards, totals, punished):
                token_rewards = list(token_rewards)
                if token_rewards:
                    token_rewards[-1] += new_total - total
                new_rewards.append(token_rewards)
            output["rewards"] = new_rewards
        else:
            output["rewards"] = punished
        return super().postprocess_generator_output(output, uids)


def main(argv: Sequence[str] = ()) -> int:
    from skygym_train.entrypoints.main_base import main as run_main

    return run_main(list(argv) or sys.argv[1:], trainer_cls=DAPOTrainer, config_cls=DAPOConfig)


if __name__ == "__main__":
    raise SystemExit(main())
