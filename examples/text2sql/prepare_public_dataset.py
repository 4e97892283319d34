"""Turn a public text-to-SQL dataset unpacked on disk into text2sql rows (JSONL or Parquet).

    python examples/text2sql/prepare_public_dataset.py --db-path DATA --dataset spider --split train OUT.jsonl

``DATA`` holds the datasets in their usual layouts (the OmniSQL archive unpacks this way):

    DATA/spider/database/<db_id>/<db_id>.sqlite          + DATA/spider/train_spider.json, dev.json
    DATA/bird/train/train_databases/<db_id>/<db_id>.sqlite + DATA/bird/train/train.json
    DATA/SynSQL-2.5M/databases/<db_id>/<db_id>.sqlite    + DATA/SynSQL-2.5M/data.json

Train with ``env_config.db_path=DATA``; each row names its database with ``data`` and ``db_id``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from skyrl_gym.envs.sql.dataset import QUESTION_FILES, load_public_rows  # noqa: E402


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="output file: .jsonl or .parquet")
    parser.add_argument("--db-path", required=True)
    parser.add_argument("--dataset", required=True, choices=sorted(QUESTION_FILES))
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--max-turns", type=int, default=5)
    args = parser.parse_args(argv)
    rows = list(load_public_rows(args.db_path, args.dataset, args.split, args.limit, args.max_turns))
    if args.out.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), args.out)
    else:
        with open(args.out, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} {args.dataset} {args.split} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
