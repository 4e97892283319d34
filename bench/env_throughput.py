"""Episodes per second of the rule-based envs: make + init + step + close, one thread.

    python bench/env_throughput.py [--gsm8k ../shared/data/gsm8k/test.jsonl] [--seconds 3]

`gsm8k` is driven with GSM8K reference solutions; `math` with three kinds of answers: equal strings
(no math-verify call), plain numbers (numeric fast path) and LaTeX that needs math-verify (a call to
the helper process). Figures are printed, never asserted. `bench/core_vs_skyrl_gym.py` runs the gsm8k
loop beside the public SkyRL-gym 0.4.0.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable, List, Tuple

import skyrl_gym
from skyrl_gym.datasets import build_rows

DEFAULT_GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"


def run_episodes(episodes: List[Tuple[str, dict, str]], seconds: float) -> Tuple[float, float, int]:
    """Cycle through (env id, row, action) until `seconds` pass; return (episodes/s, p50 µs, count)."""
    latencies = []
    deadline = time.perf_counter() + seconds
    index = 0
    while time.perf_counter() < deadline:
        env_id, row, action = episodes[index % len(episodes)]
        start = time.perf_counter()
        env = skyrl_gym.make(env_id, extras=row)
        env.init(row["prompt"])
        env.step(action)
        env.close()
        latencies.append(time.perf_counter() - start)
        index += 1
    total = sum(latencies)
    return len(latencies) / total, statistics.median(latencies) * 1e6, len(latencies)


def math_episodes(kind: str) -> List[Tuple[str, dict, str]]:
    prompt = [{"role": "user", "content": "q"}]
    pairs = {
        "string": [(r"\frac{1}{2}", r"\boxed{\frac{1}{2}}"), ("42", r"\boxed{42}")],
        "numeric": [("0.5", r"\boxed{0.50}"), ("42", r"\boxed{42.0}")],
        "math-verify": [(r"\frac{1}{2}", r"\boxed{0.5}"), (r"\frac{\sqrt{2}}{2}", r"\boxed{\frac{1}{\sqrt{2}}}")],
    }[kind]
    return [("math", {"prompt": prompt, "reward_spec": {"ground_truth": gt}}, action) for gt, action in pairs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gsm8k", type=Path, default=DEFAULT_GSM8K)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()

    cases: List[Tuple[str, Callable[[], List[Tuple[str, dict, str]]]]] = []
    if args.gsm8k.exists():
        rows = build_rows("gsm8k", split="test", size=500, source=str(args.gsm8k))
        cases.append(("gsm8k (reference solutions)", lambda: [("gsm8k", r, r["extra_info"]["answer"]) for r in rows]))
        cases.append(("gsm8k_multi_turn (1 turn)", lambda: [("gsm8k_multi_turn", r, r["extra_info"]["answer"]) for r in rows]))
    else:
        print(f"(skipping gsm8k: {args.gsm8k} not found)")
    for kind in ("string", "numeric", "math-verify"):
        cases.append((f"math ({kind})", lambda kind=kind: math_episodes(kind)))

    run_episodes(math_episodes("math-verify"), 0.5)  # start the math-verify helper outside the timings
    print(f"{'env (answers)':34} {'episodes/s':>12} {'p50 µs':>10} {'episodes':>10}")
    for label, build in cases:
        rate, p50, count = run_episodes(build(), args.seconds)
        print(f"{label:34} {rate:12,.0f} {p50:10,.1f} {count:10,}")


if __name__ == "__main__":
    main()
