"""One SWE instance's repository in a container: set up at ``base_commit``, edit, diff, run tests.

    with SWERuntime(instance) as runtime:      # a fresh container of instance.image_name
        runtime.setup()                         # /testbed at base_commit (verified)
        runtime.exec("sed -i s/a/b/ x.py")
        patch = runtime.diff()                  # the git diff against base_commit
        run = runtime.run_tests(["tests/test_x.py"])

Built instances carry a ``setup_patch``: it is applied to the image's ``/testbed`` and committed as
the only commit, with fixed author, committer and dates, so the commit id equals ``base_commit``
whenever the image and patch are the ones the row was built from (checked: a mismatch is an error
naming the instance). The history holds nothing but that commit: the fix cannot be read from it.

Nothing of the answer stays in the container (docs/swe.md, "What the agent's container holds"): the set-up
patch is written, applied and deleted in one command (deleted on failure too), and the helpers' folder is
removed before ``setup`` returns. Rows without a ``setup_patch`` (SWE-bench images) are checked out at
``base_commit`` in a repository that holds that commit alone (fetched one deep from the image's, which it
replaces), so no later commit (the fix) can be read from the history either. Hidden tests only ever enter a
grading container.
"""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from skygym_sandboxes.containers import Container, ContainerLimits, ExecResult

from skyrl_gym.envs.swe.instances import DJANGO_TEST_ID, SWEInstance, SWEInstanceError, canonical_test_id

TESTBED = "/testbed"
HELPERS = "/opt/skygym"
REPORT_PLUGIN = "skygym_pytest_report"
DJANGO_DRIVER = "skygym_django_report"
SYMPY_DRIVER = "skygym_sympy_report"
# What a test run copies into the container's helpers folder: the channel's writing end, and a reporter per runner.
REPORT_HELPERS = {
    f"{name}.py": (Path(__file__).parent / f"_{source}.py").read_bytes()
    for name, source in (("skygym_report_channel", "report_channel"), (REPORT_PLUGIN, "pytest_report"),
                         (DJANGO_DRIVER, "django_report"), (SYMPY_DRIVER, "sympy_report"))
}
TEST_LOG = "/tmp/skygym-tests.log"  # the console of the last test run, in the container
# Before anything else, the working folder (the repository) goes to the end of sys.path: no file of the repository
# can stand in for the reporter or for a module the runner or the reporter imports.
_BOOTSTRAP = "import sys; sys.path[0] or sys.path.append(sys.path.pop(0)); "
# pytest's arguments come from the harness's file, not the command line: code under test reads neither which tests
# the run holds nor which it leaves out.
_PYTEST_BOOTSTRAP = (
    "import os, pytest; path = os.environ.pop('SKYGYM_RUNNER_ARGS'); handle = open(path, encoding='utf-8'); "
    "arguments = handle.read().split(chr(0)); handle.close(); os.unlink(path); os._exit(int(pytest.main(arguments)))"
)
# Fixed commit metadata: the same tree gives the same commit id in every container.
COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "skyrl-gym",
    "GIT_AUTHOR_EMAIL": "swe@skyrl-gym.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "skyrl-gym",
    "GIT_COMMITTER_EMAIL": "swe@skyrl-gym.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
