"""Rows for the 'word_sort' env (users reach them through skyrl_gym.datasets.build_rows('word_sort', ...))."""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, Optional

from skyrl_gym.datasets import check_generated_split

WORDS = [
    "agent", "batch", "critic", "decode", "entropy", "format", "gradient", "horizon", "invariant", "judge",
    "kernel", "loss", "model", "norm", "optimizer", "policy", "query", "reward", "sample", "token", "update",
    "value", "weight", "yield", "zero",
]


def build_rows(
    split: str, size: Optional[int], seed: int, min_words: int = 3, max_words: int = 6
) -> Iterator[Dict[str, Any]]:
    """Row ``i`` depends only on (seed, split, i): between ``min_words`` and ``max_words`` distinct words."""
    if size is None:
        raise ValueError("word_sort rows are generated: give a size, e.g. build_rows('word_sort', size=64)")
    check_generated_split("word_sort", split)
    if not 2 <= min_words <= max_words <= len(WORDS):
        raise ValueError(
            f"word_sort: need 2 <= min_words <= max_words <= {len(WORDS)}, got {min_words}, {max_words}"
        )
    for index in range(size):
        rng = random.Random(f"word_sort:{seed}:{split}:{index}")
        words = rng.sample(WORDS, rng.randint(min_words, max_words))
        yield {
            "data_source": "word_sort",
            "prompt": [{"role": "user", "content": f"Sort these words alphabetically: {', '.join(words)}. "
                        "Answer with the sorted words, separated by commas, in <answer>...</answer>."}],
            "env_class": "word_sort",
            "reward_spec": {"method": "rule", "ground_truth": words},
            "extra_info": {
                "split": split,
                "index": index,
                "reference_action": f"<answer>{', '.join(sorted(words))}</answer>",
            },
        }
