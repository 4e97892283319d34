"""Dataset rows for the ``multiply`` env, generated deterministically from a seed."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional

from skyrl_gym.datasets import check_generated_split

SYSTEM_PROMPT = (
    "You are a helpful assistant that solves multiplication problems. Please solve the given multiplication "
    "problem step by step. Put your final answer in \\boxed{answer} format."
)


def make_rows(
    num_rows: int,
    num_digits: int = 2,
    seed: int = 0,
    split: str = "train",
    max_turns: Optional[int] = None,
    system_prompt: str = SYSTEM_PROMPT,
) -> List[Dict[str, Any]]:
    """``num_rows`` rows asking for the product of two ``num_digits``-digit numbers."""
    if num_digits < 1:
        raise ValueError(f"num_digits must be at least 1, got {num_digits}")
    rng = random.Random(f"{seed}:{split}:{num_digits}")
    low, high = (0 if num_digits == 1 else 10 ** (num_digits - 1)), 10**num_digits - 1
    rows = []
    for index in range(num_rows):
        a, b = rng.randint(low, high), rng.randint(low, high)
        row: Dict[str, Any] = {
            "data_source": "synthetic_multiply",
            "prompt": [{"role": "system", "content": system_prompt}, {"role": "user", "content": f"{a} * {b}"}],
            "env_class": "multiply",
            "reward_spec": {"method": "rule", "ground_truth": str(a * b)},
            "extra_info": {"num_digits": num_digits, "split": split, "index": index},
        }
        if max_turns is not None:
            row["max_turns"] = max_turns
        rows.append(row)
    return rows


def build_rows(split: str, size: Optional[int], seed: int, num_digits: int = 2, max_turns: Optional[int] = None,
               system_prompt: str = SYSTEM_PROMPT) -> List[Dict[str, Any]]:
    """The ``multiply`` dataset builder (``skyrl_gym.datasets.build_rows("multiply", ...)``)."""
    if size is None:
        raise ValueError("multiply rows are generated: give a size, e.g. build_rows('multiply', size=512)")
    check_generated_split("multiply", split)
    return make_rows(size, num_digits=num_digits, seed=seed, split=split, max_turns=max_turns,
                     system_prompt=system_prompt)
