"""Write ``lcb`` rows from LiveCodeBench problems.

    # from the Hugging Face hub (needs network and the `datasets` package):
    python examples/lcb/prepare_dataset.py --hub livecodebench/code_generation_lite --output data/lcb
    # from a local JSONL file of problems (same fields):
    python examples/lcb/prepare_dataset.py --problems problems.jsonl --output data/lcb

Only the public tests are used unless the problems carry ``private_test_cases`` as a plain JSON list
(upstream ships them pickled, and pickles are never loaded here).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skyrl_gym.datasets import build_rows
from skyrl_gym.data import write_jsonl


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--problems", type=Path, help="a local JSONL file of problems")
    source.add_argument("--hub", help="a dataset name on the Hugging Face hub")
    parser.add_argument("--split", default="test")
    parser.add_argument("--output", type=Path, default=Path("data/lcb"))
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    rows = build_rows("lcb", split=args.split, size=args.limit,
                      source=str(args.problems) if args.problems else None, hub=args.hub)
    args.output.mkdir(parents=True, exist_ok=True)
    out = write_jsonl(rows, args.output / f"{args.split}.jsonl")
    print(f"wrote {len(rows)} rows to {out} (problems without usable tests are left out)")


if __name__ == "__main__":
    main()
