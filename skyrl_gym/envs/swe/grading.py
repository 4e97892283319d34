"""SWE-bench's "resolved" rule, run in a fresh container the model's code never ran in.

1. Set the repository up at ``base_commit``; apply the model's patch (one that does not apply is
   not resolved).
2. Put back every protected file the patch touched: the files of the hidden ``test_patch``, every
   ``conftest.py``, pytest's configuration files, ``*.pth``, ``sitecustomize.py``. A patch whose
   library code reaches for the test harness (pytest's internals, the report descriptor,
   profiling hooks) is not resolved either.
3. Apply the hidden ``test_patch`` and run the tests of FAIL_TO_PASS and PASS_TO_PASS. Outcomes
   arrive over a descriptor of their own (see ``_pytest_report``); a report that is missing,
   malformed or says a test twice counts every test as failed.
4. Resolved iff every FAIL_TO_PASS test passes and every PASS_TO_PASS test passes.

What this cannot stop: code under test shares pytest's process, so code written to rewrite pytest's
outcomes from inside (without naming pytest in the patch, e.g. by walking ``gc`` objects) could forge
a pass. docs/swe.md has the whole threat model.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from skygym_sandboxes.containers import Container, ContainerLimits
from skygym_sandboxes.types import SandboxUnavailable

from skyrl_gym.envs.swe.instances import SWEInstance, SWEInstanceError
from skyrl_gym.envs.swe.runtime import SWERuntime

logger = logging.getLogger(__name__)

PROTECTED_NAMES = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py", "usercustomize.py"}
# Library code has no business with these; a patch that adds them outside test files is refused.
HARNESS_PATTERN = re.compile(
    r"\b_?pytest\b|SKYGYM_|/proc/self/fd|\bos\.(?:dup2?|fdopen|write)\s*\(|\bsys\.(?:setprofile|settrace)\b"
)
_DIFF_PATH = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|\+\+\+ b/(\S+)|--- a/(\S+)|rename (?:from|to) (\S+))", re.MULTILINE)


@dataclass
class EvalReport:
    instance_id: str
    resolved: bool = False
    patch_applied: bool = False
    fail_to_pass: Dict[str, List[str]] = field(default_factory=lambda: {"success": [], "failure": []})
    pass_to_pass: Dict[str, List[str]] = field(default_factory=lambda: {"success": [], "failure": []})
    error: str = ""  # one line for a patch that does not apply or a set-up failure
    instance_error: bool = False  # the set-up failed (a missing image, a broken row): not the patch's fault
    restored_paths: List[str] = field(default_factory=list)
    duration_s: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def one_line(text: str, limit: int = 300) -> str:
    """Command output as one line (its lines joined with "; "), cut at ``limit`` characters."""
    joined = "; ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def patch_paths(patch: str) -> Set[str]:
    """Every path a unified or git diff touches."""
    paths: Set[str] = set()
    for match in _DIFF_PATH.finditer(patch):
        paths.update(group for group in match.groups() if group and group != "/dev/null")
    return paths


def is_test_path(path: str) -> bool:
    parts = path.split("/")
    name = parts[-1]
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
        or any(part in ("tests", "test", "testing") for part in parts[:-1])
    )


def harness_tampering(patch: str) -> Optional[str]:
    """Why the patch's non-test code touches the test harness, or None."""
    current = ""
    for line in patch.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else line[4:]
            continue
        if line.startswith("+") and current and not is_test_path(current):
            found = HARNESS_PATTERN.search(line)
            if found:
                return f"{current} adds {found.group(0)!r}, which reaches for the test harness"
    return None


def protected_paths(instance: SWEInstance, model_patch: str) -> List[str]:
    hidden = patch_paths(instance.test_patch)
    touched = patch_paths(model_patch)
    return sorted(
        path
        for path in touched
        if path in hidden or path.rsplit("/", 1)[-1] in PROTECTED_NAMES or path.endswith(".pth")
    )


