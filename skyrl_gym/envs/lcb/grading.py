"""LiveCodeBench-style grading in a sandbox.

A row's ``reward_spec.ground_truth`` is a JSON list of tests ``{"input", "output", "testtype":
"stdin" | "functional", "metadata": {"func_name": ...}}`` (SkyRL-gym's format). The last fenced
code block of the response is the program.

* ``stdin`` tests run the program with the input on stdin; the output matches when, line by line
  after stripping, each line is equal or parses to the same decimals.
* ``functional`` tests call ``func_name`` (a method of ``Solution`` when the code defines that
  class) with the input's lines parsed as JSON arguments; the return value (tuples as lists) must
  equal the JSON-parsed expected output. The comparison happens here, outside the sandbox: the
  expected outputs never enter it.

Every test is its own sandboxed run with its own time limit; grading stops at the first failure.
"""

from __future__ import annotations

import dataclasses
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Dict, List, Optional, Sequence

from skygym_sandboxes import Limits, RunRequest, RunResult, Sandbox, Status

CODE_BLOCK = re.compile(r"```(?:\w+)?\n(.*?)```", re.DOTALL)
RESULT_MARKER = "\x1e__lcb_result__:"
# Names that LiveCodeBench programs commonly use without importing them (SkyRL-gym puts the same
# kind of import block before every program). numpy/pandas are optional in the sandbox image.
PREAMBLE = """\
import bisect, collections, copy, datetime, functools, heapq, io, itertools, math, operator, os, random, re, string, sys
from bisect import bisect, bisect_left, bisect_right, insort
from collections import Counter, OrderedDict, defaultdict, deque
from copy import deepcopy
from functools import cache, cmp_to_key, lru_cache, partial, reduce
from heapq import heapify, heappop, heappush, heapreplace, merge, nlargest, nsmallest
from itertools import (accumulate, chain, combinations, count, cycle, groupby, islice, pairwise, permutations,
                       product, repeat, zip_longest)
from math import atan2, ceil, comb, factorial, floor, gcd, inf, isqrt, log, log2, log10, pi, prod, sqrt
from operator import iand, itemgetter, or_, sub, xor
from os.path import commonprefix
from random import randrange, shuffle
from re import search as re_search
from string import ascii_lowercase, ascii_uppercase
from time import time
from typing import (Any, Callable, Deque, Dict, Generator, Iterable, Iterator, List, Optional, Set, Tuple,
                    Union)
try:
    import numpy as np
except ImportError:
    pass
try:
    import pandas as pd
except ImportError:
    pass
"""

FUNCTIONAL_HARNESS = (
    """

def __lcb_call():
    import json as _json
    with open("__lcb_args.json") as _handle:
        _args = _json.load(_handle)
    _name = _args["func_name"]
    _owner = globals().get("Solution")
    _target = getattr(_owner(), _name) if isinstance(_owner, type) and hasattr(_owner, _name) else globals()[_name]
    _value = _target(*_args["args"])
    if isinstance(_value, tuple):
        _value = list(_value)
    print(%r + _json.dumps(_value), flush=True)


__lcb_call()
"""
    % RESULT_MARKER
)


@dataclasses.dataclass
class TestVerdict:
    index: int
    verdict: str  # passed | wrong_answer | runtime_error | timeout | memory | output_limit | sandbox_error | not_run
    detail: str = ""
    wall_time_s: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class GradeResult:
    passed: bool
    verdicts: List[TestVerdict]

    @property
    def num_passed(self) -> int:
        return sum(v.verdict == "passed" for v in self.verdicts)


def extract_last_code_block(response: str) -> Optional[str]:
    """The last fenced code block of ``response``, stripped; ``None`` when there is none."""
    blocks = CODE_BLOCK.findall(response or "")
    return blocks[-1].strip() if blocks else None