# What the model's tools must never put in a patch: bytecode and caches the test runs leave behind.
GIT_EXCLUDES = "__pycache__/\n*.pyc\n.pytest_cache/\n*.egg-info/\n"
_EXCLUDE = f"mkdir -p .git/info && printf %s {shlex.quote(GIT_EXCLUDES)} >> .git/info/exclude"  # in the set-up command
# The image `skyrl-gym swe build` makes first, every project's image starts from, and the golden case runs in.
BASE_TAG = "skyrl-gym-swe-base:bookworm-python3-pytest-git"
CONTAINER_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8", "GIT_PAGER": "cat", "PAGER": "cat"}
# Where an image keeps the repository's own Python when it is not the one on the image's PATH: SWE-bench's images
# (and SWE-Gym's and SWE-smith's, built the same way) install it as the conda environment ``testbed`` and activate it
# from /root/.bashrc, which no command run through ``docker exec`` reads: without activating it, ``python3`` is
# conda's base Python, without the repository's dependencies or pytest.
PYTHON_ENVIRONMENTS = ("/opt/miniconda3/envs/testbed", "/opt/conda/envs/testbed")
_ACTIVATED = "skygym-activated"  # separates the environment before activation from the one after it
_NOT_CARRIED = {"SKYGYM_COMMAND", "_", "SHLVL", "PWD", "OLDPWD"}


@dataclass
class TestOutcome:
    nodeid: str
    outcome: str  # passed, failed, error, skipped, xfailed, xpassed
    message: str = ""
    calls: List[Any] = field(default_factory=list)
    where: Optional[List[Any]] = None  # [file, line] where a failure was raised
    raised: bool = False  # xfailed by an xfail raised while it ran (pytest.xfail()), not by a mark
    # Another name SWE-bench's rows give the test: Django's, the first line of its docstring; SymPy's, its bare name.
    alias: str = ""

    @property
    def passed(self) -> bool:
        """Passed or xfailed, as SWE-bench counts them."""
        return self.outcome in ("passed", "xfailed")

    @property
    def ran_to_a_pass(self) -> bool:
        """Passed, or xfailed by its mark: what a FAIL_TO_PASS test must do. An xfail raised while it ran
        is library code's to raise too."""
        return self.passed and not self.raised


@dataclass
class TestRun:
    """The per-test outcomes of one run, or why there are none (``error``): a timeout, a report
    that is missing, malformed or written twice for a test (tampered)."""

    outcomes: Dict[str, TestOutcome] = field(default_factory=dict)
    error: str = ""
    log_tail: str = ""
    duration_s: float = 0.0

    def find(self, test_id: str) -> List[TestOutcome]:
        """The outcomes a row's test id names: the test of that id (a Django id in either form), else every
        test of that alias (a Django test's docstring line, a SymPy test's bare name: every test so named)."""
        outcome = self.outcomes.get(test_id) or self.outcomes.get(canonical_test_id(test_id))
        if outcome is not None:
            return [outcome]
        if DJANGO_TEST_ID.fullmatch(test_id):  # a test's own name, never another's alias: it was not reported
            return []
        return [outcome for outcome in self.outcomes.values() if outcome.alias == test_id]

    def passed(self, test_id: str) -> bool:
        found = self.find(test_id)
        return bool(found) and all(outcome.passed for outcome in found)

    def ran_to_a_pass(self, test_id: str) -> bool:
        found = self.find(test_id)
        return bool(found) and all(outcome.ran_to_a_pass for outcome in found)


NOT_THE_REPORTERS = "the test report holds a line that is not the reporter's (tampered or corrupted)"


def parse_report(text: str, nonce: str = "") -> TestRun:
    """The plugin's lines: each is this run's ``nonce`` followed by JSON. Anything else on the channel (a line
    without the nonce, text that is not the reporter's JSON, a field of the wrong type), a test reported
    twice, or no end line makes the whole run invalid: an outcome that might be forged never counts as a
    pass."""
    run = TestRun()
    ended = False
    for line in text.split("\n"):  # not splitlines(), which also splits at characters a message may hold
        if not line.strip():
            continue
        if not line.startswith(nonce):
            return TestRun(error=NOT_THE_REPORTERS)
        try:
            entry = json.loads(line[len(nonce):])
        except (ValueError, RecursionError):  # not JSON, a number too long to convert, nesting too deep
            return TestRun(error=NOT_THE_REPORTERS)
        if not isinstance(entry, dict) or ended:
            return TestRun(error="the test report has extra lines (tampered or corrupted)")
        if entry.get("end") is True:
            ended = True
            continue
        nodeid, outcome, message = entry.get("nodeid"), entry.get("outcome"), entry.get("message", "")
        calls, where, raised = entry.get("calls", []), entry.get("where"), entry.get("raised", False)
        alias = entry.get("alias", "")
        if (
            not isinstance(nodeid, str)
            or not isinstance(outcome, str)
            or not isinstance(message, str)
            or not isinstance(calls, list)
            or not (where is None or isinstance(where, list))
            or not isinstance(raised, bool)
            or not isinstance(alias, str)
            or nodeid in run.outcomes
        ):
            return TestRun(error=f"the test report is malformed or reports {str(nodeid)[:200]!r} twice "
                                 "(tampered or corrupted)")
        run.outcomes[nodeid] = TestOutcome(nodeid, outcome, message, calls, where, raised, alias)
    if not ended:
        return TestRun(error="the test run ended without its report (killed, timed out, or exited early)")
    return run


