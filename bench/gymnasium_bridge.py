"""What the Gymnasium bridge and the env checker cost, side by side with the bare skyrl_gym API.

    python bench/gymnasium_bridge.py [--gsm8k ../shared/data/gsm8k/test.jsonl] [--seconds 3]

Episodes per second on gsm8k, one thread, driven with the GSM8K reference solutions:
  * bare:       skyrl_gym.make + init + step + close per episode (what a trainer does);
  * bridge:     one gymnasium.make, then reset(options={"index": i}) + step per episode
                (reset builds a fresh skyrl_gym env, so the difference is the bridge's own work);
  * bridge+checker wrappers: the same through gymnasium.make's default PassiveEnvChecker/OrderEnforcing.
Then the checker's time per row (reference answer + 5 adversarial actions, each played twice; the
10 MB action dominates). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable, List, Tuple

import gymnasium

import skyrl_gym
import skyrl_gym.gymnasium_bridge  # noqa: F401  registers skyrl_gym/* ids with Gymnasium
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows, record_to_row

DEFAULT_GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"
FALLBACK_RECORD = {"question": "What is 48 + 24?", "answer": "48 + 24 = <<48+24=72>>72\n#### 72"}


def timed(run_one: Callable[[int], None], seconds: float) -> Tuple[float, float, int]:
    """Call run_one(i) until `seconds` pass; return (calls/s, p50 µs, count)."""
    latencies: List[float] = []
    deadline = time.perf_counter() + seconds
    index = 0
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        run_one(index)
        latencies.append(time.perf_counter() - start)
        index += 1
    return len(latencies) / sum(latencies), statistics.median(latencies) * 1e6, len(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gsm8k", type=Path, default=DEFAULT_GSM8K)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--checker-rows", type=int, default=5)
    args = parser.parse_args()

    if args.gsm8k.exists():
        rows = [dict(r) for r in gsm8k_rows(args.gsm8k, limit=500)]
    else:
        print(f"({args.gsm8k} not found: using one built-in row)")
        rows = [record_to_row(FALLBACK_RECORD, 0, "test")]
    answers = [r["extra_info"]["answer"] for r in rows]

    def bare(i: int) -> None:
        row = rows[i % len(rows)]
        env = skyrl_gym.make("gsm8k", extras={k: v for k, v in row.items() if k not in ("prompt", "env_class")})
        env.init(row["prompt"])
        env.step(answers[i % len(rows)])
        env.close()

    raw = skyrl_gym.gymnasium_bridge.SkyRLGymnasiumEnv("gsm8k", rows=rows)
    wrapped = gymnasium.make("skyrl_gym/gsm8k-v0", rows=rows)

    def through(env: gymnasium.Env) -> Callable[[int], None]:
        def run(i: int) -> None:
            env.reset(options={"index": i % len(rows)})
            env.step(answers[i % len(rows)])

        return run

    print(f"{'gsm8k episode path':34} {'episodes/s':>12} {'p50 µs':>10} {'episodes':>10}")
    for label, run in [("bare skyrl_gym", bare), ("bridge (SkyRLGymnasiumEnv)", through(raw)),
                       ("gymnasium.make (+ wrappers)", through(wrapped))]:
        rate, p50, count = timed(run, args.seconds)
        print(f"{label:34} {rate:12,.0f} {p50:10,.1f} {count:10,}")

    checker_rows = rows[: args.checker_rows]
    start = time.perf_counter()
    report = skyrl_gym.check_env("gsm8k", checker_rows)
    elapsed = time.perf_counter() - start
    print(f"\ncheck_env('gsm8k', {len(checker_rows)} rows): {elapsed:.2f} s, {elapsed / len(checker_rows) * 1e3:.0f} ms/row, "
          f"{report.episodes} episodes (+ as many determinism replays), ok={report.ok}")
    start = time.perf_counter()
    report = skyrl_gym.check_env("gsm8k", checker_rows, huge_action_chars=0)
    elapsed = time.perf_counter() - start
    print(f"check_env without the 10 MB action:  {elapsed:.2f} s, {elapsed / len(checker_rows) * 1e3:.0f} ms/row")


if __name__ == "__main__":
    main()