def parse_tests(ground_truth: Any) -> List[Dict[str, Any]]:
    """The test list from a row's ground truth (a JSON string or an already parsed list)."""
    tests = json.loads(ground_truth) if isinstance(ground_truth, (str, bytes)) else ground_truth
    if not isinstance(tests, list) or not tests:
        raise ValueError("lcb ground_truth must be a non-empty JSON list of tests")
    for index, test in enumerate(tests):
        if not isinstance(test, dict) or "input" not in test or "output" not in test:
            raise ValueError(
                f"lcb test {index} must be an object with 'input' and 'output', got {test!r:.200}"
            )
        if test.get("testtype", "stdin") not in ("stdin", "functional"):
            raise ValueError(
                f"lcb test {index}: testtype must be 'stdin' or 'functional', got {test.get('testtype')!r}"
            )
        if test.get("testtype") == "functional" and not (test.get("metadata") or {}).get("func_name"):
            raise ValueError(f"lcb test {index} is functional but has no metadata.func_name")
    return tests


def _decimal_line(line: str) -> Optional[List[Decimal]]:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def stdout_matches(actual: str, expected: str) -> bool:
    """Line by line after stripping; a line also matches when its tokens are equal as decimals."""
    actual_lines = [line.strip() for line in actual.strip().split("\n")]
    expected_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(actual_lines) != len(expected_lines):
        return False
    for got, want in zip(actual_lines, expected_lines):
        if got == want:
            continue
        got_numbers, want_numbers = _decimal_line(got), _decimal_line(want)
        if got_numbers is None or want_numbers is None or got_numbers != want_numbers:
            return False
    return True


def _failure_verdict(result: RunResult) -> str:
    return {
        Status.TIMEOUT: "timeout",
        Status.MEMORY: "memory",
        Status.OUTPUT_LIMIT: "output_limit",
        Status.SANDBOX_ERROR: "sandbox_error",
    }.get(result.status, "runtime_error")


def _short(text: str, length: int = 300) -> str:
    return text if len(text) <= length else text[: length // 2] + " ...(cut)... " + text[-length // 2 :]


def run_test(sandbox: Sandbox, code: str, test: Dict[str, Any], index: int, limits: Limits) -> TestVerdict:
    if test.get("testtype", "stdin") == "functional":
        func_name = test["metadata"]["func_name"]
        try:
            args = [json.loads(line) for line in str(test["input"]).split("\n")]
            expected = json.loads(test["output"])
        except json.JSONDecodeError as exc:
            return TestVerdict(index, "sandbox_error", f"test data is not JSON: {exc}")
        request = RunRequest(
            code=PREAMBLE + "\n" + code + FUNCTIONAL_HARNESS,
            limits=limits,
            files={"__lcb_args.json": json.dumps({"func_name": func_name, "args": args})},
        )
        result = sandbox.run(request)
        if result.status != Status.OK:
            return TestVerdict(
                index, _failure_verdict(result), _short(result.stderr or result.message), result.wall_time_s
            )
        lines = [line for line in result.stdout.split("\n") if line.startswith(RESULT_MARKER)]
        if not lines:
            return TestVerdict(index, "runtime_error", "the function returned no value", result.wall_time_s)
        value = json.loads(lines[-1][len(RESULT_MARKER) :])
        if value != expected:
            return TestVerdict(
                index,
                "wrong_answer",
                f"got {_short(repr(value))}, expected {_short(repr(expected))}",
                result.wall_time_s,
            )
        return TestVerdict(index, "passed", "", result.wall_time_s)
    result = sandbox.run(RunRequest(code=PREAMBLE + "\n" + code, stdin=str(test["input"]), limits=limits))
    if result.status != Status.OK:
        return TestVerdict(
            index, _failure_verdict(result), _short(result.stderr or result.message), result.wall_time_s
        )
    if not stdout_matches(result.stdout, str(test["output"])):
        return TestVerdict(
            index,
            "wrong_answer",
            f"got {_short(result.stdout)!r}, expected {_short(str(test['output']))!r}",
            result.wall_time_s,
        )
    return TestVerdict(index, "passed", "", result.wall_time_s)


def grade(
    sandbox: Sandbox,
    code: str,
    tests: Sequence[Dict[str, Any]],
    limits: Limits,
    stop_on_first_failure: bool = True,
) -> GradeResult:
    verdicts: List[TestVerdict] = []
    for index, test in enumerate(tests):
        verdict = run_test(sandbox, code, test, index, limits)
        verdicts.append(verdict)
        if verdict.verdict != "passed" and stop_on_first_failure:
            verdicts.extend(TestVerdict(i, "not_run") for i in range(index + 1, len(tests)))
            break
    return GradeResult(passed=all(v.verdict == "passed" for v in verdicts), verdicts=verdicts)
