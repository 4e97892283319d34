"""GSM8K records (``question``, ``answer``) as dataset rows, identical to SkyRL's preprocessing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Union

from skyrl_gym.data import load_hf_dataset, read_records
from skyrl_gym.errors import DataError
from skyrl_gym.rewards.gsm8k import extract_solution

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def record_to_row(record: Mapping[str, Any], index: int, split: str, env_class: str = "gsm8k") -> Dict[str, Any]:
    """One GSM8K record as a row; the ground truth is the reference answer's final number."""
    question, answer = record.get("question"), record.get("answer")
    if not isinstance(question, str) or not isinstance(answer, str):
        raise DataError(f"GSM8K record {index}: needs string fields 'question' and 'answer'")
    ground_truth = extract_solution(answer, method="strict")
    if ground_truth is None:
        raise DataError(f"GSM8K record {index}: its answer has no '#### N' line")
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "env_class": env_class,
        "reward_spec": {"method": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def gsm8k_rows(
    source: Union[str, Path, None] = None,
    split: str = "test",
    env_class: str = "gsm8k",
    limit: Optional[int] = None,
) -> Iterator[Dict[str, Any]]:
    """Rows from a local GSM8K JSONL file, or from the hub (``openai/gsm8k``, ``main``) when ``source`` is None."""
    records: Iterable[Mapping[str, Any]]
    records = load_hf_dataset(DATA_SOURCE, split=split, subset="main") if source is None else read_records(source)
    for index, record in enumerate(records):
        if limit is not None and index >= limit:
            return
        yield record_to_row(record, index, split, env_class)


def build_rows(split: str, size: Optional[int], seed: int, source: Union[str, Path, None] = None,
               env_class: str = "gsm8k") -> Iterator[Dict[str, Any]]:
    """The ``gsm8k`` dataset builder: the published records in order (the seed does not change them), from
    ``source`` (a local JSONL or Parquet file) or from the hub when it is None."""
    return gsm8k_rows(source, split=split, env_class=env_class, limit=size)


def build_multi_turn_rows(split: str, size: Optional[int], seed: int,
                          source: Union[str, Path, None] = None) -> Iterator[Dict[str, Any]]:
    """The ``gsm8k_multi_turn`` dataset builder: the same records, scored by the multi-turn env."""
    return gsm8k_rows(source, split=split, env_class="gsm8k_multi_turn", limit=size)
