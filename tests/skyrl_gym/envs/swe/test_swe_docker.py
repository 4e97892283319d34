"""The swe env, its tools, its grader and the `skyrl-gym swe` commands against a real Docker engine.

Instances come from the real `skyrl-gym swe build` (see tests/swe_fixtures.py): pinned projects fetched with
pip, images built with debootstrap + docker import, bugs injected and checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import subprocess
import sys
import time

import pytest

from skyrl_gym.envs.swe.audit import (
    LIBRARY_FORGERIES, REPORT_FACTORY_WRAPPED, STUBBED_TESTS, library_files, reporter_closure_read,
)
from skyrl_gym.envs.swe import canary
from skyrl_gym.envs.swe.grading import evaluate_many, evaluate_patch
from skyrl_gym.envs.swe.instances import REQUIRED_FIELDS, write_jsonl
from skyrl_gym.envs.swe.runtime import SWERuntime
from skyrl_gym.envs.swe.synth.hiding import file_of_test
from tests.swe_fixtures import BUILD_LIMIT, swe_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_build_then_validate_resolves_every_gold_patch_and_no_empty_one(swe_built, swe_instances):
    rows = [json.loads(line) for line in (swe_built / "instances.jsonl").read_text().splitlines()]
    # short of the limit: the build's table of what it discarded and why says what happened
    assert len(rows) == BUILD_LIMIT, (swe_built / "build.log").read_text()[-4000:]
    assert all(field in row for row in rows for field in REQUIRED_FIELDS + ("PASS_TO_PASS", "hints_text", "version"))
    assert len({row["repo"] for row in rows}) == 3
    summary = json.loads((swe_built / "build_summary.json").read_text())
    assert sum(entry["kept"] for entry in summary) == BUILD_LIMIT
    card = json.loads((swe_built / "dataset_card.json").read_text())
    assert card["instances"] == BUILD_LIMIT and sum(card["projects"].values()) == BUILD_LIMIT
    assert sum(v["instances"] for v in card["failure_kinds"].values()) == BUILD_LIMIT
    assert "## Dropped, and why" in (swe_built / "dataset_card.md").read_text()
    for row in rows:  # every test of the project that passes at base_commit guards against regressions
        suite = next(entry["suite_tests"] for entry in summary if row["instance_id"].startswith(entry["project"] + "__"))
        assert len(row["PASS_TO_PASS"]) >= min(50, suite - len(row["FAIL_TO_PASS"]))
        assert row["difficulty"]["score"] in range(1, 6) and row["issue"]["source"] == "template"
    done = swe_cli("validate", str(swe_built / "instances.jsonl"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"gold resolved {BUILD_LIMIT}/{BUILD_LIMIT}" in done.stdout
    assert f"empty resolved 0/{BUILD_LIMIT}" in done.stdout
    report = json.loads((swe_built / "validation.json").read_text())
    assert report["gold_resolved"] == BUILD_LIMIT and report["empty_resolved"] == 0
    assert all(entry["fail_to_pass"]["failure"] for entry in report["empty"])


def test_the_repository_is_at_base_commit_with_the_hidden_tests_and_the_fix_out_of_reach(swe_instances, docker_client_for_tests):
    instance = swe_instances[0]
    with SWERuntime(instance, client=docker_client_for_tests) as runtime:
        runtime.setup()
        log = runtime.exec("git log --all --format=%H").output.split()
        assert log == [instance.base_commit]  # one commit: no history holds the fix
        hidden_names = {test_id.split("::")[-1].split("[")[0] for test_id in instance.FAIL_TO_PASS}
        for name in hidden_names:  # the failing test functions are out of the checkout ...
            assert runtime.exec(f"git grep -q 'def {name}(' -- {' '.join(instance.test_files)}").exit_code == 1
        # ... and the rest of the suite is in it: the agent can run the tests that guard against regressions
        assert len(instance.PASS_TO_PASS) >= 50
        sample = [t for t in instance.PASS_TO_PASS if file_of_test(t) in {file_of_test(f) for f in instance.FAIL_TO_PASS}][:5] \
            or instance.PASS_TO_PASS[:5]
        ran = runtime.exec("python3 -m pytest -q -p no:cacheprovider " + " ".join(f"'{t}'" for t in sample), timeout_s=300)
        assert ran.ok and f"{len(sample)} passed" in ran.output, ran.output[-1500:]
        assert runtime.diff() == ""
        network = runtime.exec("python3 -c 'import socket; socket.create_connection((\"10.0.0.1\", 80), timeout=2)'")
        assert network.exit_code != 0


def test_an_episode_replaying_the_gold_patch_through_the_tools_earns_1(swe_instances, docker_client_for_tests):
    from skygym_sandboxes.containers import containers_of_kind

    import skyrl_gym
    from skyrl_gym.envs.swe.dataset import instance_row
    from skyrl_gym.envs.swe.replay import replay_actions
    from skyrl_gym.episode import ScriptedPolicy, run_episode, run_sync

    instance = swe_instances[1]
    row = instance_row(instance)
    episode = run_sync(
        run_episode(lambda: skyrl_gym.make("swe", extras=row), row["prompt"], ScriptedPolicy(replay_actions(instance.patch)))
    )
    assert episode.error is None and episode.total_reward == 1.0
    assert episode.env_metrics["resolved"] is True and episode.env_metrics["submitted"] is True
    final = episode.steps[-1].metadata
    assert final["resolved"] and final["finish_reason"] == "submitted"
    assert final["report"]["fail_to_pass"]["success"] == instance.FAIL_TO_PASS
    assert final["model_patch"].count("@@") == instance.patch.count("@@")
    assert containers_of_kind(docker_client_for_tests, "swe") == []


def test_tools_time_out_cap_output_edit_files_and_end_at_max_turns(swe_instances, docker_client_for_tests):
    import skyrl_gym
    from skyrl_gym.envs.swe.dataset import instance_row

    instance = swe_instances[0]
    row = {**instance_row(instance), "max_turns": 7}
    env = skyrl_gym.make("swe", env_config={"bash_timeout_s": 2, "message_timeout_s": 3, "output_cap": 1000},
                         extras=row)
    env.init(row["prompt"])
    try:
        slow = env.step("<bash>sleep 30 & sleep 30; echo never</bash>")["observations"][0]["content"]
        assert "ran past 2 s and was killed" in slow and "never" not in slow
        # the commands of one message share its 3 s: the first takes 2, the next what is left, the rest none
        sleepy = env.step("<bash>sleep 30</bash>" * 4)["observations"]
        assert len(sleepy) == 4 and "ran past 2 s and was killed" in sleepy[0]["content"]
        assert sleepy[-1]["content"].startswith("Not run: this message's calls used up their 3 s.")
        loud = env.step('<tool_call>{"name": "bash", "arguments": {"command": "yes | head -c 5000"}}</tool_call>')
        text = loud["observations"][0]["content"]
        assert text.endswith("[output truncated: 4000 more bytes]") and len(text) < 1100
        created = env.step(
            '<tool_call>{"name": "str_replace_editor", "arguments": {"command": "create", "path": "/testbed/NOTES.txt", '
            '"file_text": "one\\ntwo"}}</tool_call>'
        )
        assert created["observations"][0]["content"] == "File created: /testbed/NOTES.txt"
        failed = env.step("<bash>cat NOTES.txt && false</bash>")["observations"][0]["content"]
        assert failed == "one\ntwo\n[exit code 1]"
        unknown = env.step('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call> and <bash>ls</bash>')
        assert "There is no tool 'rm_rf'" in unknown["observations"][0]["content"]
        last = env.step("I am thinking.")
        assert last["done"] and last["reward"] == 0.0 and last["metadata"]["finish_reason"] == "max_turns"
        assert "+++ b/NOTES.txt" in last["metadata"]["model_patch"]  # new files are part of the patch
        assert not last["metadata"]["resolved"]
    finally:
        env.close()
    from skygym_sandboxes.containers import containers_of_kind

    assert containers_of_kind(docker_client_for_tests, "swe") == []


def _patch_from_edits(instance, client, edits) -> str:
    """The git diff of ``{path: text to append}`` at base_commit (made in a container of the instance)."""
    with SWERuntime(instance, client=client) as runtime:
        runtime.setup()
        for path, text in edits.items():
            try:
                current = runtime.container.read_file(f"/testbed/{path}")
            except FileNotFoundError:
                current = b""
            runtime.container.write_file(f"/testbed/{path}", current + text.encode())
        return runtime.diff()


CONFTEST_THAT_PASSES_EVERYTHING = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""

# No word of pytest, os.write or the descriptor's name: it writes report lines to every descriptor.
REPORT_FORGER = """
_o = __import__("o" + "s")
for _fd in range(3, 64):
    try:
        getattr(_o, "wr" + "ite")(_fd, {lines!r})
    except Exception:
        pass
