"""Grading code in a sandbox with a verdict the candidate cannot forge (shared by ``humaneval`` and ``lcb``).

The whole grading of one response is one sandboxed run of the trusted harness
(:mod:`skyrl_gym.envs._sandbox_harness`): its program is a small bootstrap that loads the harness from
the run's files (compiled here, or its source when the sandbox's Python differs), its stdin carries the
secrets (a nonce made here for this run, the tests and their expected outputs, HumanEval's
``check``). The harness runs the candidate in processes of its own that have no handle on the
harness's stdout and never see the secrets, compares the results itself, and writes one line: the
nonce and a JSON report. This side accepts the report only when the run exited with status 0 and
its whole stdout is exactly that one line; anything else (no line, two lines, a wrong nonce, a
killed harness, a sandbox failure) is a failed grading with a reason, never a pass.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import secrets
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from skygym_sandboxes import Limits, RunRequest, RunResult, Sandbox, Status

from skyrl_gym.envs import _sandbox_harness

HARNESS_SOURCE = Path(_sandbox_harness.__file__).read_text(encoding="utf-8")


def _code_files() -> Dict[str, bytes]:
    """The harness and runner, compiled here (compiling them in every run would cost more than the
    grading of a small answer), with the interpreter tag they were compiled for, and the source for
    sandboxes whose Python differs (the bootstrap then compiles it)."""
    import importlib.util

    harness = marshal.dumps(compile(HARNESS_SOURCE, "<grader-harness>", "exec"))
    runner = marshal.dumps(compile(_sandbox_harness.runner_source(HARNESS_SOURCE), "<grader-runner>", "exec"))
    tag = f"{sys.implementation.cache_tag}:{importlib.util.MAGIC_NUMBER!r}".encode()
    return {
        "grader_code.bin": tag + b"\n" + len(harness).to_bytes(4, "big") + harness + runner,
        "grader_harness.py": HARNESS_SOURCE.encode("utf-8"),
    }


# The sandboxed program: load the harness (its bytecode when this interpreter matches, else its
# source), then run it. Everything it reads was written by the sandbox before the run started.
BOOTSTRAP = """\
import sys
def _grader_start():
    marker = sys.modules.get("_frozen_importlib_external")
    tag = ("%s:%r" % (sys.implementation.cache_tag, getattr(marker, "MAGIC_NUMBER", None))).encode()
    with open("grader_code.bin", "rb") as handle:
        head, _, rest = handle.read().partition(b"\\n")
    namespace = {"__name__": "grader_harness", "__builtins__": __builtins__}
    if head == tag:
        import marshal
        size = int.from_bytes(rest[:4], "big")
        exec(marshal.loads(rest[4 : 4 + size]), namespace)
        runner = ("marshal", rest[4 + size :])
    else:
        with open("grader_harness.py", encoding="utf-8") as handle:
            source = handle.read()
        exec(compile(source, "<grader-harness>", "exec"), namespace)
        runner = ("source", namespace["runner_source"](source).encode("utf-8"))
    namespace["harness_main"](runner)
