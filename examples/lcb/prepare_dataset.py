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
import json
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator

from skyrl_gym.envs.lcb.dataset import problem_to_row


def read_jsonl(path: Path) -> Iterator[Dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def read_hub(name: str, split: str) -> Iterable[Dict[str, Any]]:
    from datasets import load_dataset

    return load_dataset(name, split=split, trust_remote_code=False)


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
    problems = read_jsonl(args.problems) if args.problems else read_hub(args.hub, args.split)
    args.output.mkdir(parents=True, exist_ok=True)
    out = args.output / f"{args.split}.jsonl"
    written = skipped = 0
    with out.open("w", encoding="utf-8") as handle:
        for problem in problems:
            if args.limit is not None and written >= args.limit:
                break
            try:
                row = problem_to_row(problem)
            except ValueError as exc:
                skipped += 1
                print(f"skipped: {exc}")
                continue
            handle.write(json.dumps(row) + "\n")
            written += 1
    print(f"wrote {written} rows to {out} ({skipped} skipped)")


if __name__ == "__main__":
    main()