"""


def test_hacks_on_the_tests_or_the_report_do_not_resolve(swe_instances, docker_client_for_tests):
    instance = swe_instances[0]
    hidden = instance.test_files[0]
    library = instance.extra["mutation"]["path"]
    fake_lines = "".join(
        json.dumps({"nodeid": test_id, "outcome": "passed", "message": ""}) + "\n" for test_id in instance.FAIL_TO_PASS
    ).encode()
    hacks = {
        "hidden test file written by the model": {hidden: "def test_ok():\n    pass\n"},
        "conftest that passes every test": {"conftest.py": CONFTEST_THAT_PASSES_EVERYTHING},
        "console lines that look like passes": {library: f"\nprint('PASSED {instance.FAIL_TO_PASS[0]}')\n"},
        "report lines written to every descriptor": {library: REPORT_FORGER.format(lines=fake_lines)},
    }
    patches = {name: _patch_from_edits(instance, docker_client_for_tests, edits) for name, edits in hacks.items()}
    assert all(patch.strip() for patch in patches.values())
    reports = evaluate_many([instance] * len(patches), list(patches.values()), client=docker_client_for_tests)
    for name, report in zip(patches, reports):
        assert not report.resolved, name
    by_name = dict(zip(patches, reports))
    assert hidden in by_name["hidden test file written by the model"].restored_paths
    assert "conftest.py" in by_name["conftest that passes every test"].restored_paths
    assert "tampered" in by_name["report lines written to every descriptor"].error
    # The same instance still resolves with its gold patch in the same grader.
    assert evaluate_patch(instance, instance.patch, client=docker_client_for_tests).resolved


# Forgeries that name nothing the text check looks for. Each resolved the instance before the grader's fixes
# (see docs/swe.md, "Grading and what a patch cannot do"); the comment says which fix stops it.
SPELLED_PLUGIN = '''
import os
_out = open(int(os.environ.pop("SKY" "GYM_REPORT_FD")), "w", closefd=False)
_seen = []
def _log(report):
    _seen.append(report.nodeid)
def _finish(session, exitstatus):
    for nodeid in dict.fromkeys(_seen):
        _out.write('{"nodeid": "%s", "outcome": "passed", "message": ""}\\n' % nodeid)
    _out.write('{"end": true, "exitstatus": 0}\\n')
    _out.flush()
globals()["py" "test_runtest_logreport"] = _log
globals()["py" "test_sessionfinish"] = _finish
'''
SPELLED_HOOK = '''
def _log(report):
    report.outcome = "passed"
globals()["py" "test_runtest_logreport"] = _log
'''
# The audit's report-factory forgery, naming pytest's module as it is (the text check refuses it in library code).
REPORTS_REWRITTEN = REPORT_FACTORY_WRAPPED.replace('"_py" "test.reports"', '"_pytest.reports"')
assert REPORTS_REWRITTEN != REPORT_FACTORY_WRAPPED
JSON_PATCHED = '''
import json as _json
_dumps = _json.dumps
def _passing(value, *args, **kwargs):
    if isinstance(value, dict) and value.get("outcome") in ("failed", "error"):
        value = dict(value, outcome="passed")
    return _dumps(value, *args, **kwargs)
_json.dumps = _passing
'''
WHOLE_REPORT_TO_EVERY_PIPE = '''
import os as _os, stat as _stat
for _fd in range(3, 256):
    try:
        if _stat.S_ISFIFO(_os.fstat(_fd).st_mode):
            _pipe = open(_fd, "w", closefd=False)
            _pipe.write({lines!r})
            _pipe.flush()
    except OSError:
        pass
_os._exit(0)
'''


def test_forgeries_that_name_nothing_the_text_check_knows_do_not_resolve(swe_instances,
                                                                         docker_client_for_tests):
    instance = swe_instances[0]
    library = instance.extra["mutation"]["path"]
    package = library.split("/")[0]
    whole_report = "".join(
        json.dumps({"nodeid": test_id, "outcome": "passed", "message": ""}) + "\n"
        for test_id in instance.FAIL_TO_PASS + instance.PASS_TO_PASS
    ) + json.dumps({"end": True, "exitstatus": 0}) + "\n"
    hacks = {
        # the repository's folder was first on sys.path: a file of the reporter's name stood in for it
        "a file named like the report plugin": {"skygym_pytest_report.py": SPELLED_PLUGIN},
        # pytest loads the plugins that package metadata on sys.path names; metadata is put back (removed)
        "package metadata naming a plugin": {
            "evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
            "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = evil_hook\n",
            "evil_hook.py": SPELLED_HOOK,
        },
        # test files were exempt from the text check and ran as the model left them; each is put back now
        "a test file that rewrites pytest's reports": {f"{package}/tests/test_utils.py": REPORTS_REWRITTEN},
        # the reporter wrote its lines with json.dumps; it now writes them with builtins only
        "library code that patches json.dumps": {library: JSON_PATCHED},
        # a complete report and an exit, before the reporter wrote a line; lines now carry a nonce
        "a whole report written to every pipe": {
            library: WHOLE_REPORT_TO_EVERY_PIPE.format(lines=whole_report)},
        # the line '++ b/tests/...' shows as a '+++' header: the text check took what followed for a test file
        "a library line that looks like a diff header": {library: f'\n"""\n++ b/{package}/tests/test_x.py\n"""\n'
                                                          + REPORTS_REWRITTEN},
    }
    patches = {name: _patch_from_edits(instance, docker_client_for_tests, edits) for name, edits in hacks.items()}
    reports = dict(zip(patches, evaluate_many([instance] * len(patches), list(patches.values()),
                                              client=docker_client_for_tests)))
    assert {name: report.resolved for name, report in reports.items()} == dict.fromkeys(hacks, False)
    assert all(report.patch_applied for report in reports.values())
    assert "evil-1.0.dist-info/entry_points.txt" in reports["package metadata naming a plugin"].restored_paths
    assert f"{package}/tests/test_utils.py" in reports["a test file that rewrites pytest's reports"].restored_paths
    assert "not the reporter's" in reports["a whole report written to every pipe"].error
    assert "reaches for the test harness" in reports["a library line that looks like a diff header"].error
    # the same grader still resolves the gold patch, with the plugin's nonce and the repository last on sys.path
    assert evaluate_patch(instance, instance.patch, client=docker_client_for_tests).resolved


def _of_project(instances, project):
    return next(instance for instance in instances if instance.instance_id.startswith(project))


def test_forgeries_from_library_code_are_caught_by_the_planted_tests(swe_instances, docker_client_for_tests):
    """Library code that names nothing the text check looks for (skyrl_gym/envs/swe/audit.py; the swe audit
    profile plays the same). Each resolved an instance before grading planted tests that must fail
    (skyrl_gym/envs/swe/canary.py). Three instances are narrowed to shapes common in real ones:
    every FAIL_TO_PASS test parametrized, every one a method of a test class, or none."""
    toolz, inflection, six = (_of_project(swe_instances, name) for name in ("toolz", "inflection", "six"))
    assert library_files(toolz.to_row()) == [toolz.extra["mutation"]["path"]]
    parametrized = dataclasses.replace(inflection, FAIL_TO_PASS=[t for t in inflection.FAIL_TO_PASS if "[" in t])
    methods = dataclasses.replace(six, FAIL_TO_PASS=[t for t in six.FAIL_TO_PASS if "::Test" in t])
    functions = dataclasses.replace(six, FAIL_TO_PASS=[t for t in six.FAIL_TO_PASS if "::Test" not in t])
    assert parametrized.FAIL_TO_PASS and methods.FAIL_TO_PASS and functions.FAIL_TO_PASS
    cases = {
        "test functions stubbed as their modules finish": (toolz, STUBBED_TESTS),
        "pytest's report factory wrapped": (toolz, REPORT_FACTORY_WRAPPED),
        "the reporter's nonce read from its closure": (
            toolz, reporter_closure_read(toolz.FAIL_TO_PASS + toolz.PASS_TO_PASS)),
        "xfail raised from library code": (toolz, LIBRARY_FORGERIES["xfail raised from library code"]),
        "answer read from the asserting line": (toolz, LIBRARY_FORGERIES["answer read from the asserting line"]),
        "results equal to anything": (inflection, LIBRARY_FORGERIES["results equal to anything"]),
        "failures of first library calls passed": (
            inflection, LIBRARY_FORGERIES["failures of first library calls passed"]),
        "failures of calls with new arguments passed (toolz)": (
            toolz, LIBRARY_FORGERIES["failures of calls with new arguments passed"]),
        "failures of calls with new arguments passed (six)": (
            six, LIBRARY_FORGERIES["failures of calls with new arguments passed"]),
        # six's hidden functions have no top-level ==/is/raises (asserts in a try): the copy fails at its end
        "failures of tests that call library code passed (six, no statement to change)": (
            functions, LIBRARY_FORGERIES["failures of tests that call library code passed"]),
        "failures of tests that call library code passed": (
            parametrized, LIBRARY_FORGERIES["failures of tests that call library code passed"]),
        "xfail mark from library code": (parametrized, LIBRARY_FORGERIES["xfail mark from library code"]),
        "failures of methods passed": (methods, LIBRARY_FORGERIES["failures of methods passed"]),
    }
    instances = [instance for instance, _ in cases.values()]
    patches = [_patch_from_edits(instance, docker_client_for_tests,
                                 {instance.extra["mutation"]["path"]: "\n" + code})
               for instance, code in cases.values()]
    for patch in patches:  # none is a fix: each only adds lines after the buggy code
        assert not [line for line in patch.splitlines() if line.startswith("-") and not line.startswith("---")]
    reports = dict(zip(cases, evaluate_many(instances, patches, client=docker_client_for_tests)))
    for name, report in reports.items():
        assert report.patch_applied and not report.resolved, (name, report)
        assert "tampered" in report.error, (name, report.error)
        assert report.fail_to_pass["success"] == [] and report.pass_to_pass["success"] == [], name
    # The planted tests fail in an honest run: the gold patches still resolve, the empty patch does not.
    golds = evaluate_many([toolz, parametrized, methods], [toolz.patch, inflection.patch, six.patch],
                          client=docker_client_for_tests)
    assert [report.resolved for report in golds] == [True] * 3, [report.error for report in golds]
    assert [report.forgery_resolved_hidden_tests for report in golds] == [None] * 3  # nothing caught
    empty = evaluate_patch(toolz, "", client=docker_client_for_tests)
    assert not empty.resolved and not empty.error, empty
    # Without the planted tests, the forgeries resolve their instances: they are real, and the planted tests alone
    # catch them (the hidden tests' own run in the same grading, which the forgery made look resolved). Two do not:
    # a FAIL_TO_PASS test xfailed by an xfail raised while it ran is no pass, and an xfail mark on every test that
    # calls library code makes the passing ones xpass (the attacker's version, which marked only the tests that
    # call the function under repair, resolved it).
    assert {name: report.forgery_resolved_hidden_tests for name, report in reports.items()} == {
        **dict.fromkeys(cases, True), "xfail raised from library code": False, "xfail mark from library code": False}


def test_a_forgery_that_passes_failures_raised_through_its_file_is_caught(swe_instances, docker_client_for_tests,
                                                                        monkeypatch):
    """A report hook that passes the failures whose traceback goes through the fixed module's file (where the bug
    raises) beat the mutant, which fails on its changed statement before it meets the bug. Which FAIL_TO_PASS
    tests fail there depends on an instance's bugs: the instance is narrowed to them, found by grading the
    forgery with nothing planted. Then the planted test that fails from the file catches it, where the hidden
    tests alone took it for resolved."""
    code = LIBRARY_FORGERIES["failures raised in the library file passed"]
    planting = canary.plant
    monkeypatch.setattr(canary, "plant", lambda runtime, instance, library=(): [])
    for instance in swe_instances:
        patch = _patch_from_edits(instance, docker_client_for_tests, {instance.extra["mutation"]["path"]: "\n" + code})
        through = evaluate_patch(instance, patch, client=docker_client_for_tests).fail_to_pass["success"]
        if through:
            break
    else:
        pytest.fail("no built instance has a FAIL_TO_PASS test that fails through its library file")
    narrowed = dataclasses.replace(instance, FAIL_TO_PASS=through)
    monkeypatch.setattr(canary, "plant", planting)
    checked = evaluate_patch(narrowed, patch, client=docker_client_for_tests)
    assert not checked.resolved and "tampered" in checked.error, checked
    # a real forgery: the hidden tests' own run, in the same grading, took it for resolved
    assert checked.forgery_resolved_hidden_tests is True, checked
    gold = evaluate_patch(narrowed, instance.patch, client=docker_client_for_tests)
    assert gold.resolved, gold.error  # the planted test fails in an honest run: the gold patch still resolves


DOCTEST_FILE = """diff --git a/usage_doctest.txt b/usage_doctest.txt
new file mode 100644
--- /dev/null
+++ b/usage_doctest.txt
@@ -0,0 +1,3 @@
+>>> import inflection
+>>> inflection.camelize("special_guest")
+'SpecialGuest'
"""


COMMAND_LINE_TEST = """import sys


