"""Turn GSM8K into Parquet rows for training and evaluation.

    # from the hub (needs network access and the `datasets` package)
    python examples/gsm8k/gsm8k_dataset.py --output_dir ~/data/gsm8k
    # from local JSONL files with `question` and `answer` fields
    python examples/gsm8k/gsm8k_dataset.py --train_file train.jsonl --test_file test.jsonl --output_dir ~/data/gsm8k

Writes train.parquet and validation.parquet, the file names SkyRL's GSM8K recipes expect.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skyrl_gym.data import write_parquet
from skyrl_gym.datasets import build_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="~/data/gsm8k")
    parser.add_argument("--train_file", help="local GSM8K train JSONL (default: the hub)")
    parser.add_argument("--test_file", help="local GSM8K test JSONL (default: the hub)")
    parser.add_argument("--env_class", default="gsm8k", help="gsm8k or gsm8k_multi_turn")
    parser.add_argument("--max_train_dataset_length", type=int, default=None)
    args = parser.parse_args()

    output_dir = Path(args.output_dir).expanduser()
    try:
        train = build_rows("gsm8k", "train", args.max_train_dataset_length, source=args.train_file,
                           env_class=args.env_class)
        test = build_rows("gsm8k", "test", source=args.test_file, env_class=args.env_class)
    except (ImportError, OSError, ValueError) as exc:  # a missing extra or file, the hub out of reach, a bad row
        raise SystemExit(f"error: {exc}") from None
    write_parquet(train, output_dir / "train.parquet")
    write_parquet(test, output_dir / "validation.parquet")
    print(f"wrote {len(train)} train and {len(test)} validation rows to {output_dir}")


if __name__ == "__main__":
    main()
