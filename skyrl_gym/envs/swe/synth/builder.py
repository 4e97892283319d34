"""Build SWE task instances offline: project images, injected bugs, hidden tests, validated rows.

    skyrl-gym swe build --out DIR [--limit N] [--projects toolz,six]

For each project (see :mod:`.projects`):

1. fetch its source distribution with pip, checked against its pinned SHA-256 (cached under
   ``~/.cache/skyrl-gym/swe/sdists``);
2. build its image: the SWE base image (a debootstrap root filesystem with python3, pytest and git,
   loaded with ``docker import``) plus the source in ``/testbed``, committed as
   ``skyrl-gym-swe-<project>:<content hash>`` and reused while the hash holds; a project that the base
   image's Python already finds elsewhere (a Debian package) is refused: its pristine copy would sit in
   the agent's container;
3. run its whole test suite once in a work container, recording which functions each test calls;
4. try injected bugs (:mod:`.mutations`) one at a time, the operator kept least often so far first, in
   functions big enough for the operator, running the test files that cover the changed function. A bug
   is dropped when no test fails, when more than ``MAX_FAIL_TO_PASS`` do, when the first failure is an
   exception raised on the changed line, when it repeats an earlier bug (same function, same failures),
   or when the mechanical solver (:func:`mechanical_solver`: the builder's own operators on the functions
   the issue names) undoes it within ``SOLVER_TRIES`` tries;
5. write the instance: only the failing test *functions* are taken out of their files (the rest of the
   suite stays in the checkout for the agent to run) and come back in the hidden ``test_patch``;
   PASS_TO_PASS is every other test of the project that passes; the gold ``patch`` is the reversal; the
   problem statement is the symptom (:mod:`.issue`); ``base_commit`` is the one commit of the buggy tree;
6. check it: the checkout's own tests pass at ``base_commit``, and with the hidden tests back, in
   ``RELIABILITY_RUNS`` runs, FAIL_TO_PASS fails and PASS_TO_PASS passes every time (a test that flips
   is dropped from PASS_TO_PASS; an instance whose FAIL_TO_PASS flips is dropped);
7. check every kept instance in a fresh container: the gold patch must resolve it.

``build`` writes ``instances.jsonl``, ``build_summary.json`` and ``dataset_card.md`` (operators, failure
kinds, difficulty, projects, what was dropped and why). It keeps each finished project under
``progress/`` and resumes from there after an interruption.

Containers are removed on every exit path (errors, timeouts, Ctrl-C); images are only committed
once a project's source is in place.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import difflib
import functools
import hashlib
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from skygym_sandboxes.containers import Container, docker_client
from skygym_sandboxes.images.build_image import build_image, cache_dir, image_exists

from skyrl_gym import threadsafe_ast
from skyrl_gym.envs.swe.grading import evaluate_many
from skyrl_gym.envs.swe.instances import SWEInstance, normalize_row, write_jsonl
from skyrl_gym.envs.swe.runtime import BASE_TAG, COMMIT_ENV, CONTAINER_ENV, HELPERS, TESTBED, TestRun, run_pytest
from skyrl_gym.envs.swe.synth.hiding import HideError, file_of_test, hide_tests
from skyrl_gym.envs.swe.synth.issue import Failure, Forbidden, IssueLeak, IssueWriter, failure_kind, write_issue
from skyrl_gym.envs.swe.synth.mutations import (
    KINDS,
    MIN_FUNCTION_SIZE,
    MIN_STATEMENTS,
    Mutation,
    balanced_mutations,
    find_mutations,
)
from skyrl_gym.envs.swe.synth.projects import Project
from skyrl_gym.text import counted

BUILDER_VERSION = "2"
BASE_PACKAGES = ("python3", "python3-pytest", "git")
MAX_FAIL_TO_PASS = 20  # a bug that breaks more tests than this is not a task, it is an outage
RELIABILITY_RUNS = 3  # runs of the whole suite with the hidden tests back; a test that flips is flaky
SOLVER_TRIES = 20  # the mechanical solver's budget: a bug it undoes within this many tries is too easy
COMBINED_SHARE = 0.2  # about this share of each project's instances combine two or three bugs
# A function that this many tests call is so central that a bug in it breaks too many of them: not tried.
MAX_COVERING_TESTS = 150
MUTATIONS_PER_FUNCTION = 3  # mutations of one operator per function before the project counts as exhausted
PRISTINE = f"{HELPERS}/pristine"


class BuildError(RuntimeError):
    """A project could not be fetched or built; the message names the project and the step."""


@dataclass
class ProjectSummary:
    project: str
    tried: int = 0
    kept: int = 0
    discarded: Dict[str, int] = field(default_factory=lambda: collections.defaultdict(int))
    error: str = ""
    seconds: float = 0.0
    gold_failures: Dict[str, str] = field(default_factory=dict)
    tried_by_kind: Dict[str, int] = field(default_factory=collections.Counter)
    suite_tests: int = 0  # tests of the project that pass before any bug
    solver_undid: int = 0  # bugs the mechanical solver undid (dropped)
    flaky_or_dependent_tests: int = 0  # PASS_TO_PASS candidates dropped by the reliability runs

    def to_dict(self) -> Dict[str, Any]:
        return {**self.__dict__, "discarded": dict(self.discarded), "tried_by_kind": dict(self.tried_by_kind)}


# ----- sources ----------------------------------------------------------------------------------------
def sdist_cache() -> Path:
    return cache_dir() / "swe" / "sdists"


def fetch_sdist(project: Project) -> Path:
    """The project's source distribution, downloaded with pip once and cached. Its bytes must have the project's
    pinned SHA-256: pip checks the download (``--require-hashes``) before it runs the archive's own build code
    (pip reads a source distribution's metadata through its build backend), and a cached copy with other bytes
    is not used. The download goes to a folder of its own and is moved into the cache whole, so two builds
    fetching at once never see half a file."""
    if not re.fullmatch(r"[0-9a-f]{64}", project.sha256):
        raise BuildError(f"project {project.name!r}: no sha256 of its source distribution is pinned "
                         f"(got {project.sha256!r}); the builder runs only archives it can check")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*", project.requirement):
        raise BuildError(f"project {project.name!r}: the requirement {project.requirement!r} is not name==version")
    folder = sdist_cache() / project.name
    for cached in sorted(folder.glob("*.tar.gz")) if folder.is_dir() else []:
        if sdist_sha256(cached) == project.sha256:
            return cached
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=folder) as scratch:
        requirements, dest = Path(scratch) / "requirements.txt", Path(scratch) / "dest"
        requirements.write_text(f"{project.requirement} --hash=sha256:{project.sha256}\n")
        # the project from its source, its build backend (setuptools, hatchling...) from wheels: no more code
        # built than the one archive
        name = project.requirement.partition("==")[0]
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name, "--quiet",
                   "--require-hashes", "--dest", str(dest), "-r", str(requirements)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise BuildError(f"project {project.name!r}: could not download {project.requirement} with pip: "
                             f"{(done.stderr or done.stdout).strip()[-600:]}")
        got = sorted(dest.glob("*")) if dest.is_dir() else []
        pinned = [path for path in got if path.name.endswith(".tar.gz") and sdist_sha256(path) == project.sha256]
        if not pinned:
            raise BuildError(f"project {project.name!r}: pip downloaded {[path.name for path in got]} for "
                             f"{project.requirement}, not a .tar.gz source distribution with the pinned sha256")
        target = folder / pinned[0].name
        os.replace(pinned[0], target)
    return target


def sdist_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_sdist(path: Path) -> Dict[str, bytes]:
    """The regular files of a source distribution, keyed by path below its top folder."""
    files: Dict[str, bytes] = {}
    with tarfile.open(path) as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            _, _, rel = member.name.partition("/")
            if not rel or rel.startswith("/") or ".." in rel.split("/"):
                continue
            handle = archive.extractfile(member)
            if handle is not None:
                files[rel] = handle.read()
    return files


def project_sources(project: Project, files: Dict[str, bytes]) -> Dict[str, bytes]:
    """The library files to inject bugs into (test files and folders excluded)."""
    chosen = {}
    for rel, data in files.items():
        if not rel.endswith(".py"):
            continue
        in_source = any(
            rel == source or rel.startswith(source.rstrip("/") + "/") for source in project.sources
        )
        in_tests = any(rel == test or rel.startswith(test.rstrip("/") + "/") for test in project.tests)
        if (
            in_source
            and not in_tests
            and "/tests/" not in f"/{rel}"
            and not rel.rsplit("/", 1)[-1].startswith("test_")
        ):
            chosen[rel] = data
    return chosen


# ----- images -----------------------------------------------------------------------------------------
def base_image(client: Any) -> str:
    return build_image(tag=BASE_TAG, client=client, packages=BASE_PACKAGES)


def project_image(client: Any, project: Project, sdist: Path, files: Dict[str, bytes]) -> str:
    """``skyrl-gym-swe-<name>:<hash of base image, sdist, project spec>``, built unless it exists."""
    base = base_image(client)
    digest = hashlib.sha256()
    digest.update(client.images.get(base).id.encode())
    digest.update(hashlib.sha256(sdist.read_bytes()).digest())
    digest.update(json.dumps(project.spec(), sort_keys=True).encode())
    digest.update(BUILDER_VERSION.encode())
    repository, tag = f"skyrl-gym-swe-{project.name}", digest.hexdigest()[:16]
    if image_exists(client, f"{repository}:{tag}"):
        return f"{repository}:{tag}"
    env = dict(CONTAINER_ENV)
    if project.pythonpath:
        env["PYTHONPATH"] = f"{TESTBED}/{project.pythonpath}"
    with Container(base, client=client, kind="swe-build") as box:
        box.put_tree(TESTBED, files)
        changes = [f"WORKDIR {TESTBED}", *(f"ENV {key}={value}" for key, value in env.items())]
        return box.commit(repository, tag, changes=changes)


FIND_MODULES = """cd / && env -u PYTHONPATH python3 - {names} <<'EOF'
import importlib.util, sys
for name in sys.argv[1:]:
    spec = importlib.util.find_spec(name)
    print(spec.origin if spec and spec.origin else "")
EOF"""


def preinstalled(box: Container, project: Project) -> str:
    """Where the image's Python finds the project outside ``/testbed`` (a Debian package of it), or ""."""
    done = box.exec(FIND_MODULES.format(names=" ".join(project.import_names)), timeout_s=60)
    return ", ".join(line for line in done.output.split() if line.startswith("/"))


# ----- mutants ----------------------------------------------------------------------------------------
def _covering_tests(mutation: Mutation, baseline: TestRun) -> List[str]:
    name = mutation.function.rsplit(".", 1)[-1]
    first, def_line = mutation.function_lines
    covering = []
    for nodeid, outcome in baseline.outcomes.items():
        if not outcome.passed:
            continue
        for path, called, line in outcome.calls:
            if path == mutation.path and called == name and first <= line <= def_line:
                covering.append(nodeid)
                break
    return covering


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


# ----- the mechanical solver ------------------------------------------------------------------------------
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def mechanical_solver(
    sources: Dict[str, bytes],
    buggy_path: str,
    buggy: bytes,
    pristine: bytes,
    issue: str,
    tries: int = SOLVER_TRIES,
    known: Optional[Sequence[Mutation]] = None,
) -> Optional[int]:
    """The try (1-based) at which the builder's own operators give back ``pristine``, or None within ``tries``.

    The solver reads the issue, takes the project's functions it names (every function when it names none),
    and applies each operator at each site of those functions, in source order, one edit per try. It stands
    for the cheapest policy a reward could teach: it never reads the code's meaning."""
    named = set(_IDENTIFIER.findall(issue))
    files = {**sources, buggy_path: buggy}
    # ``known``: the other files' mutations, found once per project (the buggy file's are found here)
    others = (
        [m for m in known if m.path != buggy_path]
        if known is not None
        else [
            m
            for rel, data in sorted(sources.items())
            if rel != buggy_path
            for m in find_mutations(rel, data, validate=False)
        ]
    )
    candidates = sorted(
        [*others, *find_mutations(buggy_path, buggy, validate=False)], key=lambda m: (m.path, m.start)
    )
    chosen = [m for m in candidates if m.function.rsplit(".", 1)[-1] in named] or candidates
    attempts = (variant for m in chosen for variant in _both_ways(m, files[m.path]))
    for attempt, mutation in enumerate(itertools.islice(attempts, tries), 1):
        if mutation.path == buggy_path and mutation.apply(buggy) == pristine:
            return attempt
    return None


def _both_ways(mutation: Mutation, source: bytes) -> Iterator[Mutation]:
    """The mutation, and for an integer changed by one the change the other way (the operators' inverse)."""
    yield mutation
    text = source[mutation.start : mutation.end].decode("utf-8", "replace")
    if mutation.kind in ("off_by_one", "change_constant") and text.lstrip("-").isdigit():
        for value in (int(text) - 1, int(text) + 1):
            if str(value).encode() != mutation.replacement:
                yield dataclasses.replace(mutation, replacement=str(value).encode())


def difficulty(
    gold_patch: str, functions: Sequence[str], kind: str, solver_try: Optional[int], issue: str
) -> Dict[str, Any]:
    """A 1-5 estimate from what makes a bug hard to find: more lines, more functions, a wrong value rather than
    a crash, a changed function the issue does not name, one the mechanical solver does not undo."""
    changed = sum(
        1 for line in gold_patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )
    named = set(_IDENTIFIER.findall(issue))
    hidden = [name for name in functions if name.rsplit(".", 1)[-1] not in named]
    score = (
        1 + (changed > 2) + (len(functions) > 1) + (kind == "value") + (bool(hidden) and solver_try is None)
    )
    return {
        "score": min(score, 5),
        "lines_changed": changed,
        "functions": len(functions),
        "failure_kind": kind,
        "functions_named_in_issue": len(functions) - len(hidden),
        "mechanical_solver_try": solver_try,
    }


# ----- instances -----------------------------------------------------------------------------------------
INSTANCE_SCRIPT = """set -e
rm -rf /work && cp -a {pristine} /work && cd /work
git init -q && git add -A && git commit -q --no-verify -m pristine
cp -R {helpers}/state/. .
git add -A && git update-index -q --really-refresh && git add -A
git add -A && git diff --cached --binary HEAD > {helpers}/setup.patch
rm -rf .git && git init -q && git add -A && git commit -q --no-verify -m base
git rev-parse HEAD > {helpers}/base
for f in {library}; do cp {pristine}/"$f" "$f"; done
git diff --binary > {helpers}/gold.patch && git checkout -q -- .
for f in {tests}; do cp {pristine}/"$f" "$f"; done
git add -A && git diff --cached --binary > {helpers}/test.patch
"""


@dataclass
class Candidate:
    """A bug that made tests fail, before it becomes an instance."""

    mutations: List[Mutation]
    mutated: Dict[str, bytes]  # library path -> buggy bytes
    fail_to_pass: List[str]
    messages: Dict[str, str]
    kind: str  # "value" or the first exception's type


def hidden_state(pristine_files: Dict[str, bytes], fail_to_pass: Sequence[str]) -> Dict[str, bytes]:
    """test file -> its bytes without the FAIL_TO_PASS functions (:class:`HideError` when one cannot go)."""
    by_file: Dict[str, List[str]] = collections.defaultdict(list)
    for nodeid in fail_to_pass:
        by_file[file_of_test(nodeid)].append(nodeid)
    return {path: hide_tests(pristine_files[path], ids) for path, ids in by_file.items()}


def make_instance(
    box: Container,
    project: Project,
    candidate: Candidate,
    image: str,
    reduced: Dict[str, bytes],
    pass_to_pass: List[str],
    issue: str,
    issue_info: Dict[str, Any],
    extra: Dict[str, Any],
) -> SWEInstance:
    state = {**candidate.mutated, **reduced}
    box.exec(f"rm -rf {HELPERS}/state", timeout_s=30)
    box.put_tree(f"{HELPERS}/state", state)
    script = INSTANCE_SCRIPT.format(
        pristine=PRISTINE,
        helpers=HELPERS,
        library=" ".join(shlex.quote(p) for p in sorted(candidate.mutated)),
        tests=" ".join(shlex.quote(p) for p in sorted(reduced)),
    )
    done = box.exec(script, timeout_s=120, env=COMMIT_ENV)
    if not done.ok:
        raise BuildError(f"project {project.name!r}: writing the instance failed: {done.output[-400:]}")
    read = lambda name: box.read_file(f"{HELPERS}/{name}").decode("utf-8")
    key = hashlib.sha256(
        "|".join([project.requirement, *(f"{m.key}{m.replacement!r}" for m in candidate.mutations)]).encode()
    ).hexdigest()[:10]
    return SWEInstance(
        instance_id=f"{project.name}__synth-{key}",
        repo=project.repo,
        base_commit=read("base").strip(),
        problem_statement=issue,
        patch=read("gold.patch"),
        test_patch=read("test.patch"),
        FAIL_TO_PASS=candidate.fail_to_pass,
        PASS_TO_PASS=pass_to_pass,
        version=project.version,
        image_name=image,
        setup_patch=read("setup.patch"),
        test_cmd="pytest",
        extra={
            "mutation": {
                "kind": "+".join(m.kind for m in candidate.mutations),
                "path": candidate.mutations[0].path,
                "function": ",".join(m.function for m in candidate.mutations),
                "line": candidate.mutations[0].lineno,
                "description": "; ".join(m.description for m in candidate.mutations),
                "bugs": len(candidate.mutations),
            },
            "issue": issue_info,
            **extra,
        },
    )


def reliability(
    box: Container,
    project: Project,
    candidate: Candidate,
    reduced: Dict[str, bytes],
    pristine: Dict[str, bytes],
    baseline_passing: Sequence[str],
) -> Tuple[List[str], str, int]:
    """(PASS_TO_PASS, why the instance is dropped or "", tests dropped as flaky or hidden-dependent). ``pristine``:
    the project's files; the work container's ``/testbed`` is pristine again when this returns.

    The checkout at ``base_commit`` (bug in, hidden functions out) runs the whole suite once: what the agent can
    run must pass there. Then the hidden tests go back and the whole suite runs ``RELIABILITY_RUNS`` times, as
    the grader runs it: FAIL_TO_PASS must fail and PASS_TO_PASS pass every time."""
    originals = {path: pristine[path] for path in [*reduced, *candidate.mutated]}
    try:
        box.put_tree(TESTBED, {**candidate.mutated, **reduced})
        at_base = run_pytest(box, list(project.tests), timeout_s=600)
        if at_base.error:
            return [], "the suite did not run at base_commit", 0
        failing = set(candidate.fail_to_pass)
        candidates = [t for t in baseline_passing if t not in failing]
        present = [t for t in candidates if t in at_base.outcomes]
        stable = [t for t in present if at_base.passed(t)]
        box.put_tree(TESTBED, {path: pristine[path] for path in reduced})  # the hidden tests back, the bug in
        for _ in range(RELIABILITY_RUNS):
            run = run_pytest(box, list(project.tests), timeout_s=600)
            if run.error:
                return [], "the suite did not run to the end with the hidden tests", 0
            if any(run.passed(t) for t in failing):
                return [], "a FAIL_TO_PASS test passed in one of the runs (flaky)", 0
            stable = [t for t in stable if run.passed(t)]
        dropped = len(candidates) - len(stable)
        return stable, "", dropped
    finally:
        box.put_tree(TESTBED, originals)


def _crashes_on_changed_line(candidate: Candidate, outcomes: Dict[str, Any]) -> bool:
    first = outcomes.get(candidate.fail_to_pass[0])
    where = getattr(first, "where", None)
    if not where or candidate.kind == "value":
        return False
    changed = {(f"{TESTBED}/{m.path}", m.lineno) for m in candidate.mutations}
    return (str(where[0]), int(where[1])) in changed


class _Work:
    """One project's work container and what is known about it, for turning bugs into instances."""

    def __init__(
        self,
        box: Container,
        project: Project,
        files: Dict[str, bytes],
        sources: Dict[str, bytes],
        baseline_passing: List[str],
        image: str,
        writer: Optional[IssueWriter],
        summary: ProjectSummary,
    ) -> None:
        self.box, self.project, self.files, self.sources = box, project, files, sources
        self.baseline_passing, self.image, self.writer, self.summary = (
            baseline_passing,
            image,
            writer,
            summary,
        )
        self.seen_effects: set = set()
        self.mutations: List[
            Mutation
        ] = []  # every mutation of the pristine sources (the solver's candidates)

    def drop(self, why: str) -> None:
        self.summary.discarded[why] += 1

    def finish(self, mutations: List[Mutation], scope: List[str]) -> Optional[Tuple[Candidate, SWEInstance]]:
        """Run the bugs' tests, apply every filter, check reliability and write the instance; None when dropped."""
        box, files, sources = self.box, self.files, self.sources
        path = mutations[0].path
        original = sources[path]
        mutated = original
        for mutation in sorted(mutations, key=lambda m: m.start, reverse=True):
            mutated = mutation.apply(mutated)
        try:
            threadsafe_ast.parse(mutated)
        except (SyntaxError, ValueError):
            return self.drop("the edit does not parse")
        if mutated == original:
            return self.drop("the edit changes nothing")
        box.write_file(f"{TESTBED}/{path}", mutated)
        try:
            run = run_pytest(box, scope, timeout_s=120)
        finally:
            box.write_file(f"{TESTBED}/{path}", original)
        if run.error:
            return self.drop("the tests did not run to the end")
        before = [nodeid for nodeid in self.baseline_passing if _file_of(nodeid) in scope]
        fail_to_pass = [nodeid for nodeid in before if not run.passed(nodeid)]
        if not fail_to_pass:
            return self.drop("no test failed")
        if len(fail_to_pass) > MAX_FAIL_TO_PASS:
            return self.drop(f"more than {MAX_FAIL_TO_PASS} tests failed")
        messages = {
            nodeid: run.outcomes[nodeid].message if nodeid in run.outcomes else "" for nodeid in fail_to_pass
        }
        candidate = Candidate(
            mutations, {path: mutated}, fail_to_pass, messages, failure_kind(messages[fail_to_pass[0]])
        )
        if _crashes_on_changed_line(candidate, run.outcomes):
            return self.drop("the first failure is an exception raised on the changed line")
        effect = (path, tuple(m.function for m in mutations), tuple(sorted(messages.items())))
        if effect in self.seen_effects:
            return self.drop("a duplicate of an earlier bug (same function, same failures)")
        self.seen_effects.add(effect)
        try:
            reduced = hidden_state(files, fail_to_pass)
        except HideError as exc:
            return self.drop(f"a failing test cannot be hidden alone ({type(exc).__name__})")
        functions = [m.function for m in mutations]
        failures = [
            Failure(messages[n], failing_statement(files, n, getattr(run.outcomes.get(n), "where", None)))
            for n in fail_to_pass
        ]
        forbidden = Forbidden.of(
            fail_to_pass,
            sorted(reduced),
            _gold_lines(original, mutated),
            [f.rsplit(".", 1)[-1] for f in functions],
            [text for f in failures for text in (f.message, f.statement)],
        )
        try:
            issue, issue_info = write_issue(
                self.project.name, self.project.version, failures, forbidden, self.writer
            )
        except IssueLeak:
            return self.drop("no issue text without naming what is hidden")
        if not issue_info["symptoms"]:
            return self.drop("no symptom can be shown without naming the hidden tests")
        solved = self.solver(mutations, original, mutated, issue)
        if solved is not None:
            self.summary.solver_undid += 1
            return self.drop(f"the mechanical solver undoes it within {SOLVER_TRIES} tries")
        pass_to_pass, dropped_why, flaky = reliability(
            box, self.project, candidate, reduced, {**files, **sources}, self.baseline_passing
        )
        if dropped_why:
            return self.drop(dropped_why)
        self.summary.flaky_or_dependent_tests += flaky
        extra = {
            "difficulty": difficulty(_gold_lines(original, mutated), functions, candidate.kind, solved, issue)
        }
        instance = make_instance(
            box, self.project, candidate, self.image, reduced, pass_to_pass, issue, issue_info, extra
        )
        return candidate, instance

    def solver(self, mutations: List[Mutation], original: bytes, mutated: bytes, issue: str) -> Optional[int]:
        """The mechanical solver's tries to undo every bug, one edit each (None: it does not, within the budget)."""
        path, total = mutations[0].path, 0
        for index in range(len(mutations)):
            target = original
            for other in sorted(
                (m for i, m in enumerate(mutations) if i != index), key=lambda m: m.start, reverse=True
            ):
                target = other.apply(target)
            tries = mechanical_solver(self.sources, path, mutated, target, issue, known=self.mutations)
            if tries is None:
                return None
            total += tries
        return total if total <= SOLVER_TRIES else None

    def combine(
        self, singles: List[Tuple[Candidate, SWEInstance]], quota: int, share: float
    ) -> List[SWEInstance]:
        """``quota`` instances: combined tasks of two or three single bugs of one module (different functions),
        each checked like a single one, about ``share`` of them, then the singles not used."""
        left = list(singles)
        tried_alone: List[Tuple[Candidate, SWEInstance]] = []
        combined: List[SWEInstance] = []
        wanted = _combined_wanted(quota, share)
        for size in _COMBINED_SIZES * wanted:
            if len(combined) >= wanted or len(combined) + len(left) - size + 1 < quota:
                continue
            group = _group([item for item in left if item not in tried_alone], size)
            if group is None:
                continue
            mutations = [m for candidate, _ in group for m in candidate.mutations]
            scope = sorted(
                {_file_of(n) for candidate, _ in group for n in candidate.fail_to_pass}
                | {_file_of(n) for n in self.baseline_passing}
            )
            made = self.finish(mutations, scope)
            if made is None:
                self.drop("a combination of bugs failed a check")
                tried_alone.append(group[0])  # it stays a single task; others get paired next time
                continue
            combined.append(made[1])
            left = [item for item in left if item not in group]
        return (combined + [instance for _, instance in left])[:quota]


_COMBINED_SIZES = (3, 2)  # combined tasks of three bugs, then two, in turn


def _combined_wanted(quota: int, share: float) -> int:
    """How many of a project's ``quota`` instances are to be combined tasks."""
    return max(1, round(quota * share)) if quota >= 2 and share > 0 else 0


def _singles_needed(quota: int, share: float) -> int:
    """Single bugs to keep so that ``quota`` instances can hold the combined ones: a task of k bugs is one instance
    made of k singles (planning one extra single per combination left a project a single short of a second one)."""
    sizes = (_COMBINED_SIZES * quota)[: _combined_wanted(quota, share)]
    return quota + sum(size - 1 for size in sizes)


def _group(
    singles: List[Tuple[Candidate, SWEInstance]], size: int
) -> Optional[List[Tuple[Candidate, SWEInstance]]]:
    """``size`` single bugs of one file in different functions, or None."""
    by_path: Dict[str, List[Tuple[Candidate, SWEInstance]]] = collections.defaultdict(list)
    for item in singles:
        by_path[item[0].mutations[0].path].append(item)
    for items in by_path.values():
        chosen, functions = [], set()
        for item in items:
            function = item[0].mutations[0].function
            if function not in functions:
                chosen.append(item)
                functions.add(function)
            if len(chosen) == size:
                return chosen
    return None


def synthesize(
    client: Any,
    project: Project,
    quota: int,
    seed: int = 0,
    max_tries: Optional[int] = None,
    on_candidate: Callable[[], None] = lambda: None,
    writer: Optional[IssueWriter] = None,
    kept_by_kind: Optional[Dict[str, int]] = None,
    combined_share: float = COMBINED_SHARE,
) -> Tuple[List[SWEInstance], ProjectSummary]:
    """Up to ``quota`` instances of one project (see the module docstring, steps 1-6). ``kept_by_kind`` counts
    the operators kept so far across projects; the next bug tried is of the kind kept least. About
    ``combined_share`` of the instances combine two or three single bugs of one module (:meth:`_Work.combine`)."""
    started = time.monotonic()
    summary = ProjectSummary(project.name)
    kept_by_kind = kept_by_kind if kept_by_kind is not None else collections.Counter()
    sdist = fetch_sdist(project)
    files = read_sdist(sdist)
    missing = [
        path
        for path in (*project.sources, *project.tests)
        if not any(rel == path or rel.startswith(path + "/") for rel in files)
    ]
    if missing:
        raise BuildError(f"project {project.name!r}: the source distribution has no {', '.join(missing)}")
    image = project_image(client, project, sdist, files)
    sources = project_sources(project, files)
    # checked one by one when tried (a full parse per mutation up front took minutes for a large project)
    mutations = [
        m for rel, data in sorted(sources.items()) for m in find_mutations(rel, data, validate=False)
    ]
    instances: List[SWEInstance] = []
    singles: List[Tuple[Candidate, SWEInstance]] = []
    singles_needed = _singles_needed(quota, combined_share)
    with Container(image, client=client, kind="swe-build", workdir=TESTBED) as box:
        installed = preinstalled(box, project)
        if installed:
            raise BuildError(
                f"project {project.name!r}: the base image already has {installed} (a pristine copy of the "
                "project would sit in the agent's container): choose another project"
            )
        box.exec(f"mkdir -p {HELPERS} && cp -a {TESTBED} {PRISTINE}", timeout_s=120)
        baseline = run_pytest(box, list(project.tests), timeout_s=600, trace=True)
        if baseline.error:
            raise BuildError(
                f"project {project.name!r}: its test suite does not run in the image: {baseline.error}\n{baseline.log_tail[-800:]}"
            )
        baseline_passing = [nodeid for nodeid, outcome in baseline.outcomes.items() if outcome.passed]
        summary.suite_tests = len(baseline_passing)
        if not baseline_passing:
            raise BuildError(
                f"project {project.name!r}: no test of its suite passes in the image (a dependency "
                f"missing?): {baseline.log_tail[-400:] or next(iter(baseline.outcomes.values()), None)}"
            )
        work = _Work(box, project, files, sources, baseline_passing, image, writer, summary)
        work.mutations = mutations
        for mutation in balanced_mutations(
            mutations, seed, kept_by_kind, per_function=MUTATIONS_PER_FUNCTION * len(KINDS)
        ):
            if len(singles) >= singles_needed or (
                max_tries is not None and summary.tried >= max_tries
            ):
                break
            if mutation.function_size < MIN_FUNCTION_SIZE.get(mutation.kind, MIN_STATEMENTS):
                summary.discarded["the function is too small for the operator"] += 1
                continue
            covering = _covering_tests(mutation, baseline)
            if not covering:
                summary.discarded["no test calls the function"] += 1
                continue
            if len(covering) > MAX_COVERING_TESTS:
                summary.discarded[f"more than {MAX_COVERING_TESTS} tests call the function"] += 1
                continue
            summary.tried += 1
            summary.tried_by_kind[mutation.kind] += 1
            on_candidate()
            scope = sorted({_file_of(nodeid) for nodeid in covering})
            made = work.finish([mutation], scope)
            if made is not None:
                singles.append(made)
                kept_by_kind[mutation.kind] += 1
        instances = work.combine(singles, quota, combined_share)
    summary.kept = len(instances)
    summary.seconds = round(time.monotonic() - started, 1)
    return instances, summary


def _gold_lines(original: bytes, mutated: bytes) -> str:
    """The lines the fix changes, as a diff's "-" (buggy) and "+" (fixed) lines."""
    diff = difflib.unified_diff(
        mutated.decode("utf-8", "replace").splitlines(),
        original.decode("utf-8", "replace").splitlines(),
        lineterm="",
        n=0,
    )
    return "\n".join(line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---")))


def failing_statement(
    files: Dict[str, bytes], nodeid: str, where: Optional[Sequence[Any]], max_lines: int = 8
) -> str:
    """The statement of the test's own code that failed (the innermost one holding the failure's line), or ""
    when the failure was raised outside the test's file."""
    path = file_of_test(nodeid)
    if not where or str(where[0]) != f"{TESTBED}/{path}" or path not in files:
        return ""
    source = files[path].decode("utf-8", "replace")
    try:
        tree = threadsafe_ast.parse(source)
    except SyntaxError:
        return ""
    line = int(where[1])
    holding = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.stmt)
        and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    if not holding:
        return ""
    node = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    text = textwrap.dedent(" " * node.col_offset + (ast.get_source_segment(source, node) or ""))
    return text if text.count("\n") < max_lines else text.splitlines()[0]


def check_gold(
    client: Any,
    instances: Sequence[SWEInstance],
    workers: int = 2,
    on_done: Callable[[Any], None] = lambda report: None,
) -> Dict[str, str]:
    """instance_id -> why the gold patch does not resolve it, for the instances where it does not."""
    reports = evaluate_many(
        instances,
        [instance.patch for instance in instances],
        client=client,
        workers=workers,
        timeout_s=600,
        on_done=on_done,
    )
    return {
        report.instance_id: report.error
        or f"still failing: {report.fail_to_pass['failure'] + report.pass_to_pass['failure']}"
        for report in reports
        if not report.resolved
    }


# ----- the whole build: resumable, with a dataset card ------------------------------------------------------
def _progress_file(out: Path, project: Project) -> Path:
    return out / "progress" / f"{project.name}.json"


def build(
    out: Path,
    projects: Sequence[Project],
    limit: int = 100,
    seed: int = 0,
    base_url: Optional[str] = None,
    progress: bool = True,
    workers: int = 2,
    writer: Optional[IssueWriter] = None,
) -> Tuple[List[SWEInstance], List[ProjectSummary]]:
    """``out/instances.jsonl`` with up to ``limit`` gold-checked instances spread over ``projects``, its
    ``build_summary.json`` and ``dataset_card.md``. A project finished by an earlier run with the same
    settings is read back from ``out/progress/`` instead of being built again."""
    from tqdm.auto import tqdm

    if limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    started = time.monotonic()
    client = docker_client(base_url)
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        "builder": BUILDER_VERSION,
        "seed": seed,
        "limit": limit,
        "projects": [p.name for p in projects],
        "issue_writer": bool(writer),
    }
    note = set_aside_other_build(out, settings)
    if note:
        print(note, file=sys.stderr, flush=True)
    quotas = [
        limit // len(projects) + (1 if index < limit % len(projects) else 0) for index in range(len(projects))
    ]
    instances: List[SWEInstance] = []
    summaries: List[ProjectSummary] = []
    kept_by_kind: Dict[str, int] = collections.Counter()
    bar = tqdm(total=limit, desc="swe build", unit="instance", disable=not progress)
    try:
        carried = 0  # what earlier projects fell short of their share goes to the next ones
        for project, share in zip(projects, quotas):
            quota = share + carried
            if quota == 0:
                continue
            bar.set_postfix_str(project.name)
            saved = _resume(out, project, settings, quota)
            if saved is not None:
                made, summary = saved
                bar.write(
                    f"{project.name}: {counted(len(made), 'instance')} from an earlier run (progress/{project.name}.json)"
                )
            else:
                try:
                    made, summary = synthesize(
                        client,
                        project,
                        quota,
                        seed,
                        max_tries=max(30, quota * 15),
                        writer=writer,
                        kept_by_kind=kept_by_kind,
                        on_candidate=functools.partial(bar.set_postfix_str, f"{project.name}: trying bugs"),
                    )
                except BuildError as exc:
                    made, summary = [], ProjectSummary(project.name, error=str(exc))
                    bar.write(f"skipped {project.name}: {exc}")
                _save(out, project, settings, quota, made, summary)
            if saved is not None:  # the next projects balance against what the earlier run kept
                kept_by_kind.update(
                    kind for instance in made for kind in instance.extra["mutation"]["kind"].split("+")
                )
            carried = quota - len(made)
            instances.extend(made)
            summaries.append(summary)
            bar.update(len(made))
    finally:
        bar.close()
    gold_bar = tqdm(total=len(instances), desc="gold check", unit="instance", disable=not progress)
    try:
        failures = check_gold(client, instances, workers=workers, on_done=lambda report: gold_bar.update(1))
    finally:
        gold_bar.close()
    kept = [instance for instance in instances if instance.instance_id not in failures]
    for summary in summaries:
        dropped = {i: why for i, why in failures.items() if i.startswith(summary.project + "__")}
        if dropped:
            summary.kept -= len(dropped)
            summary.discarded["the gold patch did not resolve it in a fresh container"] += len(dropped)
            summary.gold_failures.update({i: why[:500] for i, why in dropped.items()})
    write_jsonl(kept, out / "instances.jsonl")
    (out / "build_summary.json").write_text(
        json.dumps([summary.to_dict() for summary in summaries], indent=2) + "\n"
    )
    card = dataset_card(kept, summaries, time.monotonic() - started)
    (out / "dataset_card.md").write_text(card["markdown"])
    (out / "dataset_card.json").write_text(
        json.dumps({k: v for k, v in card.items() if k != "markdown"}, indent=2) + "\n"
    )
    return kept, summaries