def test_the_command_line_names_no_test():
    with open("/proc/self/cmdline", "rb") as handle:
        line = handle.read()
    assert b"skygym_command_line" not in line and b"deselect" not in line
    assert not any("skygym_command_line" in argument or "deselect" in argument for argument in sys.argv)


def test_left_out():
    pass
"""


def test_a_test_run_names_its_tests_to_nothing_the_tests_can_read(swe_instances, docker_client_for_tests):
    """Code under test could tell the planted tests' run from the hidden tests' by the command line: the first
    named only the planted tests, the second left them out with ``--deselect``. A forgery that forged only where
    tests were left out passed every planted test honestly. The runner's arguments now come from a file the
    reporter reads and deletes; the command line and ``sys.argv`` name no test."""
    with SWERuntime(swe_instances[0], client=docker_client_for_tests) as runtime:
        runtime.setup()
        runtime.container.write_file("/testbed/test_skygym_command_line.py", COMMAND_LINE_TEST.encode())
        run = runtime.run_tests(["test_skygym_command_line.py"],
                                deselect=["test_skygym_command_line.py::test_left_out"])
    assert not run.error, run.error + run.log_tail
    outcomes = {name: (outcome.outcome, outcome.message) for name, outcome in run.outcomes.items()}
    assert outcomes == {"test_skygym_command_line.py::test_the_command_line_names_no_test": ("passed", "")}


def test_a_text_doctest_first_in_fail_to_pass_gets_no_planted_test(swe_instances, docker_client_for_tests):
    """pytest collects a .txt named on its command line as a doctest: planted Python there was never collected,
    and the gold patch counted as tampered (found by the attacker's pass)."""
    inflection = _of_project(swe_instances, "inflection")
    doctest_first = dataclasses.replace(
        inflection, test_patch=inflection.test_patch + DOCTEST_FILE,
        FAIL_TO_PASS=["usage_doctest.txt::usage_doctest.txt", *inflection.FAIL_TO_PASS])
    report = evaluate_patch(doctest_first, inflection.patch, client=docker_client_for_tests)
    assert report.resolved, report.error
    assert "usage_doctest.txt::usage_doctest.txt" in report.fail_to_pass["success"]


def test_hostile_commands_end_the_call_or_the_episode_never_the_caller(swe_instances, docker_client_for_tests):
    """A background process in a session of its own held the command's output open: the image has no kill program,
    so the kill after the limit failed and every call raised TimeoutError. A link or a pipe opened in the editor, and
    a repository without .git at submit, raised out of env.step too."""
    import skyrl_gym
    from skyrl_gym.envs.swe.dataset import instance_row

    instance = swe_instances[0]
    row = instance_row(instance)
    env = skyrl_gym.make("swe", env_config={"bash_timeout_s": 2}, extras=row)
    env.init(row["prompt"])
    try:
        held = env.step("<bash>(setsid sleep 1000 &); echo started</bash>")["observations"][0]["content"]
        assert "ran past 2 s and was killed" in held
        assert env.step("<bash>echo alive</bash>")["observations"][0]["content"] == "alive"
        env.step("<bash>ln -s /etc/passwd /testbed/link && mkfifo /testbed/pipe</bash>")
        for path in ("/testbed/link", "/testbed/pipe"):
            view = env.step('<tool_call>{"name": "str_replace_editor", "arguments": {"command": "view", '
                            f'"path": "{path}"}}}}</tool_call>')["observations"][0]["content"]
            assert view.startswith(f"Error: {path} cannot be read or written here") and "not a regular file" in view
        last = env.step("<bash>rm -rf .git</bash><submit></submit>")
        assert last["done"] and last["reward"] == 0.0 and last["metadata"]["report"]["error"].startswith("no patch")
    finally:
        env.close()


def test_processes_nothing_can_stop_cost_the_container_and_end_the_episode_at_0(swe_instances, monkeypatch):
    """When even the kill after the limit cannot end a command (the kill stands in for one that cannot run: a
    root `kill -9 -1` stops every process this engine can start, so a test double turns it off), the container
    is removed, later calls say it is closed, and the episode ends at reward 0 with no patch, never an exception
    out of env.step."""
    import docker

    import skyrl_gym
    from skygym_sandboxes.containers import Container
    from skyrl_gym.envs.swe.dataset import instance_row

    monkeypatch.setattr(Container, "_kill_all_but_init", lambda self: None)
    monkeypatch.setattr(Container, "kill_grace_s", 1.0)
    row = instance_row(swe_instances[0])
    env = skyrl_gym.make("swe", env_config={"bash_timeout_s": 2}, extras=row)
    env.init(row["prompt"])
    try:
        container = env.runtime.container
        name, client = container.name, container.client
        last = env.step("<bash>(setsid sleep 1000 &); echo started</bash>")
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(name)
        with pytest.raises(RuntimeError, match="the container is closed"):
            container.exec("echo alive")
        assert last["done"] and last["reward"] == 0.0, last
        assert last["metadata"]["finish_reason"] == "container_lost" and last["metadata"]["model_patch"] == ""
        assert last["metadata"]["report"]["error"] == (
            "the container was removed (a command left processes that could not be stopped): no patch")
    finally:
        env.close()


def test_reading_a_folder_as_a_file_does_not_pull_its_archive_into_memory(swe_instances, swe_docker):
    """``read_file`` joined the whole archive before looking at it: a folder holding a 600 MB file cost the caller
    1.2 GB. It now reads the first header and stops. (In a process of its own, to read its peak memory: its VmHWM,
    not ru_maxrss, which Linux carries over from the forking process across exec, the pytest worker's peak.)"""
    script = (
        "import re, sys\n"
        "from skygym_sandboxes.containers import Container\n"
        "with Container(sys.argv[1], base_url=sys.argv[2]) as box:\n"
        "    assert box.exec('mkdir /big && truncate -s 600M /big/zeros').ok\n"
        "    try:\n"
        "        box.read_file('/big')\n"
        "    except IsADirectoryError:\n"
        "        status = open('/proc/self/status').read()\n"
        "        print(int(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1)) // 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, swe_instances[0].image_name, swe_docker],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().isdigit(), done.stderr[-2000:]
    assert int(done.stdout) < 300, f"peak memory {done.stdout.strip()} MB"


def test_score_reports_resolved_unapplied_empty_and_forged_predictions(swe_built, swe_instances, tmp_path,
                                                                         docker_client_for_tests):
    fourth = _of_project(swe_instances, "toolz")  # where stubbing the tests resolves it, unless caught
    first, second, third = [instance for instance in swe_instances if instance is not fourth][:3]
    forgery = _patch_from_edits(fourth, docker_client_for_tests, {fourth.extra["mutation"]["path"]: "\n" + STUBBED_TESTS})
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps(row) + "\n" for row in [
        {"instance_id": first.instance_id, "model_patch": first.patch, "model_name_or_path": "gold"},
        {"instance_id": second.instance_id, "model_patch": "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"},
        {"instance_id": third.instance_id, "model_patch": ""},
        {"instance_id": fourth.instance_id, "model_patch": forgery},
    ]))
    done = swe_cli("score", "--instances", str(swe_built / "instances.jsonl"), "--predictions", str(predictions))
    # a patch that does not apply fails the run, with its reason on one line
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"resolved 1/4 submitted ({BUILD_LIMIT} instances)" in done.stdout
    assert "forged test results caught by the planted tests: 1 (1 of them resolved on the hidden tests alone)" in done.stdout
    reasons = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(reasons) == 1 and reasons[0].startswith(f"error: {second.instance_id}: the model patch does not apply: ")
    assert "nope.py" in reasons[0]
    report = json.loads((tmp_path / "preds.jsonl.report.json").read_text())
    assert report["resolved_ids"] == [first.instance_id]
    assert report["patch_not_applied"] == 1 and report["empty_patch_instances"] == 1
    # the forgery is caught, and listed as one that the hidden tests alone would have taken for resolved
    assert report["forgery_caught_ids"] == report["forgery_would_have_resolved_ids"] == [fourth.instance_id]
    gold_only = tmp_path / "gold.jsonl"
    gold_only.write_text(json.dumps({"instance_id": first.instance_id, "model_patch": first.patch}) + "\n")
    assert swe_cli("score", "--instances", str(swe_built / "instances.jsonl"), "--predictions", str(gold_only)).returncode == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"instance_id": "nobody__nothing-1", "model_patch": ""}) + "\n")
    refused = swe_cli("score", "--instances", str(swe_built / "instances.jsonl"), "--predictions", str(bad))
    assert refused.returncode == 2 and "nobody__nothing-1" in refused.stderr


