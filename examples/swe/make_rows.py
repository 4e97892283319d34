"""Turn SWE instances (SWE-bench rows, e.g. from `skyrl-gym swe build`) into the hub's dataset rows.

    python examples/swe/make_rows.py out/swe/instances.jsonl out/swe/rows.jsonl [--max-turns 20] [--split all]

Each row has the prompt (the tool instructions and the problem statement), `env_class: swe` and the
instance's SWE-bench fields, so `skyrl-gym eval`, the trainer and the agent layer can all use it.
"""

import argparse
import json
import sys

import skyrl_gym.datasets as datasets
from skyrl_gym.errors import DataError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instances")
    parser.add_argument("output")
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--split", default="all", choices=["all", "train", "test"])
    args = parser.parse_args()
    try:
        rows = datasets.build_rows("swe", split=args.split, instances=args.instances, max_turns=args.max_turns)
    except (DataError, FileNotFoundError) as exc:  # a malformed line or row, a missing file: named, one line
        sys.exit(f"error: {exc}")
    with open(args.output, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    print(f"{len(rows)} rows -> {args.output}")


if __name__ == "__main__":
    main()