# What a build writes into its folder (``swe validate`` adds its report beside the instances).
BUILD_OUTPUTS = ("instances.jsonl", "build_summary.json", "dataset_card.md", "dataset_card.json", "validation.json",
                 "progress")


def set_aside_other_build(out: Path, settings: Dict[str, Any]) -> str:
    """Move what an earlier build with other settings left in ``out`` (its progress files say which settings; an
    ``instances.jsonl`` without them is taken for another build too) to ``out/earlier_builds/<time>/``, and say so
    in one line: a build replaces ``instances.jsonl``, and the earlier set (which predictions and reports name)
    was lost without a word. A build with the same settings resumes from it instead; "" then, and when ``out``
    holds no build."""
    earlier: List[Any] = []
    for path in sorted((out / "progress").glob("*.json")):
        try:
            earlier.append(json.loads(path.read_text()).get("settings"))
        except (OSError, ValueError, AttributeError):
            earlier.append(None)  # unreadable: not this build's
    if not earlier and not (out / "instances.jsonl").is_file():
        return ""
    if earlier and all(saved == settings for saved in earlier):
        return ""
    moved = [name for name in BUILD_OUTPUTS if (out / name).exists()]
    destination = out / "earlier_builds" / time.strftime("%Y%m%d-%H%M%S")
    destination.mkdir(parents=True, exist_ok=False)
    for name in moved:
        (out / name).rename(destination / name)
    saved = next((s for s in earlier if isinstance(s, dict)), None)
    made_with = (f" (--limit {saved.get('limit')} --projects {','.join(map(str, saved.get('projects') or []))} "
                 f"--seed {saved.get('seed')})" if saved else "")
    return (f"swe build: {out} held a build made with other settings{made_with}; it was moved to {destination} "
            "(the same command as before resumes a build instead)")