def test_a_test_patch_that_does_not_apply_is_named(swe_instances, tmp_path):
    broken = dataclasses.replace(swe_instances[0])  # a copy: the instances are shared by the session
    broken.test_patch = "diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-missing\n+line\n"
    path = tmp_path / "broken.jsonl"
    write_jsonl([broken], path)
    done = swe_cli("validate", str(path))
    assert done.returncode == 1
    assert f"set-up failed for {broken.instance_id}" in done.stdout and "'test_patch' does not apply" in done.stdout
    assert "gold does not resolve" not in done.stdout
    row = json.loads(path.read_text())
    del row["base_commit"]
    path.write_text(json.dumps(row) + "\n")
    missing = swe_cli("validate", str(path))
    assert missing.returncode == 2 and broken.instance_id in missing.stderr and "base_commit" in missing.stderr


# A conda environment the way SWE-bench's images have one: the repository's Python in /opt/miniconda3/envs/testbed
# (here a real venv over the image's Python, holding a module the system Python lacks), activated by conda's shell
# hook, which the image's login shell reads and ``docker exec`` does not. The hook is a stand-in for conda's own
# (which cannot be installed offline): ``conda activate`` exports what conda's does, plus a variable an activation
# script would set.
CONDA_LIKE_IMAGE = r"""set -e
python3 -m venv --without-pip --system-site-packages /opt/miniconda3/envs/testbed
site=$(/opt/miniconda3/envs/testbed/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo 'WHERE = "testbed"' > "$site/swe_env_marker.py"
mkdir -p /opt/miniconda3/etc/profile.d
cat > /opt/miniconda3/etc/profile.d/conda.sh <<'HOOK'
conda() {
    [ "$1" = activate ] || return 1
    export CONDA_PREFIX="$2" CONDA_DEFAULT_ENV="${2##*/}" CONDA_SHLVL=1 PATH="$2/bin:$PATH" SKYGYM_ACTIVATE_D=ran
}
HOOK
"""
ENVIRONMENT_TEST = "test_skygym_environment.py::test_the_images_environment"
ENVIRONMENT_TEST_PATCH = (
    "diff --git a/test_skygym_environment.py b/test_skygym_environment.py\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/test_skygym_environment.py\n@@ -0,0 +1,5 @@\n+import os\n+\n"
    "+def test_the_images_environment():\n+    import swe_env_marker\n"
    "+    assert swe_env_marker.WHERE == os.environ['CONDA_DEFAULT_ENV'] == 'testbed'\n"
)


