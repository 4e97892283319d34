"""Build SWE task instances offline: project images, injected bugs, hidden tests, validated rows.

    skyrl-gym swe build --out DIR [--limit N] [--projects toolz,six]

For each project (see :mod:`.projects`):

1. fetch its source distribution with pip (cached under ``~/.cache/skyrl-gym/swe/sdists``);
2. build its image: the SWE base image (a debootstrap root filesystem with python3, pytest and git,
   loaded with ``docker import``) plus the source in ``/testbed``, committed as
   ``skyrl-gym-swe-<project>:<content hash>`` and reused while the hash holds;
3. run its test suite once in a work container, recording which functions each test calls;
4. try injected bugs (:mod:`.mutations`) one at a time, running only the test files that cover the
   changed function: keep a bug when some tests that passed now fail (FAIL_TO_PASS) while the rest
   of those files still pass (PASS_TO_PASS);
5. write the instance: the files of those tests are taken out of the repository and become the
   hidden ``test_patch``; the gold ``patch`` is the reversal; the problem statement is written
   from the failing tests' names and messages; ``base_commit`` is the one commit of the buggy tree;
6. check every kept instance in a fresh container: the gold patch must resolve it.

Containers are removed on every exit path (errors, timeouts, Ctrl-C); images are only committed
once a project's source is in place.
"""

from __future__ import annotations

import collections
import hashlib
import json
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from skygym_sandboxes.containers import Container, docker_client
from skygym_sandboxes.images.build_image import build_image, cache_dir, image_exists

from skyrl_gym.envs.swe.grading import evaluate_many
from skyrl_gym.envs.swe.instances import SWEInstance, write_jsonl
from skyrl_gym.envs.swe.runtime import COMMIT_ENV, CONTAINER_ENV, HELPERS, TESTBED, TestRun, run_pytest
from skyrl_gym.envs.swe.synth.mutations import Mutation, find_mutations, sample_mutations
from skyrl_gym.envs.swe.synth.projects import Project

BUILDER_VERSION = "1"
BASE_PACKAGES = ("python3", "python3-pytest", "git")
BASE_TAG = "skyrl-gym-swe-base:bookworm-python3-pytest-git"
MAX_FAIL_TO_PASS = 40  # a bug that breaks more tests than this is not a task, it is an outage
# A function that this many tests call is so central that a bug in it breaks too many of them: not tried.
MAX_COVERING_TESTS = 150
MUTATIONS_PER_FUNCTION = 3  # rounds over the functions before a project counts as exhausted
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


# ----- sources ----------------------------------------------------------------------------------------
def sdist_cache() -> Path:
    return cache_dir() / "swe" / "sdists"


def fetch_sdist(project: Project) -> Path:
    """The project's source distribution, downloaded with pip once and cached."""
    folder = sdist_cache() / project.name
    found = sorted(folder.glob("*.tar.gz")) if folder.is_dir() else []
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
               "--dest", str(folder), project.requirement]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    found = sorted(folder.glob("*.tar.gz"))
    if done.returncode != 0 or not found:
        raise BuildError(f"project {project.name!r}: could not download {project.requirement} with pip: "
                         f"{(done.stderr or done.stdout).strip()[-600:]}")
    return found[0]


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
        in_source = any(rel == source or rel.startswith(source.rstrip("/") + "/") for source in project.sources)
        in_tests = any(rel == test or rel.startswith(test.rstrip("/") + "/") for test in project.tests)
        if in_source and not in_tests and "/tests/" not in f"/{rel}" and not rel.rsplit("/", 1)[-1].startswith("test_"):
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


def _short_name(nodeid: str) -> str:
    return nodeid.split("::", 1)[-1]


def problem_statement(project: Project, failing: Sequence[Tuple[str, str]]) -> str:
    """An issue written from the failing tests alone (no model): their names and assertion messages."""
    count = len(failing)
    lines = [
        f"{count} test{'s' if count > 1 else ''} of {project.repo} fail{'' if count > 1 else 's'} after a recent change",
        "",
        f"Some behaviour of the `{project.name}` library code in this repository is wrong. The following "
        f"test{'s fail' if count > 1 else ' fails'} (the test files are not in your checkout; they run when you submit):",
        "",
    ]
    for nodeid, message in failing[:6]:
        first_line = (message.strip().splitlines() or ["(no message)"])[0][:240]
        lines.append(f"- `{_short_name(nodeid)}` in `{_file_of(nodeid)}`: {first_line}")
    if count > 6:
        lines.append(f"- and {count - 6} more")
    lines += ["", "Find the bug in the library code and fix it, keeping the rest of the behaviour unchanged. Do not edit tests."]
    return "\n".join(lines)