def image_hint(instance: SWEInstance) -> str:
    """How to get the image ``instance`` runs in, for an engine that lacks it."""
    image = instance.image_name
    if image == BASE_TAG:  # the golden case's, and the one every built instance's image starts from
        return "`skyrl-gym swe build --limit 1` builds it (its first step)"
    if image.startswith("skyrl-gym-swe-"):
        return ("`skyrl-gym swe build` made it from a pinned project: build again with the settings that made these "
                "instances, on this engine")
    if "/sweb.eval." in image:
        return ("it is SWE-bench's image for the instance (the name taken for a row that names no image_name): pull "
                "or build it with SWE-bench's tools, or give the row the image_name of an image whose /testbed holds "
                "the repository (docs/swe.md, 'Your own tasks')")
    return "pull or build it on this engine (docs/swe.md)"


class SWERuntime:
    """A container of ``instance.image_name`` with the repository in ``/testbed`` (see the module docstring)."""

    def __init__(
        self,
        instance: SWEInstance,
        client: Any = None,
        limits: Optional[ContainerLimits] = None,
        base_url: Optional[str] = None,
    ) -> None:
        if instance.grading_problem:  # no container for a row whose tests cannot be run
            raise SWEInstanceError(instance.grading_problem)
        self.instance = instance
        self.container = Container(
            instance.image_name, client=client, limits=limits, workdir=TESTBED, env=CONTAINER_ENV, kind="swe",
            base_url=base_url, image_hint=image_hint(instance),
        )
        try:  # before anything else runs there: the model's commands and the tests alike run in the image's Python
            self.container.exec_env = python_environment(self.container)
        except BaseException:
            self.container.close()
            raise

    # ----- set-up -----------------------------------------------------------------------------------
    def setup(self) -> None:
        """Bring ``/testbed`` to ``base_commit``; raises :class:`SWEInstanceError` when it cannot."""
        instance = self.instance
        if instance.setup_patch:
            # Written to the container's own layer (the engine cannot write into the /tmp tmpfs), applied and
            # deleted by the same command, whatever happens to it.
            path = f"{HELPERS}/setup-{secrets.token_hex(8)}.patch"
            self.container.write_file(path, instance.setup_patch.encode("utf-8"))
            script = (
                f"trap 'rm -rf {HELPERS}' EXIT; set -e; rm -rf .git; git init -q; "
                f"git apply --binary {path}; rm -rf {HELPERS}; "
                f"git add -A; git commit -q --no-verify -m base; {_EXCLUDE}; git rev-parse HEAD"
            )
        else:
            # The repository becomes base_commit alone: a fresh one that fetched that commit, one deep, from the
            # image's, takes the place of the image's. Its history held every later commit (the fix): in the pack
            # of a partial clone, which no gc prunes, too. Dropping the refs and the unreachable objects instead
            # repacked the whole history in every container (seconds to minutes for SWE-bench's largest).
            base, fresh = shlex.quote(instance.base_commit), f"{HELPERS}/fresh-repository"
            script = (
                # A file's size and time decide whether it is read again (the image's files keep both; their inodes
                # and change times are new in every container, which had every file read: 2.5 s for Django's).
                f"set -e; git -c core.checkStat=minimal -c core.trustctime=false checkout -q -f {base} 2>&1; "
                "git config uploadpack.allowAnySHA1InWant true; "
                "git config pack.window 0; "  # no search for deltas: one tree has few to find
                f"rm -rf {fresh}; git init -q {fresh}; "
                f"git -C {fresh} fetch -q --no-tags --depth 1 file://{TESTBED} {base} 2>&1; "
                # The index of the checkout comes along (base_commit's, its files' stat data fresh): the new
                # repository's is made from it without reading every file again.
                f"mv .git/index {fresh}/.git/index; rm -rf .git; mv {fresh}/.git .git; rm -rf {HELPERS}; "
                f"git update-ref --no-deref HEAD {base}; git reset -q 2>/dev/null || {{ rm -f .git/index; git reset -q; }}; "
                "git reflog expire --expire=now --all; "
                f"rm -f .git/FETCH_HEAD .git/ORIG_HEAD; {_EXCLUDE}; git rev-parse HEAD"
            )
        done = self.container.exec(script, timeout_s=600, env=COMMIT_ENV)
        head = done.output.strip().splitlines()[-1:] or [""]
        if not done.ok:
            raise SWEInstanceError(
                f"instance {instance.instance_id!r}: cannot set up the repository at base_commit "
                f"({'field setup_patch' if instance.setup_patch else 'image ' + instance.image_name}): {done.output.strip()[-400:]}"
            )
        if head[0] != instance.base_commit:
            raise SWEInstanceError(
                f"instance {instance.instance_id!r}: field 'base_commit' is {instance.base_commit} but the image "
                f"{instance.image_name} with its setup_patch gives {head[0]} (the image or the row changed)"
            )

    # ----- the model's side -------------------------------------------------------------------------
    def exec(self, command: str, timeout_s: float = 60.0, output_cap: int = 16_000) -> ExecResult:
        return self.container.exec(command, timeout_s=timeout_s, output_cap=output_cap)

    def diff(self) -> str:
        """Everything changed since ``base_commit`` (new files included) as one git diff."""
        # No external diff driver or text conversion that the repository's config names: the patch is git's.
        done = self.container.exec(
            f"git add -A && git diff --cached --binary --no-ext-diff --no-textconv {self.instance.base_commit}; "
            "git reset -q",
            timeout_s=60,
            output_cap=20_000_000,
        )
        if done.exit_code != 0:
            raise RuntimeError(f"git diff failed in the container: {done.output[-400:]}")
        return done.output

    def apply_patch(self, patch: str, name: str, helpers_made: bool = False) -> ExecResult:
        """``git apply`` the patch in ``/testbed``; an empty patch applies trivially. ``helpers_made``: the caller
        knows that ``HELPERS`` is there (no code of the repository has run since it was made)."""
        if not patch.strip():
            return ExecResult(0, "")
        path = f"{HELPERS}/{name}.patch"
        self.container.write_file(path, patch.encode("utf-8"), make_folder=not helpers_made)
        return self.container.exec(f"git apply --binary --whitespace=nowarn {path} 2>&1", timeout_s=60)

    # ----- tests ------------------------------------------------------------------------------------
    def run_tests(self, test_files: Sequence[str], timeout_s: float = 600.0, deselect: Sequence[str] = (),
                  select: Sequence[str] = ()) -> TestRun:
        """``test_files``, only the tests ``select`` names (their ids; empty: all), without the tests of
        ``deselect`` (ids, or for pytest their prefixes), under the row's runner
        (:attr:`SWEInstance.test_runner`). Django's and SymPy's runners load every file either way, so a run of a
        few selected tests looks like any other to the code under test (its command line says nothing either)."""
        runner = {"django": run_django, "sympy": run_sympy}.get(self.instance.test_runner)
        if runner is not None:
            return runner(self.container, test_files, timeout_s=timeout_s, deselect=deselect, select=select)
        return run_pytest(self.container, list(select) or test_files, timeout_s=timeout_s, deselect=deselect)

    # ----- life cycle -------------------------------------------------------------------------------
    def close(self) -> None:
        self.container.close()

    def __enter__(self) -> "SWERuntime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def python_environment(container: Container) -> Dict[str, str]:
    """The variables that activate the image's own Python environment (the first of ``PYTHON_ENVIRONMENTS``
    with a ``bin/python``), as the image's login shell would: conda's ``activate``, which also runs the
    environment's activation scripts, where the image has conda, else its ``bin`` first on ``PATH``. Empty for an
    image without one (ours: the system Python is the repository's)."""
    probe = "".join(
        f"if [ -x {folder}/bin/python ]; then env -0; printf '{_ACTIVATED}\\0'; "
        f"conda_sh={shlex.quote(folder.rsplit('/envs/', 1)[0])}/etc/profile.d/conda.sh; "
        f'{{ [ -f "$conda_sh" ] && . "$conda_sh" && conda activate {folder}; }} >/dev/null 2>&1; '
        f'case ":$PATH:" in *":{folder}/bin:"*) ;; *) export PATH="{folder}/bin:$PATH" ;; esac; '
        "env -0; exit 0; fi; "
        for folder in PYTHON_ENVIRONMENTS
    )
    done = container.exec(probe + "exit 0", timeout_s=60, output_cap=1_000_000)
    before, found, after = done.output.partition(f"\0{_ACTIVATED}\0")
    if not done.ok or not found:
        return {}

    def variables(text: str) -> Dict[str, str]:
        pairs = (entry.partition("=") for entry in text.split("\0") if "=" in entry)
        return {name: value for name, _, value in pairs if name and not name.startswith("BASH_FUNC_")}

    old = variables(before)
    return {name: value for name, value in variables(after).items()
            if old.get(name) != value and name not in _NOT_CARRIED}


