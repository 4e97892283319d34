"""What a math-verify check that runs out of time costs the checks after it.

    python bench/math_timeouts.py                   # 10 rounds, time limit 1 s
    python bench/math_timeouts.py --rounds 20 --timeout 0.5 --threads 4

Each round, every thread asks one hard check (``9^{9^{9^{9^9}}}`` against 1: math-verify works on it until the
time limit) and then an easy one that needs math-verify (``\\frac{2}{4}`` against 0.5), through the math reward's
own helper pool (``skyrl_gym.rewards.math.math_equal``). Prints the easy checks' latency (p50, max), the hard
checks' latency, the helpers started during the run (a helper killed at its time limit is started again by the next
call) and the checks per second.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Dict, List

from skyrl_gym.rewards.math import _helper, math_equal

HARD, EASY = r"9^{9^{9^{9^9}}}", r"\frac{2}{4}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1.0, help="math_equal's time limit, seconds")
    parser.add_argument("--threads", type=int, default=1, help="callers at once (the pool has its own size)")
    args = parser.parse_args()
    math_equal("1", "2/2")  # warm: one helper started before the clock (the others start as callers need them)
    warm = set(_helper.pids())
    started_pids = set(warm)
    seen: Dict[str, List[float]] = {"hard": [], "easy": []}
    wrong: List[str] = []
    lock = threading.Lock()

    def caller() -> None:
        for _ in range(args.rounds):
            for kind, answer, gold, want in (("hard", HARD, "1", "timeout"), ("easy", EASY, "0.5", None)):
                start = time.perf_counter()
                verdict = math_equal(answer, gold, timeout=args.timeout)
                took = time.perf_counter() - start
                with lock:
                    seen[kind].append(took)
                    started_pids.update(_helper.pids())
                    if (want and verdict.reason != want) or (not want and not verdict.equal):
                        wrong.append(f"{kind}: {verdict}")

    begin = time.perf_counter()
    threads = [threading.Thread(target=caller) for _ in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - begin
    checks = len(seen["hard"]) + len(seen["easy"])
    print(f"{args.threads} caller(s) x {args.rounds} rounds, time limit {args.timeout:g} s, pool of {_helper.size}")
    for kind in ("easy", "hard"):
        times = seen[kind]
        print(f"  {kind} checks: p50 {statistics.median(times):.3f} s, max {max(times):.3f} s")
    print(f"  helpers started during the run: {len(started_pids - warm)} (callers beyond the first start one each)")
    print(f"  {checks / elapsed:.2f} checks/s over {elapsed:.1f} s")
    if wrong:
        raise SystemExit(f"{len(wrong)} verdicts were not what they should be, e.g. {wrong[0]}")


if __name__ == "__main__":
    main()
