"""SkyRL-gym's import path for the LiveCodeBench scorer: ``compute_score``, ``lcb_check_correctness``,
``extract_code_from_model``, ``postprocess_lcb_sample``.

Same names, arguments and results as SkyRL-gym's; the candidate code runs in a sandbox
(:mod:`skyrl_gym.envs.lcb.grading`, the same grader as the ``lcb`` env), never in this process.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from skyrl_gym.envs.lcb.grading import extract_last_code_block, grade, parse_tests

DEFAULT_TIMEOUT_S = 6  # per test, as in SkyRL-gym
DEFAULT_MEMORY_MB = 2048


def extract_code_from_model(model_response: str) -> Optional[str]:
    """The last fenced code block of a response, stripped; ``None`` when there is none."""
    return extract_last_code_block(model_response)


def postprocess_lcb_sample(sample: Sequence[Dict[str, Any]]) -> Dict[str, str]:
    """``{"input_output": JSON of {"inputs", "outputs"[, "fn_name"]}}`` from a list of LiveCodeBench tests."""
    sample_dict: Dict[str, Any] = {
        "inputs": [test["input"] for test in sample],
        "outputs": [test["output"] for test in sample],
    }
    if sample and sample[0].get("testtype") == "functional":
        fn_name = (sample[0].get("metadata") or {}).get("func_name")
        if fn_name is None:
            raise ValueError(f"functional LiveCodeBench test without metadata.func_name: {sample[0].get('metadata')!r}")
        sample_dict["fn_name"] = fn_name
    return {"input_output": json.dumps(sample_dict)}


def lcb_check_correctness(sample: Any, generation: str, timeout: float = DEFAULT_TIMEOUT_S, debug: bool = False) -> bool:
    """Whether ``generation`` passes every test of ``sample`` (a list of tests, or their JSON), each test
    within ``timeout`` seconds, run in the shared sandbox. ``debug`` is accepted and ignored."""
    from skygym_sandboxes import Limits, shared_sandbox

    tests: List[Dict[str, Any]] = parse_tests(sample)
    if not tests:
        raise ValueError("lcb_check_correctness needs at least one test")
    limits = Limits(wall_s=float(timeout), cpu_s=float(timeout), memory_mb=DEFAULT_MEMORY_MB)
    return grade(shared_sandbox(None), generation, tests, limits).passed


def compute_score(model_response: str, tests: Any) -> Tuple[Optional[str], float]:
    """``(extracted code or None, 1.0 | 0.0)``: 1.0 when the last code block passes every test."""
    code = extract_code_from_model(model_response)
    if code is None:
        return None, 0.0
    return code, 1.0 if lcb_check_correctness(tests, code) else 0.0
