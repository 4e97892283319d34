"""Dataset rows for ``search`` (Search-R1 style): a question and its accepted answers.

    {"data_source": "searchR1_nq", "env_class": "search",
     "prompt": [{"role": "system", ...}, {"role": "user", "content": "<instructions> Question: ..."}],
     "reward_spec": {"method": "rule", "ground_truth": {"target": ["answer", "alias"]}},
     "extra_info": {"index": 0, "question": "...", "split": "train"}}
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Union

SYSTEM_PROMPT = "You are a helpful and harmless assistant."

USER_PROMPT_PREFIX = (
    "Answer the question below. Reason inside <think> and </think> every time you receive new "
    "information. If you are missing knowledge, search for it by writing <search> query </search>; "
    "the top results come back between <information> and </information>. Search as often as you need. "
    "When no more knowledge is needed, give only the answer inside <answer> and </answer>, without "
    "explanations, for example <answer> Lisbon </answer>. Question: "
)


def make_row(question: str, answers: Union[str, Iterable[str]], *, data_source: str = "searchR1_custom",
             index: int = 0, split: str = "train", max_turns: Optional[int] = None) -> Dict[str, Any]:
    """One ``search`` row; ``answers`` are every accepted form of the answer."""
    targets: List[str] = [answers] if isinstance(answers, str) else [str(a) for a in answers]
    if not question or not question.strip():
        raise ValueError(f"row {index}: the question is empty")
    if not targets or not all(t.strip() for t in targets):
        raise ValueError(f"row {index}: at least one non-empty answer is needed, got {targets!r}")
    row: Dict[str, Any] = {
        "data_source": data_source,
        "prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                   {"role": "user", "content": USER_PROMPT_PREFIX + question.strip()}],
        "env_class": "search",
        "reward_spec": {"method": "rule", "ground_truth": {"target": targets}},
        "extra_info": {"index": index, "question": question.strip(), "split": split},
    }
    if max_turns is not None:
        row["max_turns"] = int(max_turns)
    return row