INSTANCE_SCRIPT = """set -e
rm -rf /work && cp -a {pristine} /work && cd /work
git init -q && git add -A && git commit -q --no-verify -m pristine
cp {helpers}/mutant {path}
rm -f -- {hidden}
git add -A && git diff --cached --binary HEAD > {helpers}/setup.patch
rm -rf .git && git init -q && git add -A && git commit -q --no-verify -m base
git rev-parse HEAD > {helpers}/base
cp {pristine}/{path} {path} && git diff --binary > {helpers}/gold.patch && git checkout -q -- {path}
for f in {hidden}; do mkdir -p "$(dirname "$f")"; cp {pristine}/"$f" "$f"; done
git add -A && git diff --cached --binary > {helpers}/test.patch
"""


def make_instance(
    box: Container, project: Project, mutation: Mutation, mutated: bytes, image: str,
    fail_to_pass: List[str], pass_to_pass: List[str], messages: Dict[str, str],
) -> SWEInstance:
    import shlex

    hidden = sorted({_file_of(nodeid) for nodeid in [*fail_to_pass, *pass_to_pass]})
    box.write_file(f"{HELPERS}/mutant", mutated)
    script = INSTANCE_SCRIPT.format(
        pristine=PRISTINE, helpers=HELPERS, path=shlex.quote(mutation.path), hidden=" ".join(shlex.quote(h) for h in hidden)
    )
    done = box.exec(script, timeout_s=120, env=COMMIT_ENV)
    if not done.ok:
        raise BuildError(f"project {project.name!r}: writing the instance for {mutation.key} failed: {done.output[-400:]}")
    read = lambda name: box.read_file(f"{HELPERS}/{name}").decode("utf-8")
    key = hashlib.sha256(f"{project.requirement}|{mutation.key}|{mutation.replacement!r}".encode()).hexdigest()[:10]
    return SWEInstance(
        instance_id=f"{project.name}__synth-{key}",
        repo=project.repo,
        base_commit=read("base").strip(),
        problem_statement=problem_statement(project, [(t, messages.get(t, "")) for t in fail_to_pass]),
        patch=read("gold.patch"),
        test_patch=read("test.patch"),
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=pass_to_pass,
        version=project.version,
        image_name=image,
        setup_patch=read("setup.patch"),
        test_cmd="pytest",
        extra={"mutation": {"kind": mutation.kind, "path": mutation.path, "function": mutation.function,
                            "line": mutation.lineno, "description": mutation.description}},
    )


def synthesize(
    client: Any, project: Project, quota: int, seed: int = 0, max_tries: Optional[int] = None,
    on_candidate: Callable[[], None] = lambda: None,
) -> Tuple[List[SWEInstance], ProjectSummary]:
    """Up to ``quota`` instances of one project (see the module docstring, steps 1-5)."""
    started = time.monotonic()
    summary = ProjectSummary(project.name)
    sdist = fetch_sdist(project)
    files = read_sdist(sdist)
    missing = [path for path in (*project.sources, *project.tests) if not any(rel == path or rel.startswith(path + "/") for rel in files)]
    if missing:
        raise BuildError(f"project {project.name!r}: the source distribution has no {', '.join(missing)}")
    image = project_image(client, project, sdist, files)
    sources = project_sources(project, files)
    mutations = [m for rel, data in sorted(sources.items()) for m in find_mutations(rel, data)]
    instances: List[SWEInstance] = []
    with Container(image, client=client, kind="swe-build", workdir=TESTBED) as box:
        installed = preinstalled(box, project)
        if installed:
            raise BuildError(f"project {project.name!r}: the base image already has {installed} (a pristine copy of the "
                             "project would sit in the agent's container): choose another project")
        box.exec(f"mkdir -p {HELPERS} && cp -a {TESTBED} {PRISTINE}", timeout_s=120)
        baseline = run_pytest(box, list(project.tests), timeout_s=600, trace=True)
        if baseline.error:
            raise BuildError(f"project {project.name!r}: its test suite does not run in the image: {baseline.error}\n{baseline.log_tail[-800:]}")
        for mutation in sample_mutations(mutations, seed, per_function=MUTATIONS_PER_FUNCTION):
            if len(instances) >= quota or (max_tries is not None and summary.tried >= max_tries):
                break
            covering = _covering_tests(mutation, baseline)
            if not covering:
                summary.discarded["no test calls the function"] += 1
                continue
            if len(covering) > MAX_COVERING_TESTS:
                summary.discarded[f"more than {MAX_COVERING_TESTS} tests call the function"] += 1
                continue
            summary.tried += 1
            on_candidate()
            scope = sorted({_file_of(nodeid) for nodeid in covering})
            original = sources[mutation.path]
            mutated = mutation.apply(original)
            box.write_file(f"{TESTBED}/{mutation.path}", mutated)
            try:
                run = run_pytest(box, scope, timeout_s=120)
            finally:
                box.write_file(f"{TESTBED}/{mutation.path}", original)
            if run.error:
                summary.discarded["the tests did not run to the end"] += 1
                continue
            before = [nodeid for nodeid, outcome in baseline.outcomes.items() if outcome.passed and _file_of(nodeid) in scope]
            fail_to_pass = [nodeid for nodeid in before if not run.passed(nodeid)]
            pass_to_pass = [nodeid for nodeid in before if run.passed(nodeid)]
            if not fail_to_pass:
                summary.discarded["no test failed"] += 1
                continue
            if len(fail_to_pass) > MAX_FAIL_TO_PASS:
                summary.discarded[f"more than {MAX_FAIL_TO_PASS} tests failed"] += 1
                continue
            messages = {nodeid: run.outcomes[nodeid].message for nodeid in fail_to_pass if nodeid in run.outcomes}
            instances.append(make_instance(box, project, mutation, mutated, image, fail_to_pass, pass_to_pass, messages))
    summary.kept = len(instances)
    summary.seconds = round(time.monotonic() - started, 1)
    return instances, summary


