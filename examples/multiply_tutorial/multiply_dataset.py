"""Write ``train.parquet`` and ``validation.parquet`` of multiplication problems for the tutorial env.

    python examples/multiply_tutorial/multiply_dataset.py --output_dir ~/data/multiply --num_digits 2
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any, Dict, List

from skyrl_gym.data import write_parquet


def make_rows(count: int, num_digits: int, split: str, seed: int) -> List[Dict[str, Any]]:
    rng = random.Random(f"{seed}:{split}")
    low, high = 10 ** (num_digits - 1), 10**num_digits - 1
    rows = []
    for index in range(count):
        a, b = rng.randint(low, high), rng.randint(low, high)
        question = f"What is {a} * {b}? Think it through, then give only the product as \\boxed{{...}}."
        rows.append({
            "data_source": "synthetic_multiply",
            "prompt": [{"role": "user", "content": question}],
            "env_class": "multiply",
            "reward_spec": {"method": "rule", "ground_truth": str(a * b)},
            "extra_info": {"split": split, "index": index, "num_digits": num_digits},
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="~/data/multiply")
    parser.add_argument("--num_digits", type=int, default=2)
    parser.add_argument("--train_size", type=int, default=10000)
    parser.add_argument("--test_size", type=int, default=200)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    out = Path(args.output_dir).expanduser()
    write_parquet(make_rows(args.train_size, args.num_digits, "train", args.seed), out / "train.parquet")
    write_parquet(make_rows(args.test_size, args.num_digits, "test", args.seed), out / "validation.parquet")
    print(f"wrote {args.train_size} train and {args.test_size} validation rows to {out}")


if __name__ == "__main__":
    main()