def run_pytest(container: Container, test_files: Sequence[str], timeout_s: float = 600.0, trace: bool = False,
               deselect: Sequence[str] = ()) -> TestRun:
    """Run pytest on ``test_files`` in ``/testbed``; outcomes come over a descriptor of their own, not
    the console (which goes to :data:`TEST_LOG`). ``trace`` adds each test's called functions."""
    arguments = ["-p", REPORT_PLUGIN, "-p", "no:cacheprovider", "-o", "addopts=", "-q", f"--rootdir={TESTBED}",
                 *test_files]
    for nodeid in deselect:
        arguments += ["--deselect", nodeid]
    trace_env = f"SKYGYM_TRACE_ROOT={TESTBED}/ " if trace else ""
    return _run_reporting(container, _BOOTSTRAP + _PYTEST_BOOTSTRAP, arguments, timeout_s, trace_env)


def django_label(target: str) -> str:
    """What Django's ``runtests.py`` takes for a test file (``tests/app/test_x.py`` -> ``app.test_x``) or a test id
    (``test_y (app.test_x.TestZ)`` -> ``app.test_x.TestZ.test_y``)."""
    match = DJANGO_TEST_ID.fullmatch(canonical_test_id(target))
    if match:
        return f"{match.group(2)}.{match.group(1)}"
    module = target.removeprefix("tests/").removesuffix(".py").removesuffix("/__init__")
    return module.replace("/", ".")