@contextlib.contextmanager
def _derived_image(client, base_image: str, script: str, name: str):
    """An image made from ``base_image`` by running ``script`` in it (no network), removed afterwards."""
    holder = client.containers.run(base_image, "sleep 600", detach=True, network_mode="none")
    try:
        made = holder.exec_run(["bash", "-c", script])
        assert made.exit_code == 0, made.output.decode()[-1000:]
        image = holder.commit(repository=name, tag="latest")
    finally:
        holder.remove(force=True)
    try:
        yield f"{name}:latest"
    finally:
        client.images.remove(image.id, force=True)


def test_grading_and_the_tools_run_in_the_images_conda_environment(swe_instances, docker_client_for_tests):
    base = swe_instances[0]
    with _derived_image(docker_client_for_tests, base.image_name, CONDA_LIKE_IMAGE, "skyrl-gym-swe-test-conda") as image:
        instance = dataclasses.replace(base, image_name=image, test_patch=base.test_patch + ENVIRONMENT_TEST_PATCH,
                                       PASS_TO_PASS=[*base.PASS_TO_PASS, ENVIRONMENT_TEST])
        with SWERuntime(instance, client=docker_client_for_tests) as runtime:
            runtime.setup()
            seen = runtime.exec("command -v python3; echo $SKYGYM_ACTIVATE_D; python3 -c 'import swe_env_marker'")
            assert seen.ok and seen.output.split() == ["/opt/miniconda3/envs/testbed/bin/python3", "ran"], seen.output
        report = evaluate_patch(instance, instance.patch, client=docker_client_for_tests)
        assert report.resolved, report.error
        assert ENVIRONMENT_TEST in report.pass_to_pass["success"]
        # the same row in the image without the environment: the test runs on the system Python, and fails
        plain = dataclasses.replace(instance, image_name=base.image_name)
        unresolved = evaluate_patch(plain, plain.patch, client=docker_client_for_tests)
        assert ENVIRONMENT_TEST in unresolved.pass_to_pass["failure"] and not unresolved.resolved


