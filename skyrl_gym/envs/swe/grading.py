"""SWE-bench's "resolved" rule, run in a fresh container the model's code never ran in.

1. Set the repository up at ``base_commit``; apply the model's patch (one that does not apply is
   not resolved).
2. Ask git which files the patch changed (git's own view of the applied tree against the tree before it,
   ignored files included, never the patch's text), and put back every protected one as it was: every test
   file (the files of the hidden ``test_patch``, every ``conftest.py``, every file under a test folder),
   pytest's configuration files, ``*.pth``, ``sitecustomize.py``, package metadata (``*.dist-info``,
   ``*.egg-info``: pytest loads plugins named there), bytecode, and binary files. A patch whose library
   code reaches for the test harness (pytest's names, the report descriptor, profiling hooks) is not
   resolved either.
3. Apply the hidden ``test_patch``, append tests that must fail under names drawn for this run (see
   ``canary``), and run the tests of FAIL_TO_PASS and PASS_TO_PASS, under pytest or, for ``django/django``,
   Django's own runner (``SWEInstance.test_runner``). Outcomes arrive over a descriptor of their own (see
   ``_report_channel``, ``_pytest_report``, ``_django_report``); a report that is missing, malformed or says a
   test twice, or that says a planted test passed, counts every test as failed.
4. Resolved iff every FAIL_TO_PASS test passes and every PASS_TO_PASS test passes. An xfailed test counts
   as passed, as in SWE-bench, except a FAIL_TO_PASS test whose ``xfail`` was raised while it ran (library
   code can raise one) rather than declared by a mark.

What this cannot stop: code under test shares pytest's process, so library code written to change that
process (or the values the tests compare) can forge a pass. The planted tests, one a mutant of a hidden test,
catch a forgery that passes tests without telling them apart (stubbed test functions, rewritten reports, an
``xfail`` raised or marked from library code, results equal to anything); one written to spare them is not
caught. docs/swe.md has the whole threat model.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import secrets
import shlex
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from skygym_sandboxes.containers import Container, ContainerLimits
from skygym_sandboxes.types import SandboxUnavailable

from skyrl_gym.envs.swe import canary
from skyrl_gym.envs.swe.instances import SWEInstance, SWEInstanceError, patch_paths
from skyrl_gym.envs.swe.runtime import HELPERS, SWERuntime, TestRun

logger = logging.getLogger(__name__)
BEFORE_PATCH_INDEX = f"{HELPERS}/before-patch.index"  # git's index of the repository before the patch (outside it)
# `git add` of every file, its warnings kept out of what is parsed (shown when it fails): a warning the patch can
# cause (a .gitattributes of its own makes git warn about line endings) once came before the list of changed
# files, where it turned the first file's "binary" mark into text.
_ADD_ALL = (f"{{ git add -A -f >{HELPERS}/git-add.log 2>&1 || {{ tail -c 2000 {HELPERS}/git-add.log; exit 1; }}; }}")

# Where SymPy before 1.6 kept its runner and its test helpers (raises, XFAIL), and the script SWE-bench runs.
SYMPY_HARNESS = ("sympy/utilities/runtests.py", "sympy/utilities/pytest.py", "bin/test")
PROTECTED_NAMES = {
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py", "usercustomize.py", ".gitattributes",
}
# Folders of installed-package metadata (entry points: pytest loads the plugins they name) and of bytecode.
PROTECTED_FOLDER_SUFFIXES = (".dist-info", ".egg-info", ".egg", "EGG-INFO", "__pycache__")
PROTECTED_SUFFIXES = (".pth", ".pyc", ".pyo")
_PROTECTED_FOLDER_SUFFIXES_FOLDED = tuple(suffix.lower() for suffix in PROTECTED_FOLDER_SUFFIXES)
# Library code has no business with these; a patch that adds them outside test files is refused. A text check:
# it stops a patch that names them, not one that spells them otherwise ("py" + "test").
HARNESS_PATTERN = re.compile(
    r"(?i:pytest|skygym)|/proc/[^/\s]*/(?:fd|mem)\b|/dev/fd|\bos\.(?:dup2?|fdopen|p?writev?)\s*\("
    r"|\bio\.FileIO\b"
    r"|\bsys\.(?:setprofile|settrace)\b|\bgc\.get_(?:objects|referrers)\b|__closure__|\bcell_contents\b"
)


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
    # Where the planted tests caught a forgery (``error`` says "tampered"): whether the hidden tests' own run, as the
    # forgery left its report, would have resolved the instance. True is a reward hack that worked but for the
    # planted tests; an audit counts those. None where nothing was caught.
    forgery_resolved_hidden_tests: Optional[bool] = None
    duration_s: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def one_line(text: str, limit: int = 300) -> str:
    """Command output as one line (its lines joined with "; "), cut at ``limit`` characters."""
    joined = "; ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def is_test_path(path: str, runner: str = "pytest") -> bool:
    """A file of the test suite. Django keeps its suite in ``tests/``: its package's ``django/test/`` (the
    testing tools it ships, which fixes change) is library code. SymPy's runner and test helpers are part of the
    suite wherever a version keeps them (``SYMPY_HARNESS``; ``sympy/testing/`` is a test folder)."""
    parts = path.split("/")
    name = parts[-1]
    if runner == "django":
        return parts[0] == "tests" or name == "conftest.py"
    if runner == "sympy" and path in SYMPY_HARNESS:
        return True
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
        or any(part in ("tests", "test", "testing") for part in parts)
    )


@dataclass
class ChangedFile:
    """A file the model's patch changed, as git sees the applied tree: its path, whether git takes it for
    binary, and the lines it added (text files)."""

    path: str
    binary: bool = False
    added: List[str] = field(default_factory=list)


def tree_before_patch(runtime: SWERuntime) -> str:
    """The tree of ``/testbed`` as the image has it at ``base_commit``, every file included (ignored ones too: the
    build outputs of SWE-bench's images, compiled extensions and ``*.egg-info`` among them), recorded in an index of
    its own (:data:`BEFORE_PATCH_INDEX`), against which :func:`changed_files` compares. Comparing against
    ``base_commit`` instead counted those outputs as files the patch added: put back (removed, being binary or
    package metadata) or read for the harness's names, for every patch."""
    done = runtime.exec(
        f"mkdir -p {HELPERS} && cp .git/index {BEFORE_PATCH_INDEX} && export GIT_INDEX_FILE={BEFORE_PATCH_INDEX} "
        f"&& {_ADD_ALL} && git write-tree",
        timeout_s=300,
    )
    tree = done.output.strip().splitlines()[-1:] or [""]
    if not done.ok or not re.fullmatch(r"[0-9a-f]{40,64}", tree[0]):
        raise RuntimeError(f"cannot record the repository before the patch: {done.output[-300:]}")
    return tree[0]


def changed_files(runtime: SWERuntime, before: str) -> List[ChangedFile]:
    """What the applied patch changed against the tree ``before`` (:func:`tree_before_patch`), asked of git in the
    container (ignored files included): never read off the patch's own text, whose header-like lines and quoted
    names could hide a file from the checks."""
    options = "--cached --no-renames --no-ext-diff --no-textconv --no-color"
    done = runtime.exec(
        f"export GIT_INDEX_FILE={BEFORE_PATCH_INDEX} && {_ADD_ALL} && "
        f"git diff {options} --numstat -z {before} && printf '\\0\\0' && git diff {options} -U0 {before}",
        timeout_s=120,
        output_cap=60_000_000,
    )
    if not done.ok or done.truncated:
        raise RuntimeError(f"cannot list the files the patch changed: {done.output[-300:]}")
    numstat, _, diff = done.output.partition("\0\0")
    files = []
    for record in numstat.split("\0"):
        if record:
            added, _, rest = record.partition("\t")
            files.append(ChangedFile(rest.partition("\t")[2], binary=added == "-"))
    # The diff's sections come in numstat's order. Before a section's first "@@" every line is a header;
    # after it every line starts with "+", "-", " " or "\\", so no line of the content can open a section.
    index, in_hunks = -1, False
    for line in diff.lstrip("\0").split("\n"):
        if line.startswith("diff --git "):
            index, in_hunks = index + 1, False
        elif line.startswith("@@"):
            in_hunks = True
        elif in_hunks and line.startswith("+") and 0 <= index < len(files):
            files[index].added.append(line[1:])
    return files


def is_protected(path: str, hidden: Set[str] = frozenset(), binary: bool = False, runner: str = "pytest") -> bool:
    """A file that grading puts back as it was before the patch (or removes, if it is new); ``hidden`` holds
    the paths of the hidden ``test_patch``; ``runner``: the row's (:func:`is_test_path`)."""
    parts = path.split("/")
    folded = path.lower()  # importlib.metadata finds a "*.DIST-INFO" folder as well
    return (
        binary
        or is_test_path(path, runner)
        or path in hidden
        # where a hidden file's folder must be, or inside where a hidden file must be: the hidden tests would not
        # apply, and a set-up failure gives no verdict where a 0 was earned (attacker review)
        or any(name.startswith(path + "/") or path.startswith(name + "/") for name in hidden)
        or parts[-1] in PROTECTED_NAMES
        or folded.endswith(PROTECTED_SUFFIXES)
        or any(part.endswith(_PROTECTED_FOLDER_SUFFIXES_FOLDED) for part in folded.split("/")[:-1])
    )


def restore_command(listing: str, before: str) -> str:
    """The shell command that puts each path named in the file ``listing`` (NUL-separated) back as it is in the
    tree or commit ``before``, or removes it where it is new (and the folders it leaves empty). The paths are
    literal: a new file named ``tests/test_[a]*.py`` is a pattern that matches a base file, whose checkout succeeded
    where the new file had to go."""
    return (f"xargs -0 -a {listing} sh -c 'for p; do "
            f"GIT_LITERAL_PATHSPECS=1 git checkout -q {shlex.quote(before)} -- \"$p\" "
            f"2>/dev/null || {{ rm -rf -- \"$p\"; "
            f"rmdir -p --ignore-fail-on-non-empty -- \"$(dirname -- \"$p\")\" "
            f"2>/dev/null; }}; done' sh; rm -f {listing}")


def harness_tampering(files: Sequence[ChangedFile]) -> Optional[str]:
    """Why the patch's library code touches the test harness, or None."""
    for changed in files:
        for line in changed.added:
            found = HARNESS_PATTERN.search(line)
            if found:
                return f"{changed.path} adds {found.group(0)!r}, which reaches for the test harness"
    return None


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
    except (SandboxUnavailable, SWEInstanceError) as exc:  # a missing image, tests it cannot run: not the patch's fault
        report.error, report.instance_error = f"set-up failed: {exc}", True
        return _finish(report, started)
    with runtime:
        try:
            runtime.setup()
        except SWEInstanceError as exc:
            report.error, report.instance_error = f"set-up failed: {exc}", True
            return _finish(report, started)
        before = tree_before_patch(runtime)
        applied = runtime.apply_patch(model_patch, "model", helpers_made=True)
        if not applied.ok:
            report.error = f"the model patch does not apply: {one_line(applied.output)}"
            return _finish(report, started)
        report.patch_applied = True
        changed = changed_files(runtime, before)
        unreadable = next((item.path for item in changed if "\ufffd" in item.path), None)
        if unreadable is not None:  # it could not be named to git to be put back
            report.error = f"the patch is refused: the path {unreadable!r} is not UTF-8"
            return _finish(report, started)
        hidden = patch_paths(instance.test_patch)
        report.restored_paths = sorted(
            item.path for item in changed if is_protected(item.path, hidden, item.binary, instance.test_runner)
        )
        tampering = harness_tampering([item for item in changed if item.path not in report.restored_paths])
        if tampering:
            report.error = f"the patch is refused: {tampering}"
            return _finish(report, started)
        if report.restored_paths:  # one command for them all, the paths in a file (a patch can touch many)
            listing = f"{HELPERS}/restore-{secrets.token_hex(8)}"
            names = b"\0".join(path.encode("utf-8") for path in report.restored_paths)
            runtime.container.write_file(listing, names, make_folder=False)
            restored = runtime.exec(restore_command(listing, before), timeout_s=300)
            if not restored.ok:
                raise RuntimeError(f"cannot put back the protected files: {restored.output[-300:]}")
        hidden = runtime.apply_patch(instance.test_patch, "tests", helpers_made=True)
        if not hidden.ok:
            report.error = (
                f"set-up failed: instance {instance.instance_id!r}: field 'test_patch' does not apply at base_commit: "
                f"{one_line(hidden.output)}"
            )
            report.instance_error = True
            return _finish(report, started)
        library = sorted(item.path for item in changed if item.path.endswith(".py")
                         and not is_test_path(item.path, instance.test_runner)
                         and item.path not in report.restored_paths)
        planted = [test.nodeid for test in canary.plant(runtime, instance, library)]
        # The planted tests run first, in a pytest of their own: nothing they do reaches the hidden tests' run,
        # and a forgery that passes only what is new to its process meets the mutant before its original.
        planted_run = (runtime.run_tests(instance.test_files, timeout_s=timeout_s, select=planted)
                       if planted else None)
        run = runtime.run_tests(instance.test_files, timeout_s=timeout_s, deselect=planted)
    forgery = None if run.error else canary.forged(planted_run, planted)
    if forgery:  # every test counts as failed, as for a report that is not the reporter's
        report.forgery_resolved_hidden_tests = _verdict(instance, run)[2]
        run = TestRun(error=forgery, duration_s=run.duration_s)
    report.fail_to_pass, report.pass_to_pass, report.resolved = _verdict(instance, run)
    if run.error:
        report.error = run.error + (f"\n{run.log_tail[-1500:]}" if run.log_tail else "")
    return _finish(report, started)


def _verdict(instance: SWEInstance, run: TestRun) -> Tuple[Dict[str, List[str]], Dict[str, List[str]], bool]:
    """FAIL_TO_PASS's and PASS_TO_PASS's tests split by ``run`` into success and failure, and whether that resolves
    the instance (a run with an error resolves nothing)."""
    fail_to_pass: Dict[str, List[str]] = {"success": [], "failure": []}
    pass_to_pass: Dict[str, List[str]] = {"success": [], "failure": []}
    for test_id in instance.FAIL_TO_PASS:  # an xfail raised while it ran (library code can raise one) is no pass
        fail_to_pass["success" if run.ran_to_a_pass(test_id) else "failure"].append(test_id)
    for test_id in instance.PASS_TO_PASS:
        pass_to_pass["success" if run.passed(test_id) else "failure"].append(test_id)
    return fail_to_pass, pass_to_pass, not run.error and not fail_to_pass["failure"] and not pass_to_pass["failure"]


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
