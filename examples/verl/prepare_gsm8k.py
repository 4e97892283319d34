"""Write GSM8K as veRL Parquet rows that run in skyrl_gym envs.

    python examples/verl/prepare_gsm8k.py --env gsm8k_multi_turn                 # from the hub
    python examples/verl/prepare_gsm8k.py --train_file gsm8k/train.jsonl --test_file gsm8k/test.jsonl

Each row keeps the project's fields (env_class, reward_spec, extra_info) in veRL's layout
(reward_model, extra_info.index, agent_name=skyrl_gym_agent); see adapters/verl/rows.py.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from skygym_adapters.verl.rows import AGENT_NAME, write_verl_parquet
from skyrl_gym.datasets import build_rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="gsm8k_multi_turn", choices=["gsm8k", "gsm8k_multi_turn"])
    parser.add_argument("--train_file", help="local GSM8K train JSONL (question/answer); default: the hub")
    parser.add_argument("--test_file", help="local GSM8K test JSONL; default: the hub")
    parser.add_argument("--output_dir", default=os.path.expanduser("~/data/skyrl_gym/gsm8k_multi_turn"))
    parser.add_argument("--max_turns", type=int, default=None, help="turns per episode (gsm8k_multi_turn)")
    parser.add_argument("--agent_name", default=AGENT_NAME, help="veRL agent loop per row")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)

    out = Path(args.output_dir)
    for split, source in (("train", args.train_file), ("test", args.test_file)):
        try:
            rows = build_rows(args.env, split=split, size=args.limit, source=source)
        except (ImportError, OSError, ValueError) as exc:  # a missing extra or file, the hub out of reach, a bad row
            raise SystemExit(f"error: {split} rows: {exc}" + ("" if source else f" (offline: --{split}_file {split}.jsonl)")) from None
        if args.max_turns is not None:
            for row in rows:
                row["max_turns"] = args.max_turns
        path = write_verl_parquet(rows, out / f"{split}.parquet", agent_name=args.agent_name)
        print(f"{split}: {len(rows)} rows -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