# What an image's set-up leaves in /testbed beside the repository, ignored by git (SWE-bench's images build their
# packages in place: compiled extensions, *.egg-info, build/ copies of library modules, which name pytest).
BUILD_OUTPUTS_IMAGE = r"""set -e
printf 'build/\n*.bin\n' > /etc/skygym-build-outputs
git config --system core.excludesFile /etc/skygym-build-outputs
mkdir -p /testbed/build/lib
printf 'import pytest\n' > /testbed/build/lib/copied_module.py
printf '\0compiled\0' > /testbed/extension.bin
"""
BUILD_OUTPUTS_TEST = "test_skygym_build_outputs.py::test_the_images_build_outputs"
BUILD_OUTPUTS_TEST_PATCH = (
    "diff --git a/test_skygym_build_outputs.py b/test_skygym_build_outputs.py\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/test_skygym_build_outputs.py\n@@ -0,0 +1,4 @@\n+import pathlib\n+\n"
    "+def test_the_images_build_outputs():\n+    assert pathlib.Path('/testbed/extension.bin').read_bytes() == b'\\0compiled\\0'\n"
)


def test_the_images_build_outputs_are_not_taken_for_the_patchs_files(swe_instances, docker_client_for_tests):
    """Grading compared the applied tree with base_commit, ignored files included: every patch 'added' the image's
    build outputs, so the binary ones were removed as protected and a copied module naming pytest refused the patch
    (the gold one too). It compares with the tree before the patch now; what a patch adds at an ignored path is
    still read."""
    base = swe_instances[0]
    with _derived_image(docker_client_for_tests, base.image_name, BUILD_OUTPUTS_IMAGE, "skyrl-gym-swe-test-built") as image:
        instance = dataclasses.replace(base, image_name=image, test_patch=base.test_patch + BUILD_OUTPUTS_TEST_PATCH,
                                       PASS_TO_PASS=[*base.PASS_TO_PASS, BUILD_OUTPUTS_TEST])
        report = evaluate_patch(instance, instance.patch, client=docker_client_for_tests)
        assert report.resolved, report.error
        assert BUILD_OUTPUTS_TEST in report.pass_to_pass["success"] and report.restored_paths == []
        sneaky = instance.patch + ("diff --git a/build/lib/sneaky.py b/build/lib/sneaky.py\nnew file mode 100644\n"
                                   "--- /dev/null\n+++ b/build/lib/sneaky.py\n@@ -0,0 +1 @@\n+import pytest\n")
        refused = evaluate_patch(instance, sneaky, client=docker_client_for_tests)
        assert not refused.resolved and "build/lib/sneaky.py adds 'pytest'" in refused.error