_grader_start()
"""
CODE_FILES = _code_files()
# Time the harness needs besides the tests themselves: its own start and the runner's interpreter
# (at most RUNNER_STARTUP_S, which no test's time limit counts), then its own work between tests.
RUNNER_STARTUP_S = 5.0
HARNESS_OVERHEAD_S = 10.0
VERDICTS = (
    "passed",
    "wrong_answer",
    "runtime_error",
    "timeout",
    "memory",
    "output_limit",
    "sandbox_error",
    "not_run",
)


@dataclasses.dataclass
class TestVerdict:
    index: int
    verdict: str  # one of VERDICTS
    detail: str = ""
    wall_time_s: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class GradeResult:
    """``passed`` only when the harness's report was accepted and every test passed; otherwise
    ``reason`` says why (the first failing test, or why no report was accepted)."""

    passed: bool
    verdicts: List[TestVerdict]
    reason: str = ""
    stderr: str = ""  # the candidate's stderr, and the test's traceback for a failed check
    sandbox_status: str = ""

    @property
    def num_passed(self) -> int:
        return sum(v.verdict == "passed" for v in self.verdicts)


def _no_report(tests: int, verdict: str, reason: str, result: Optional[RunResult] = None) -> GradeResult:
    detail = reason
    return GradeResult(
        passed=False,
        verdicts=[TestVerdict(0, verdict, detail)] + [TestVerdict(i, "not_run") for i in range(1, tests)],
        reason=reason,
        stderr=(result.stderr[-1000:] if result is not None else ""),
        sandbox_status=(result.status.value if result is not None else ""),
    )


def parse_report(result: RunResult, nonce: str, tests: int) -> GradeResult:
    """The grade from a finished harness run: a report is accepted only from a run that exited
    with status 0 and printed exactly ``nonce + JSON + newline`` and nothing else."""
    if result.status == Status.SANDBOX_ERROR:
        return _no_report(tests, "sandbox_error", f"the sandbox failed: {result.message}", result)
    stdout = result.stdout
    if result.status != Status.OK or result.exit_code != 0:
        why = result.message or f"exit code {result.exit_code}"
        return _no_report(
            tests,
            "runtime_error",
            f"the grading harness did not finish (sandbox status {result.status.value}: {why}); no verdict",
            result,
        )
    if (
        result.stdout_truncated
        or stdout.count(nonce) != 1
        or not stdout.startswith(nonce)
        or not stdout.endswith("\n")
        or stdout.count("\n") != 1
    ):
        return _no_report(
            tests,
            "runtime_error",
            "the grading harness's output is not one verdict line with this run's nonce",
            result,
        )
    try:
        report = json.loads(stdout[len(nonce) : -1])
    except ValueError:
        return _no_report(tests, "runtime_error", "the grading harness's verdict is not JSON", result)
    if not isinstance(report, dict):
        return _no_report(tests, "runtime_error", "the grading harness's verdict is not an object", result)
    if "error" in report:  # the harness broke down; a candidate can cause that (by signalling it)
        return _no_report(tests, "runtime_error", str(report["error"]), result)
    rows = report.get("tests")
    if not isinstance(rows, list) or len(rows) != tests:
        return _no_report(
            tests,
            "runtime_error",
            f"the grading harness reported {len(rows or [])} tests, expected {tests}",
            result,
        )
    verdicts: List[TestVerdict] = []
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("index") != index or row.get("verdict") not in VERDICTS:
            return _no_report(
                tests, "runtime_error", f"the grading harness's verdict for test {index} is malformed", result
            )
        verdicts.append(
            TestVerdict(
                index, str(row["verdict"]), str(row.get("detail") or ""), float(row.get("wall_time_s") or 0.0)
            )
        )
    failed = next((v for v in verdicts if v.verdict != "passed"), None)
    reason = (
        ""
        if failed is None
        else f"test {failed.index}: {failed.verdict}" + (f": {failed.detail}" if failed.detail else "")
    )
    return GradeResult(
        passed=failed is None,
        verdicts=verdicts,
        reason=reason,
        stderr=str(report.get("stderr") or ""),
        sandbox_status=result.status.value,
    )


def run_harness(sandbox: Sandbox, job: Dict[str, Any], tests: int, limits: Limits) -> GradeResult:
    """Grade ``job`` (the harness's payload without its nonce) in one sandboxed run.

    ``limits.wall_s`` and ``limits.cpu_s`` are per test: the harness enforces the wall time of each
    test itself and gives each candidate process the CPU time; the run as a whole gets the sum plus
    the harness's own start-up, or, where ``job["total_timeout"]`` is set, that budget plus one test's time
    (the harness starts no test once the budget is spent).
    """
    per_test = float(limits.wall_s or 10.0)
    nonce = "\x1eskyrl-verdict-" + secrets.token_hex(16) + ":"
    payload = dict(
        job,
        nonce=nonce,
        timeout=per_test,
        output_bytes=limits.output_bytes or 1_000_000,
        startup_s=RUNNER_STARTUP_S,
    )
    total = per_test * max(tests, 1)
    if job.get("total_timeout"):
        total = min(total, float(job["total_timeout"]) + per_test)
    total += HARNESS_OVERHEAD_S
    run_limits = limits.replace(wall_s=total, cpu_s=total)
    request = RunRequest(code=BOOTSTRAP, stdin=json.dumps(payload), files=dict(CODE_FILES), limits=run_limits)
    result = sandbox.run(request)
    return parse_report(result, nonce, tests)


def stdin_test(test_input: str, expected_output: str) -> Dict[str, Any]:
    """A test that runs the program with ``test_input`` on stdin; its stdout must match
    ``expected_output`` (see :func:`skyrl_gym.envs._sandbox_harness.stdout_matches`)."""
    return {"kind": "stdin", "input": str(test_input), "output": str(expected_output)}


def call_test(func_name: str, args: Sequence[Any], expected: Any) -> Dict[str, Any]:
    """A test that calls ``func_name`` (a method of ``Solution`` when the code defines that class)
    with ``args`` in a fresh candidate process; the returned value, normalised like JSON (tuples as
    lists), must equal ``expected``."""
    return {"kind": "call", "func_name": str(func_name), "args": list(args), "expected": expected}


def broken_test(reason: str) -> Dict[str, Any]:
    """A test whose data could not be read: it fails with ``sandbox_error`` and ``reason``."""
    return {"kind": "call", "bad": reason}


def grade_tests(
    sandbox: Sandbox,
    code: str,
    tests: Sequence[Dict[str, Any]],
    limits: Limits,
    preamble: str = "",
    stop_on_first_failure: bool = True,
    total_timeout: Optional[float] = None,
) -> GradeResult:
    """Grade ``code`` (after ``preamble``) on ``tests`` built by :func:`stdin_test` / :func:`call_test`;
    each test runs in a fresh candidate process with ``limits.wall_s`` seconds; with ``total_timeout``, no test
    starts once the tests have taken that many seconds in all (those left are a ``timeout``)."""
    job = {
        "mode": "tests",
        "code": code,
        "preamble": preamble,
        "stop_on_first_failure": stop_on_first_failure,
        "tests": list(tests),
        "total_timeout": total_timeout,
    }
    return run_harness(sandbox, job, len(tests), limits)


def grade_check(
    sandbox: Sandbox, program: str, prompt: str, test_code: str, entry_point: str, limits: Limits
) -> GradeResult:
    """HumanEval: ``program`` runs in the candidate process; ``prompt`` (for its helpers) and
    ``test_code`` run in the harness, whose ``check`` gets a proxy for ``entry_point``."""
    job = {
        "mode": "check",
        "code": program,
        "prompt": prompt,
        "test_code": test_code,
        "entry_point": entry_point,
    }
    return run_harness(sandbox, job, 1, limits)