def _resume(
    out: Path, project: Project, settings: Dict[str, Any], quota: int
) -> Optional[Tuple[List[SWEInstance], ProjectSummary]]:
    path = _progress_file(out, project)
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if saved.get("settings") != settings or saved.get("quota") != quota:
        return None
    summary = ProjectSummary(project.name)
    for name, value in saved["summary"].items():
        if name == "discarded":
            summary.discarded.update(value)
        elif name == "tried_by_kind":
            summary.tried_by_kind.update(value)
        else:
            setattr(summary, name, value)
    return [normalize_row(row) for row in saved["instances"]], summary


def _save(
    out: Path,
    project: Project,
    settings: Dict[str, Any],
    quota: int,
    made: List[SWEInstance],
    summary: ProjectSummary,
) -> None:
    path = _progress_file(out, project)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(
        json.dumps(
            {
                "settings": settings,
                "quota": quota,
                "summary": summary.to_dict(),
                "instances": [instance.to_row() for instance in made],
            }
        )
    )
    partial.replace(path)


def dataset_card(
    instances: Sequence[SWEInstance], summaries: Sequence[ProjectSummary], seconds: float
) -> Dict[str, Any]:
    """The figures a researcher checks before training on the set, as JSON and as markdown."""
    total = len(instances)
    share = lambda count: round(100.0 * count / total, 1) if total else 0.0
    operators = collections.Counter(
        kind for i in instances for kind in i.extra["mutation"]["kind"].split("+")
    )
    bugs = collections.Counter(i.extra["mutation"].get("bugs", 1) for i in instances)
    kinds = collections.Counter(i.extra.get("difficulty", {}).get("failure_kind", "?") for i in instances)
    scores = collections.Counter(i.extra.get("difficulty", {}).get("score", 0) for i in instances)
    projects = collections.Counter(i.instance_id.split("__", 1)[0] for i in instances)
    issue_sources = collections.Counter(i.extra.get("issue", {}).get("source", "?") for i in instances)
    dropped: Dict[str, int] = collections.Counter()
    for summary in summaries:
        dropped.update(summary.discarded)
        if summary.error:
            dropped[f"project {summary.project} failed: {summary.error.splitlines()[0][:120]}"] += 1
    tried = sum(summary.tried for summary in summaries)
    solver = sum(summary.solver_undid for summary in summaries)
    p2p = [len(i.PASS_TO_PASS) for i in instances]
    card: Dict[str, Any] = {
        "instances": total,
        "build_seconds": round(seconds, 1),
        # what each project's bugs took, in this run or the earlier one a resumed run reads from progress/
        "project_seconds": round(sum(summary.seconds for summary in summaries), 1),
        "projects": dict(sorted(projects.items())),
        "operators": {k: {"instances": v, "percent": share(v)} for k, v in operators.most_common()},
        "failure_kinds": {k: {"instances": v, "percent": share(v)} for k, v in kinds.most_common()},
        "wrong_value_percent": share(kinds.get("value", 0)),
        "bugs_per_instance": {str(k): v for k, v in sorted(bugs.items())},
        "combined_percent": share(sum(v for k, v in bugs.items() if k > 1)),
        "difficulty_histogram": {str(k): v for k, v in sorted(scores.items())},
        "issue_text": dict(issue_sources),
        "pass_to_pass_per_instance": {"min": min(p2p, default=0), "max": max(p2p, default=0)},
        "candidates_tried": tried,
        "mechanical_solver": {
            "undid": solver,
            "of_tried": tried,
            "percent_of_tried": round(100.0 * solver / tried, 1) if tried else 0.0,
            "on_kept_instances": 0,
            "tries": SOLVER_TRIES,
        },
        "dropped": dict(dropped.most_common()),
    }
    lines = [
        "# SWE dataset card",
        "",
        f"{counted(total, 'instance')} from {counted(len(projects), 'project')}, built in {seconds / 60:.1f} min by "
        "the last run of "
        f"`skyrl-gym swe build`; trying the projects' bugs took {card['project_seconds'] / 60:.1f} min in all "
        "(earlier runs it resumed from included).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| wrong value (assertion) rather than an exception | {card['wrong_value_percent']}% |",
        f"| combined multi-bug tasks | {card['combined_percent']}% |",
        f"| largest operator share | {max((v['percent'] for v in card['operators'].values()), default=0)}% |",
        f"| mechanical solver ({SOLVER_TRIES} tries) | undid {solver} of {tried} bugs tried ({card['mechanical_solver']['percent_of_tried']}%), all dropped: 0% of instances |",
        f"| PASS_TO_PASS per instance | {card['pass_to_pass_per_instance']['min']} to {card['pass_to_pass_per_instance']['max']} tests |",
        f"| issue text | {', '.join(f'{k}: {v}' for k, v in issue_sources.items())} |",
        "",
        "## Operators",
        "",
        "| operator | instances | share |",
        "|---|---|---|",
        *(f"| {k} | {v['instances']} | {v['percent']}% |" for k, v in card["operators"].items()),
        "",
        "## Failure kinds",
        "",
        "| first failure | instances | share |",
        "|---|---|---|",
        *(f"| {k} | {v['instances']} | {v['percent']}% |" for k, v in card["failure_kinds"].items()),
        "",
        "## Difficulty (1 easy to 5 hard)",
        "",
        "| score | instances |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in card["difficulty_histogram"].items()),
        "",
        "## Projects",
        "",
        "| project | instances |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in card["projects"].items()),
        "",
        "## Dropped, and why",
        "",
        "| reason | count |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in card["dropped"].items()),
        "",
    ]
    card["markdown"] = "\n".join(lines)
    return card


__all__ = [
    "BuildError",
    "ProjectSummary",
    "build",
    "check_gold",
    "dataset_card",
    "fetch_sdist",
    "mechanical_solver",
    "synthesize",
]