def check_gold(client: Any, instances: Sequence[SWEInstance], workers: int = 2,
               on_done: Callable[[], None] = lambda: None) -> Dict[str, str]:
    """instance_id -> why the gold patch does not resolve it, for the instances where it does not."""
    reports = evaluate_many(instances, [instance.patch for instance in instances], client=client, workers=workers,
                            timeout_s=300, on_done=lambda report: on_done())
    return {
        report.instance_id: report.error or f"still failing: {report.fail_to_pass['failure'] + report.pass_to_pass['failure']}"
        for report in reports
        if not report.resolved
    }


def build(
    out: Path, projects: Sequence[Project], limit: int = 100, seed: int = 0, base_url: Optional[str] = None,
    progress: bool = True, workers: int = 2,
) -> Tuple[List[SWEInstance], List[ProjectSummary]]:
    """``out/instances.jsonl`` with up to ``limit`` gold-checked instances spread over ``projects``."""
    from tqdm.auto import tqdm

    if limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    client = docker_client(base_url)
    quotas = [limit // len(projects) + (1 if index < limit % len(projects) else 0) for index in range(len(projects))]
    instances: List[SWEInstance] = []
    summaries: List[ProjectSummary] = []
    bar = tqdm(total=limit, desc="swe build", unit="instance", disable=not progress)
    try:
        carried = 0  # what earlier projects fell short of their share goes to the next ones
        for project, share in zip(projects, quotas):
            quota = share + carried
            if quota == 0:
                continue
            bar.set_postfix_str(project.name)
            try:
                made, summary = synthesize(client, project, quota, seed, max_tries=max(12, quota * 6))
            except BuildError as exc:
                summaries.append(ProjectSummary(project.name, error=str(exc)))
                bar.write(f"skipped {project.name}: {exc}")
                carried = quota
                continue
            carried = quota - len(made)
            instances.extend(made)
            summaries.append(summary)
            bar.update(len(made))
    finally:
        bar.close()
    gold_bar = tqdm(total=len(instances), desc="gold check", unit="instance", disable=not progress)
    try:
        failures = check_gold(client, instances, workers=workers, on_done=lambda: gold_bar.update(1))
    finally:
        gold_bar.close()
    kept = [instance for instance in instances if instance.instance_id not in failures]
    for summary in summaries:
        dropped = {i: why for i, why in failures.items() if i.startswith(summary.project + "__")}
        if dropped:
            summary.kept -= len(dropped)
            summary.discarded["the gold patch did not resolve it in a fresh container"] += len(dropped)
            summary.gold_failures.update({i: why[:500] for i, why in dropped.items()})
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(kept, out / "instances.jsonl")
    (out / "build_summary.json").write_text(
        json.dumps([{**summary.__dict__, "discarded": dict(summary.discarded)} for summary in summaries], indent=2) + "\n"
    )
    return kept, summaries


__all__ = ["BuildError", "ProjectSummary", "build", "check_gold", "fetch_sdist", "problem_statement", "synthesize"]
