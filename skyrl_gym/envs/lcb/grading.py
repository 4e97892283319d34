"""LiveCodeBench-style grading in a sandbox.

A row's ``reward_spec.ground_truth`` is a JSON list of tests ``{"input", "output", "testtype":
"stdin" | "functional", "metadata": {"func_name": ...}}`` (SkyRL-gym's format). The last fenced
code block of the response is the program.

* ``stdin`` tests run the program with the input on stdin; the output matches when, line by line
  after stripping, each line is equal or parses to the same decimals.
* ``functional`` tests call ``func_name`` (a method of ``Solution`` when the code defines that
  class) with the input's lines parsed as JSON arguments; the return value (tuples as lists) must
  equal the JSON-parsed expected output.

All tests of a response are graded in one sandboxed run of the trusted harness
(:mod:`skyrl_gym.envs._grading`): every test runs the program in a fresh process with its own time
limit, the harness compares the results (the program never sees an expected output) and reports a
verdict the program cannot forge. Grading stops at the first failure.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence

from skygym_sandboxes import Limits, Sandbox
from skyrl_gym.envs._grading import (
    GradeResult,
    TestVerdict,
    broken_test,
    call_test,
    grade_tests,
    stdin_test,
)
from skyrl_gym.envs._sandbox_harness import stdout_matches

__all__ = [
    "PREAMBLE",
    "GradeResult",
    "TestVerdict",
    "extract_last_code_block",
    "grade",
    "parse_tests",
    "stdout_matches",
]

CODE_BLOCK = re.compile(r"```(?:\w+)?\n(.*?)```", re.DOTALL)
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

def extract_last_code_block(response: str) -> Optional[str]:
    """The last fenced code block of ``response``, stripped; ``None`` when there is none."""
    blocks = CODE_BLOCK.findall(response or "")
    return blocks[-1].strip() if blocks else None


def parse_tests(ground_truth: Any) -> List[Dict[str, Any]]:
    """The test list from a row's ground truth (a JSON string or an already parsed list)."""
    try:
        tests = json.loads(ground_truth) if isinstance(ground_truth, (str, bytes)) else ground_truth
    except RecursionError:
        raise ValueError("lcb ground_truth nests lists or objects too deep to read") from None
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


def _harness_test(test: Dict[str, Any]) -> Dict[str, Any]:
    if test.get("testtype", "stdin") != "functional":
        return stdin_test(str(test["input"]), str(test["output"]))
    try:
        args = [json.loads(line) for line in str(test["input"]).split("\n")]
        expected = json.loads(test["output"])
    except (json.JSONDecodeError, TypeError) as exc:
        return broken_test(f"test data is not JSON: {exc}")
    except RecursionError:
        return broken_test("test data nests lists or objects too deep to read")
    return call_test(test["metadata"]["func_name"], args, expected)


def grade(
    sandbox: Sandbox,
    code: str,
    tests: Sequence[Dict[str, Any]],
    limits: Limits,
    stop_on_first_failure: bool = True,
    total_timeout: Optional[float] = None,
) -> GradeResult:
    """Grade ``code`` against ``tests`` in one sandboxed run of the trusted harness (see
    :mod:`skyrl_gym.envs._grading`); ``limits.wall_s`` is per test, ``total_timeout`` (None: no bound but the
    tests' own) for them all."""
    harness_tests = [_harness_test(test) for test in tests]
    return grade_tests(sandbox, code, harness_tests, limits, PREAMBLE, stop_on_first_failure, total_timeout)
