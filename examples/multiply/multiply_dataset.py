"""Write train/validation Parquet rows for the `multiply` env.

    python examples/multiply/multiply_dataset.py --output_dir ~/data/multiply --num_digits 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skyrl_gym.data import write_parquet
from skyrl_gym.datasets import build_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="~/data/multiply")
    parser.add_argument("--num_digits", type=int, default=2)
    parser.add_argument("--train_size", type=int, default=10000)
    parser.add_argument("--test_size", type=int, default=200)
    parser.add_argument("--max_turns", type=int, default=None, help="turns per episode (default: the env's 5)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    output_dir = Path(args.output_dir).expanduser()
    train = build_rows("multiply", "train", args.train_size, args.seed, num_digits=args.num_digits, max_turns=args.max_turns)
    test = build_rows("multiply", "test", args.test_size, args.seed, num_digits=args.num_digits, max_turns=args.max_turns)
    write_parquet(train, output_dir / "train.parquet")
    write_parquet(test, output_dir / "validation.parquet")
    print(f"wrote {len(train)} train and {len(test)} validation rows to {output_dir}")


if __name__ == "__main__":
    main()
