"""Every GSM8K reference solution scores 1.0 in the ``gsm8k`` env, and 0.0 once its final number is changed.

    python bench/gsm8k_reference_sweep.py --file path/to/gsm8k/test.jsonl   # or GSM8K_JSONL=...; none: the hub

Reads the records through the project's loader (``skyrl_gym.envs.gsm8k.dataset.gsm8k_rows``), prints the counts
and the time per scored response, and exits 1 if any reference scores below 1.0 or any changed answer above 0.0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import skyrl_gym
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", default=os.environ.get("GSM8K_JSONL"), help="GSM8K JSONL (default: the hub)")
    parser.add_argument("--split", default="test")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = list(gsm8k_rows(args.file, split=args.split))
    wrong_reference, wrong_changed = [], []
    for row in rows:
        reference = row["extra_info"]["answer"]
        if skyrl_gym.make("gsm8k", extras=row).step(reference)["reward"] != 1.0:
            wrong_reference.append(row["extra_info"]["index"])
        head, _, final = reference.rpartition("#### ")
        changed = head + "#### " + str(int(float(final.replace(",", ""))) + 1)
        if skyrl_gym.make("gsm8k", extras=row).step(changed)["reward"] != 0.0:
            wrong_changed.append(row["extra_info"]["index"])
    seconds = time.perf_counter() - start
    print(f"{len(rows)} records: references scoring 1.0: {len(rows) - len(wrong_reference)}/{len(rows)}; "
          f"changed answers scoring 0.0: {len(rows) - len(wrong_changed)}/{len(rows)}; "
          f"{seconds * 1e6 / max(1, 2 * len(rows)):.0f} us per scored response")
    if wrong_reference or wrong_changed:
        print(f"failing records: references {wrong_reference[:20]}, changed {wrong_changed[:20]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
