"""GRPO on GSM8K with TRL, rewarded by skyrl_gym envs.

    python examples/trl/grpo_gsm8k.py --gsm8k_file gsm8k/train.jsonl --max_steps 20            # single turn
    python examples/trl/grpo_gsm8k.py --gsm8k_file gsm8k/train.jsonl --multi_turn --max_turns 3

Single turn: TRL generates; ``env_reward("gsm8k")`` scores each completion with the gsm8k env, reading
the ground truth from the dataset's ``reward_spec`` column. Multi-turn: ``env_rollout_func`` plays
``gsm8k_multi_turn`` episodes with the policy (env messages masked out of the loss) and
``episode_reward`` returns each episode's summed reward. The default model is the embedded
SmolLM2-135M-Instruct, so it runs on a CPU without downloads.
"""

from __future__ import annotations

import argparse
import os


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gsm8k_file", help="GSM8K JSONL (question/answer); default: the hub's openai/gsm8k")
    parser.add_argument("--model", default="smollm2-135m", help="model name or folder (skygym_adapters.models.resolve_model)")
    parser.add_argument("--output_dir", default="outputs/trl_grpo_gsm8k")
    parser.add_argument("--limit", type=int, default=256, help="training rows")
    parser.add_argument("--max_steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--num_generations", type=int, default=4)
    parser.add_argument("--max_completion_length", type=int, default=128)
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--multi_turn", action="store_true")
    parser.add_argument("--max_turns", type=int, default=3)
    args = parser.parse_args(argv)

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    try:
        from trl import GRPOConfig, GRPOTrainer

        from skygym_adapters.models import resolve_model
        from skygym_adapters.trl import env_reward, env_rollout_func, episode_reward, rows_to_dataset
    except ImportError as exc:
        from skyrl_gym.extras import explain_import_error

        raise SystemExit(f"error: this example {explain_import_error(exc) or f'cannot import: {exc}'}") from None
    from skyrl_gym.datasets import build_rows

    env_class = "gsm8k_multi_turn" if args.multi_turn else "gsm8k"
    try:
        rows = build_rows(env_class, split="train", size=args.limit, source=args.gsm8k_file)
    except (ImportError, OSError, ValueError) as exc:  # a missing extra or file, the hub out of reach, a bad row
        raise SystemExit(f"error: {exc}" + ("" if args.gsm8k_file else " (offline: --gsm8k_file train.jsonl)")) from None
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not _has_cuda(),
    )
    trainer = GRPOTrainer(
        model=str(resolve_model(args.model).path),
        reward_funcs=[episode_reward] if args.multi_turn else [env_reward(env_class)],
        args=config,
        train_dataset=rows_to_dataset(rows),
        rollout_func=env_rollout_func(rows, max_turns=args.max_turns) if args.multi_turn else None,
    )
    trainer.train()
    key = "rewards/episode_reward/mean" if args.multi_turn else f"rewards/{env_class}_reward/mean"
    rewards = [entry[key] for entry in trainer.state.log_history if key in entry]
    print(f"steps={trainer.state.global_step} mean_reward_first={rewards[0]:.3f} mean_reward_last={rewards[-1]:.3f}")
    return 0


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    raise SystemExit(main())