# SWE-bench runs Django's tests in the en_US.UTF-8 locale its images generate (some tests format dates and numbers
# by it); where the image has it, so do we.
_DJANGO_LOCALE = ("if locale -a 2>/dev/null | grep -qix 'en_us.utf-\\?8'; then "
                  "export LANG=en_US.UTF-8 LC_ALL=en_US.UTF-8 LANGUAGE=en_US:en; fi; export PYTHONIOENCODING=utf8; ")


def run_django(container: Container, targets: Sequence[str], timeout_s: float = 600.0,
               deselect: Sequence[str] = (), select: Sequence[str] = ()) -> TestRun:
    """Run Django's own runner (``tests/runtests.py``, SQLite settings, one process, as SWE-bench runs it) on
    ``targets`` (test files under ``tests/``, or test ids), only the tests ``select`` names (empty: all), leaving
    out the tests ``deselect`` names; outcomes come over a descriptor of their own (see ``_django_report``)."""
    labels = [django_label(target) for target in targets]
    arguments = ["\n".join(canonical_test_id(test_id) for test_id in select),
                 "\n".join(canonical_test_id(test_id) for test_id in deselect),
                 "--settings=test_sqlite", "--parallel", "1", "--verbosity", "2", *labels]
    return _run_reporting(container, _BOOTSTRAP + f"import {DJANGO_DRIVER}", arguments, timeout_s,
                          prelude=_DJANGO_LOCALE)