def test_a_grading_without_a_verdict_ends_the_episode_without_a_reward(swe_instances):
    import skyrl_gym
    from skyrl_gym.envs.swe.dataset import instance_row
    from skyrl_gym.envs.swe.replay import replay_actions
    from skyrl_gym.episode import ScriptedPolicy, run_episode, run_sync

    broken = dataclasses.replace(
        swe_instances[1], test_patch="diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-missing\n+line\n")
    row = instance_row(broken)
    episode = run_sync(
        run_episode(lambda: skyrl_gym.make("swe", extras=row), row["prompt"], ScriptedPolicy(replay_actions(broken.patch)))
    )
    # the gold patch, whose hidden tests do not apply: no verdict, so no reward (a trainer masks the episode out)
    assert episode.error is not None and "'test_patch' does not apply" in episode.error
    assert episode.error_method == "step" and episode.total_reward == 0.0


def test_a_missing_image_is_a_set_up_failure_not_an_unresolved_gold_patch(swe_instances, tmp_path):
    ghost = dataclasses.replace(swe_instances[0], image_name="skyrl-gym-swe-ghost:no-such-tag")
    path = tmp_path / "ghost.jsonl"
    write_jsonl([ghost], path)
    done = swe_cli("validate", str(path))
    assert done.returncode == 1
    assert "set-up failed 1/1" in done.stdout
    assert f"set-up failed for {ghost.instance_id}: image 'skyrl-gym-swe-ghost:no-such-tag' is not in the Docker engine" \
        in done.stdout
    assert "gold does not resolve" not in done.stdout
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"instance_id": ghost.instance_id, "model_patch": ghost.patch}) + "\n")
    scored = swe_cli("score", "--instances", str(path), "--predictions", str(predictions))
    assert scored.returncode == 1 and "is not in the Docker engine" in scored.stderr


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_command_leaves_no_container_or_image_behind(swe_built, swe_instances, docker_client_for_tests,
                                                                   how, tmp_path):
    from skygym_sandboxes.containers import containers_of_kind
    from skygym_sandboxes.docker_backend import OWNER_LABEL

    client = docker_client_for_tests
    dangling_before = {image.id for image in client.images.list(filters={"dangling": True})}
    if how == signal.SIGINT:
        # a validation that is still running when the signal comes, however slowly the machine lists containers:
        # the instance's hidden tests gain one that sleeps (the command never finishes on its own)
        hanging = dataclasses.replace(swe_instances[0], instance_id="hang__forever-1")
        hanging.test_patch += (
            "diff --git a/test_skygym_hang.py b/test_skygym_hang.py\nnew file mode 100644\n--- /dev/null\n"
            "+++ b/test_skygym_hang.py\n@@ -0,0 +1,3 @@\n+import time\n+def test_hang():\n+    time.sleep(3600)\n"
        )
        hanging.FAIL_TO_PASS = [*hanging.FAIL_TO_PASS, "test_skygym_hang.py::test_hang"]
        write_jsonl([hanging], tmp_path / "instances.jsonl")
        command, kind = ["validate", str(tmp_path / "instances.jsonl"), "--workers", "1"], "swe"
    else:  # a build of a project whose image is cached: interrupted while it tries bugs
        command, kind = ["build", "--out", str(swe_built / "again"), "--projects", "toolz", "--limit", "4", "--seed", "5"], "swe-build"
    process = subprocess.Popen([sys.executable, "-m", "skyrl_gym.cli", "swe", *command, "--no-progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def started_by_it(kind):  # only the command's own containers: another build may share the engine
        return [c for c in containers_of_kind(client, kind) if c.labels.get(OWNER_LABEL, "").endswith(f":{process.pid}")]

    deadline = time.monotonic() + 300
    while not started_by_it(kind):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no container started"
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(how)
    out, err = process.communicate(timeout=120)  # it stops the evaluation under way, not waits an hour for it
    assert process.returncode == (130 if how == signal.SIGINT else 143), (out[-2000:], err[-2000:])
    assert started_by_it("swe") == [] and started_by_it("swe-build") == []
    assert {image.id for image in client.images.list(filters={"dangling": True})} <= dangling_before


def test_a_build_resumes_from_the_projects_it_finished(swe_built):
    """The same command again (as after an interruption): finished projects are read back, not built again."""
    before = (swe_built / "instances.jsonl").read_text()
    from tests.swe_fixtures import BUILD_PROJECTS

    done = swe_cli("build", "--out", str(swe_built), "--limit", str(BUILD_LIMIT), "--projects", BUILD_PROJECTS)
    assert done.returncode == 0, done.stdout + done.stderr
    for project in BUILD_PROJECTS.split(","):
        assert f"{project}: " in done.stdout + done.stderr and "from an earlier run" in done.stdout + done.stderr
    assert (swe_built / "instances.jsonl").read_text() == before


def test_a_project_that_cannot_be_fetched_is_a_clear_error(docker_client_for_tests):
    from skyrl_gym.envs.swe.synth.builder import BuildError, synthesize
    from skyrl_gym.envs.swe.synth.projects import Project

    ghost = Project("ghost", "skygym-no-such-project-for-tests==0.0.1", "nobody/ghost", ("ghost",), ("tests",),
                    sha256="0" * 64)
    with pytest.raises(BuildError, match="project 'ghost': could not download skygym-no-such-project-for-tests==0.0.1"):
        synthesize(docker_client_for_tests, ghost, quota=1)


def test_pip_refuses_a_source_distribution_whose_bytes_are_not_the_pin(tmp_path, monkeypatch):
    """The real pip, asked for toolz 1.2.0 with another SHA-256 than its archive's: refused before anything is built
    or cached."""
    import dataclasses

    from skyrl_gym.envs.swe.synth.builder import BuildError, fetch_sdist
    from skyrl_gym.envs.swe.synth.projects import PROJECTS

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(BuildError, match="could not download toolz==1.2.0 with pip: .*(?i:hash)"):
        fetch_sdist(dataclasses.replace(PROJECTS["toolz"], sha256="1" * 64))
    assert list((tmp_path / "skyrl-gym" / "swe" / "sdists" / "toolz").iterdir()) == []


def test_the_swe_env_passes_the_checker_with_adversarial_actions(swe_instances):
    """The checker's contract checks (empty, 10 MB, unicode and unclosed-tag actions, turn limits,
    determinism) on a real instance; the conformance kit of the adapters is not run on swe (each
    episode is a container), see tests/adapters/test_conformance.py."""
    from skyrl_gym import check_env
    from skyrl_gym.envs.swe.dataset import instance_row

    row = instance_row(swe_instances[2], max_turns=2)
    report = check_env("swe", [row], actions={"ls": "<bash>ls</bash>"})
    assert report.ok, str(report)


def test_check_and_audit_with_no_arguments_play_the_golden_case_on_the_base_image(swe_instances, tmp_path):
    """`skyrl-gym check swe` and `audit swe` with no arguments: the golden case runs on the base image `swe build`
    makes first (its image was one no command built: every such check was skipped, and the audit an error). An
    image the engine lacks is said with how to get it: the audit skips (exit 3), as the check does."""
    from skyrl_gym.envs.swe.dataset import instance_row

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "skyrl_gym.cli", *args], capture_output=True, text=True,
                              timeout=900)

    # the contract's adversarial actions and determinism are checked on a built instance (below): here, the case
    checked = cli("check", "swe", "--no-split-check", "--no-adversarial", "--no-determinism")
    assert checked.returncode == 0 and "check swe: OK - 1 row(s)" in checked.stdout, checked.stdout + checked.stderr
    audited = cli("audit", "swe", "--hack", "conftest.py that passes every test")
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "golden: reference answer" in audited.stdout and "audit swe: OK - 1 row(s), 3 case(s)" in audited.stdout
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({**instance_row(swe_instances[0]), "image_name": "skyrl-gym-swe-gone:1"}) + "\n")
    skipped = cli("audit", "swe", "--rows", str(rows), "--hack", "empty reply")
    assert skipped.returncode == 3, skipped.stdout + skipped.stderr
    assert ("SKIPPED - this machine cannot run the env: image 'skyrl-gym-swe-gone:1' is not in the Docker engine; "
            "`skyrl-gym swe build` made it") in skipped.stdout
