"""Solvable Countdown rows: the target is built from the numbers, so a solution always exists."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional

from skyrl_gym.datasets import check_generated_split

PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. Use + - * / and each number "
    "exactly once. Show your reasoning, then give the expression in <answer></answer> tags, "
    "e.g. <answer>(1 + 2) / 3</answer>."
)


def make_rows(num_rows: int, num_numbers: int = 3, seed: int = 0) -> List[Dict[str, Any]]:
    return _generate(random.Random(seed), num_rows, num_numbers)


def build_rows(split: str, size: Optional[int], seed: int, num_numbers: int = 3) -> List[Dict[str, Any]]:
    """The ``countdown`` dataset builder (the ``skyrl_gym.datasets`` entry point): rows seeded by seed and split."""
    if size is None:
        raise ValueError("countdown rows are generated: give a size, e.g. build_rows('countdown', size=256)")
    check_generated_split("countdown", split)
    return _generate(random.Random(f"countdown:{seed}:{split}"), size, num_numbers)


def _generate(rng: random.Random, num_rows: int, num_numbers: int) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    while len(rows) < num_rows:
        numbers = [rng.randint(1, 20) for _ in range(num_numbers)]
        target, solution = numbers[0], str(numbers[0])
        for number in numbers[1:]:
            operation = rng.choice("+*-")
            if operation == "+":
                target, solution = target + number, f"({solution} + {number})"
            elif operation == "*":
                target, solution = target * number, f"({solution} * {number})"
            elif target >= number:
                target, solution = target - number, f"({solution} - {number})"
            else:
                target, solution = number - target, f"({number} - {solution})"
        if target == 0:
            continue
        shuffled = numbers[:]
        rng.shuffle(shuffled)
        rows.append(
            {
                "data_source": "countdown",
                "prompt": [{"role": "user", "content": PROMPT.format(numbers=shuffled, target=target)}],
                "env_class": "countdown",
                "reward_spec": {"method": "rule", "ground_truth": {"target": target, "numbers": shuffled}},
                "extra_info": {"index": len(rows), "solution": f"<answer>{solution}</answer>"},
            }
        )
    return rows