def run_sympy(container: Container, targets: Sequence[str], timeout_s: float = 600.0,
              deselect: Sequence[str] = (), select: Sequence[str] = ()) -> TestRun:
    """Run SymPy's own runner (as ``bin/test -C --verbose``, in one process) on the test files ``targets``, only
    the tests ``select`` names (``path::test_x``; empty: all), leaving out those ``deselect`` names; outcomes come
    over a descriptor of their own (see ``_sympy_report``)."""
    files = list(dict.fromkeys(target.split("::", 1)[0] for target in targets))
    arguments = ["\n".join(test_id.split("::", 1)[-1] for test_id in select),
                 "\n".join(test_id.split("::", 1)[-1] for test_id in deselect), *files]
    return _run_reporting(container, _BOOTSTRAP + f"import {SYMPY_DRIVER}", arguments, timeout_s,
                          prelude="export PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning'; ")


def _run_reporting(container: Container, bootstrap: str, arguments: Sequence[str], timeout_s: float,
                   env: str = "", prelude: str = "") -> TestRun:
    """Run ``bootstrap`` (Python) in ``/testbed`` with the reporters on its path, after the shell's ``prelude``;
    the outcomes its reporter writes on descriptor 3. The reporters, this run's nonce and its arguments are written into the container through
    the Docker API (never through a process's environment or command line, which any process there can read)
    and read (the nonce and the arguments deleted) before any project code runs."""
    # Random hex and nothing else: no fixed text marks it out in the memory of the process it is handed to.
    nonce = secrets.token_hex(16)
    nonce_name, arguments_name = f"nonce-{secrets.token_hex(8)}", f"args-{secrets.token_hex(8)}"
    helpers = {**REPORT_HELPERS, nonce_name: nonce.encode("utf-8"),
               arguments_name: "\0".join(arguments).encode("utf-8")}
    container.put_tree(HELPERS, helpers)
    command = (
        f"{prelude}PYTHONPATH={HELPERS}${{PYTHONPATH:+:$PYTHONPATH}} SKYGYM_REPORT_FD=3 "
        f"SKYGYM_REPORT_NONCE={HELPERS}/{nonce_name} SKYGYM_RUNNER_ARGS={HELPERS}/{arguments_name} {env}"
        f"python3 -c {shlex.quote(bootstrap)} 3>&1 1>{TEST_LOG} 2>&1"
    )
    done = container.exec(command, timeout_s=timeout_s, output_cap=50_000_000, workdir=TESTBED)
    run = parse_report(done.output, nonce)
    if done.timed_out:
        run = TestRun(error=f"the tests ran past {timeout_s:.0f} s")
    run.duration_s = done.duration_s
    if run.error:
        run.log_tail = container.exec(f"tail -c 3000 {TEST_LOG}", timeout_s=30).output
    return run