def evaluate_patch(
    instance: SWEInstance,
    model_patch: str,
    client: Any = None,
    timeout_s: float = 600.0,
    limits: Optional[ContainerLimits] = None,
    base_url: Optional[str] = None,
) -> EvalReport:
    """Apply ``model_patch`` and the hidden tests in a fresh container; the resolved verdict with per-test results."""
    started = time.monotonic()
    report = EvalReport(instance.instance_id)
    try:
        runtime = SWERuntime(instance, client=client, limits=limits, base_url=base_url)
    except SandboxUnavailable as exc:  # the image is missing: the instance's set-up, not the patch, failed
        report.error, report.instance_error = f"set-up failed: {exc}", True
        return _finish(report, started)
    with runtime:
        try:
            runtime.setup()
        except SWEInstanceError as exc:
            report.error, report.instance_error = f"set-up failed: {exc}", True
            return _finish(report, started)
        applied = runtime.apply_patch(model_patch, "model")
        if not applied.ok:
            report.error = f"the model patch does not apply: {one_line(applied.output)}"
            return _finish(report, started)
        report.patch_applied = True
        tampering = harness_tampering(model_patch)
        if tampering:
            report.error = f"the patch is refused: {tampering}"
            return _finish(report, started)
        report.restored_paths = protected_paths(instance, model_patch)
        for path in report.restored_paths:
            quoted = path.replace("'", "'\\''")
            runtime.exec(
                f"git checkout -q {instance.base_commit} -- '{quoted}' 2>/dev/null || rm -rf -- '{quoted}'", timeout_s=30
            )
        hidden = runtime.apply_patch(instance.test_patch, "tests")
        if not hidden.ok:
            report.error = (
                f"set-up failed: instance {instance.instance_id!r}: field 'test_patch' does not apply at base_commit: "
                f"{one_line(hidden.output)}"
            )
            report.instance_error = True
            return _finish(report, started)
        run = runtime.run_tests(instance.test_files, timeout_s=timeout_s)
    for name, tests in (("fail_to_pass", instance.FAIL_TO_PASS), ("pass_to_pass", instance.PASS_TO_PASS)):
        bucket = getattr(report, name)
        for test_id in tests:
            bucket["success" if run.passed(test_id) else "failure"].append(test_id)
    if run.error:
        report.error = run.error + (f"\n{run.log_tail[-1500:]}" if run.log_tail else "")
    report.resolved = not run.error and not report.fail_to_pass["failure"] and not report.pass_to_pass["failure"]
    return _finish(report, started)


def _finish(report: EvalReport, started: float) -> EvalReport:
    report.duration_s = round(time.monotonic() - started, 3)
    return report


def evaluate_many(
    instances: Sequence[SWEInstance],
    patches: Sequence[str],
    client: Any = None,
    workers: int = 2,
    timeout_s: float = 600.0,
    on_done: Callable[[EvalReport], None] = lambda report: None,
    attempts: int = 3,
    retry_delay_s: float = 1.0,
) -> List[EvalReport]:
    """:func:`evaluate_patch` for each (instance, patch), ``workers`` containers at a time, in input order.

    An unexpected failure of one evaluation (the engine did not answer, a container could not start or be
    written to: no verdict on the patch) is tried again, in a fresh container, up to ``attempts`` times in all;
    then it becomes that instance's error, never the batch's (the n-th try waits ``retry_delay_s * (n - 1)``
    seconds first). A verdict, resolved or not, is never retried."""

    stopping = threading.Event()  # Ctrl-C: an evaluation its stop broke is not tried again

    def one(pair: Any) -> EvalReport:
        instance, patch = pair
        for attempt in range(1, attempts + 1):
            try:
                report = evaluate_patch(instance, patch, client=client, timeout_s=timeout_s)
                break
            except Exception as exc:  # the engine went away, a container could not start, ...
                tries = f" (after {attempt} tries)" if attempt > 1 else ""
                report = EvalReport(instance.instance_id,
                                    error=f"evaluation failed{tries}: {type(exc).__name__}: {exc}")
                if attempt == attempts or stopping.is_set():
                    break
                logger.warning("%s: evaluation failed (%s: %s); trying again in a fresh container",
                               instance.instance_id, type(exc).__name__, exc)
                if stopping.wait(retry_delay_s * attempt):  # stopped while waiting
                    break
        on_done(report)
        return report

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="swe-eval")
    futures = [pool.submit(one, pair) for pair in zip(instances, patches)]
    try:
        return [future.result() for future in futures]
    except BaseException:
        # Ctrl-C or SIGTERM: nothing new starts, and the evaluations under way stop now (their containers are
        # removed, which ends the commands they wait on) rather than when their tests finish. Again until
        # they are done: one may have been starting its container.
        stopping.set()
        for future in futures:
            future.cancel()
        while not all(future.done() for future in futures):
            Container.close_all()
            concurrent.futures.wait(futures, timeout=1.0)
        raise
    finally:
        pool.shutdown(wait=True)
