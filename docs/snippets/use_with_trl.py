# Use with TRL: a skyrl_gym env as the reward of GRPOTrainer, and multi-turn episodes via rollout_func.
import os

from trl import GRPOConfig, GRPOTrainer

from skygym_adapters.models import resolve_model
from skygym_adapters.trl import env_reward, env_rollout_func, episode_reward, rows_to_dataset
from skyrl_gym.datasets import build_rows

MODEL = os.environ.get("MODEL") or str(resolve_model("smollm2-135m").path)  # the embedded SmolLM2, no download
GSM8K = os.environ.get("GSM8K_JSONL")  # a local GSM8K JSONL file; None reads the hub
args = GRPOConfig(output_dir="outputs/trl", max_steps=2, per_device_train_batch_size=4, num_generations=2,
                  max_completion_length=16, use_cpu=True, report_to="none", save_strategy="no")  # no 1.6 GB checkpoints

# Single turn: TRL generates, the gsm8k env scores (ground truth from the reward_spec column).
rows = build_rows("gsm8k", size=8, source=GSM8K)
trainer = GRPOTrainer(model=MODEL, reward_funcs=[env_reward("gsm8k")], args=args, train_dataset=rows_to_dataset(rows))
trainer.train()

# Multi-turn: episodes of gsm8k_multi_turn, env messages masked out of the loss, summed turn rewards.
rows = build_rows("gsm8k_multi_turn", size=8, source=GSM8K)
trainer = GRPOTrainer(model=MODEL, reward_funcs=[episode_reward], args=args, train_dataset=rows_to_dataset(rows),
                      rollout_func=env_rollout_func(rows, max_turns=2, max_tokens_per_turn=8))
trainer.train()
