"""LiveCodeBench problems as ``lcb`` rows.

A LiveCodeBench problem (``code_generation_lite`` layout) has ``question_content``,
``starter_code``, ``public_test_cases`` (a JSON list of ``{input, output, testtype}``) and
``metadata`` (JSON, with ``func_name`` for functional problems). Private tests are shipped as a
pickled blob upstream; pickles can run code when loaded, so they are only read when the caller
passes them already decoded as a JSON list (``private_test_cases``).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Mapping, Optional

INSTRUCTION_STDIN = (
    "Solve the problem in Python. Read the input from standard input and write the answer to standard "
    "output. Reply with the program in one ```python code block."
)
INSTRUCTION_FUNCTIONAL = (
    "Solve the problem in Python by completing the given code. Reply with the whole code in one ```python "
    "code block."
)


def _json_field(value: Any, default: Any) -> Any:
    if value is None or value == "":
        return default
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def problem_to_row(problem: Mapping[str, Any], include_private: bool = True) -> Dict[str, Any]:
    """One ``lcb`` row; tests get ``metadata.func_name`` when the problem is functional."""
    metadata = _json_field(problem.get("metadata"), {})
    tests: List[Dict[str, Any]] = list(_json_field(problem.get("public_test_cases"), []))
    private = problem.get("private_test_cases")
    if include_private and private:
        try:
            decoded = _json_field(private, [])
        except ValueError:  # the upstream pickled blob: never unpickled here
            decoded = []
        if isinstance(decoded, list):
            tests += decoded
    if not tests:
        raise ValueError(f"problem {problem.get('question_id')!r} has no tests")
    func_name = metadata.get("func_name")
    for test in tests:
        if test.get("testtype") == "functional":
            test.setdefault("metadata", {"func_name": func_name})
    functional = tests[0].get("testtype") == "functional"
    content = problem.get("question_content", "")
    starter = problem.get("starter_code") or ""
    prompt = f"{content}\n\n{INSTRUCTION_FUNCTIONAL if functional else INSTRUCTION_STDIN}"
    if starter:
        prompt += f"\n\n```python\n{starter}\n```"
    return {
        "data_source": "livecodebench",
        "prompt": [{"role": "user", "content": prompt}],
        "env_class": "lcb",
        "reward_spec": {"method": "rule", "ground_truth": json.dumps(tests)},
        "extra_info": {
            "question_id": problem.get("question_id"),
            "platform": problem.get("platform"),
            "difficulty": problem.get("difficulty"),
            "contest_date": str(problem.get("contest_date") or ""),
        },
    }


def build_rows(split: str, size: Optional[int], seed: int, source: Optional[str] = None, hub: Optional[str] = None,
               include_private: bool = True) -> Iterator[Dict[str, Any]]:
    """The ``lcb`` dataset builder: LiveCodeBench problems from ``source`` (a local JSONL, JSON or Parquet file of
    problems) or ``hub`` (a dataset name on the Hugging Face hub, e.g. ``livecodebench/code_generation_lite``),
    in their published order; problems without usable tests are left out. The seed does not change the rows."""
    from skyrl_gym.data import load_hf_dataset, read_records

    if (source is None) == (hub is None):
        raise ValueError("lcb rows need exactly one of source=FILE (a JSONL/Parquet file of LiveCodeBench problems) "
                         "or hub=NAME (e.g. 'livecodebench/code_generation_lite')")
    problems = read_records(source) if source is not None else load_hf_dataset(hub, split=split, trust_remote_code=False)
    produced = 0
    for problem in problems:
        if size is not None and produced >= size:
            return
        try:
            row = problem_to_row(problem, include_private=include_private)
        except ValueError:
            continue
        produced += 1
        yield row

