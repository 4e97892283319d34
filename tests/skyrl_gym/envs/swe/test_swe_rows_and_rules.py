"""SWE rows, bug injection, the editor and the grader's rules, without a Docker engine.

The container-backed behaviour of the same pieces is tested with a real engine in test_swe_docker.py.
"""

from __future__ import annotations

import ast
import os
import json
import re
from pathlib import Path

import pytest

from skyrl_gym.envs.swe.editor import Editor
from skyrl_gym.envs.swe.grading import ChangedFile, harness_tampering, is_protected, patch_paths
from skyrl_gym.envs.swe.instances import (
    SWEInstanceError,
    load_instances,
    normalize_row,
    swebench_image_name,
    write_jsonl,
)
from skyrl_gym.envs.swe.replay import hunks, replay_actions
from skyrl_gym.envs.swe.runtime import parse_report
from skygym_sandboxes.containers import ExecResult
from skyrl_gym.envs.swe.synth.mutations import KINDS, find_mutations, sample_mutations
from skyrl_gym.envs.swe.synth.projects import PROJECTS, select_projects
from tests.nested_pytest import run_pytest

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "swe" / "swebench_style_row.json"


def fixture_row() -> dict:
    return json.loads(FIXTURE.read_text())


# ----- rows --------------------------------------------------------------------------------------------
def test_a_swebench_row_loads_with_its_json_string_test_lists_and_image_name():
    instance = normalize_row(fixture_row())
    assert instance.FAIL_TO_PASS == ["tests/test_ops.py::test_add"]
    assert instance.PASS_TO_PASS == []
    assert instance.image_name == "swebench/sweb.eval.x86_64.example-org_1776_calc-17:latest"
    assert instance.test_files == ["tests/test_ops.py"]
    assert instance.extra["environment_setup_commit"].startswith("3f1c")  # unknown columns are kept
    assert instance.to_row()["environment_setup_commit"] == instance.extra["environment_setup_commit"]


def test_r2e_rows_name_their_image_and_swe_gym_rows_take_a_namespace():
    row = fixture_row()
    assert normalize_row({**row, "docker_image": "r2e/calc:17"}).image_name == "r2e/calc:17"
    assert swebench_image_name("a__b-1", namespace="xingyaoww") == "xingyaoww/sweb.eval.x86_64.a_1776_b-1:latest"


@pytest.mark.parametrize("field", ["base_commit", "patch", "FAIL_TO_PASS", "problem_statement"])
def test_a_row_missing_a_field_is_an_error_naming_the_instance_and_the_field(field):
    row = fixture_row()
    del row[field]
    with pytest.raises(SWEInstanceError, match=rf"example-org__calc-17.*{field}"):
        normalize_row(row)


def test_bad_test_lists_and_bad_lines_are_named(tmp_path):
    with pytest.raises(SWEInstanceError, match="FAIL_TO_PASS.*empty"):
        normalize_row({**fixture_row(), "FAIL_TO_PASS": "[]"})
    with pytest.raises(SWEInstanceError, match="PASS_TO_PASS.*JSON list"):
        normalize_row({**fixture_row(), "PASS_TO_PASS": "tests/a.py::t"})
    broken = tmp_path / "rows.jsonl"
    broken.write_text(json.dumps(fixture_row()) + "\n{not json\n")
    with pytest.raises(SWEInstanceError, match=r"rows.jsonl:2"):
        load_instances(broken)
    with pytest.raises(FileNotFoundError, match="no such instances file"):
        load_instances(tmp_path / "missing.jsonl")


def test_instances_round_trip_through_jsonl(tmp_path):
    instance = normalize_row(fixture_row())
    path = tmp_path / "out" / "instances.jsonl"
    assert write_jsonl([instance, instance], path) == 2
    again = load_instances(path)
    assert [i.to_row() for i in again] == [instance.to_row()] * 2
    assert load_instances(path, limit=1)[0].instance_id == "example-org__calc-17"


@pytest.mark.parametrize("ids, runner", [
    (["test_both_pk_and_id (admin_views.tests.AdminViewBasicTest)"], "Django's test runner"),
    (["tests/test_ops.py::test_add", "test_issue_24062"], "SymPy's test runner"),
    (["tests/test_ops.py::test_add", "a test with no file"], ""),
])
def test_a_row_whose_tests_pytest_cannot_run_is_named_and_never_graded_a_0(ids, runner):
    import skyrl_gym
    from skyrl_gym.envs.swe.grading import evaluate_patch
    from skyrl_gym.episode import check_env_row

    row = {**fixture_row(), "FAIL_TO_PASS": ids[:1], "PASS_TO_PASS": ids[1:]}
    problem = normalize_row(row).grading_problem
    assert "cannot be graded" in problem and f"1 of its {len(ids)} test ids" in problem
    assert (f"(how {runner} names a test)" in problem) if runner else problem.endswith(repr(ids[-1]))
    # No container starts (this machine may have no Docker engine): grading says set-up failed, not "unresolved" ...
    report = evaluate_patch(normalize_row(row), row["patch"])
    assert report.instance_error and not report.resolved and report.error == f"set-up failed: {problem}"
    # ... and the env refuses the row as it is built, so a trainer names it before it starts
    with pytest.raises(SWEInstanceError, match="cannot be graded"):
        skyrl_gym.make("swe", extras=row)
    assert "cannot be graded" in check_env_row({**row, "env_class": "swe", "prompt": [{"role": "user",
                                                                                    "content": "fix it"}]})[0]


def test_pytest_node_ids_of_every_shape_are_gradable():
    ids = ["tests/test_ops.py::test_add", "tests/test_ops.py::TestOps::test_sub[1-2]", "tests/test_ops.py",
           "docs/usage.rst::usage.rst", "tests/test_ops.py::test_param[a b (c)]"]
    assert normalize_row({**fixture_row(), "FAIL_TO_PASS": ids}).grading_problem == ""


# ----- bug injection -----------------------------------------------------------------------------------
SOURCE = b'''\
def window(items, size=2, strict=True):
    """A docstring is never removed."""
    if size < 1:
        raise ValueError("size must be positive")
    items = list(items)
    out = []
    for start in range(0, len(items) - size + 1):
        chunk = items[start : start + size]
        if len(chunk) == size and strict:
            out.append(chunk)
        total = start + 1
    return max(out, key=len) if out else []


LIMIT = 3 < 4  # module level: never mutated
'''


def test_every_kind_of_bug_is_found_and_each_leaves_valid_python():
    mutations = find_mutations("pkg/mod.py", SOURCE)
    assert {m.kind for m in mutations} == set(KINDS)
    for mutation in mutations:
        mutated = mutation.apply(SOURCE)
        ast.parse(mutated)
        assert mutated != SOURCE
        assert mutation.function == "window"
        assert mutated.endswith(b"LIMIT = 3 < 4  # module level: never mutated\n")
    removed = [m for m in mutations if m.kind == "remove_statement"]
    assert all(b'"""A docstring' in m.apply(SOURCE) for m in removed)


def test_mutations_are_sampled_deterministically_one_function_at_a_time():
    source = SOURCE + b"\n\ndef other(a, b):\n    return a < b\n"
    mutations = find_mutations("pkg/mod.py", source)
    first = list(sample_mutations(mutations, seed=3))
    assert first == list(sample_mutations(mutations, seed=3))
    assert len(first) == 2 and {m.function for m in first} == {"window", "other"}
    assert len(list(sample_mutations(mutations, seed=3, per_function=100))) == len(mutations)


def test_a_file_that_does_not_parse_has_no_mutations_and_projects_are_pinned():
    assert find_mutations("x.py", b"def broken(:\n") == []
    assert all("==" in project.requirement for project in PROJECTS.values())
    assert all(re.fullmatch(r"[0-9a-f]{64}", project.sha256) for project in PROJECTS.values())
    assert len(PROJECTS) >= 5
    assert [p.name for p in select_projects("six, toolz")] == ["six", "toolz"]
    with pytest.raises(ValueError, match="unknown project 'nope'.*toolz"):
        select_projects("nope")
    with pytest.raises(ValueError, match=r"unknown project 'toolzz' \(did you mean 'toolz'\?\)"):
        select_projects("toolzz")


def test_only_a_source_distribution_with_the_pinned_sha256_is_used(tmp_path, monkeypatch):
    """pip runs a source distribution's build code (its metadata hooks) as it downloads it, and the cache was used
    whatever its bytes: the builder now takes only the archive whose SHA-256 the project pins, asks pip to check
    it before it builds anything, and moves the download into the cache whole. pip is a stand-in here (what it
    is asked is checked); the real pip's refusal of other bytes is tested in test_swe_docker.py."""
    import hashlib
    import subprocess

    from skyrl_gym.envs.swe.synth import builder
    from skyrl_gym.envs.swe.synth.builder import BuildError, fetch_sdist
    from skyrl_gym.envs.swe.synth.projects import Project

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "skyrl-gym" / "swe" / "sdists" / "ghost"
    pinned = b"the pinned archive"
    ghost = Project("ghost", "ghost==0.0.1", "nobody/ghost", ("ghost",), ("tests",),
                    sha256=hashlib.sha256(pinned).hexdigest())
    asked, serves = [], [pinned]

    def pip(command, **_kwargs):
        asked.append((command, Path(command[command.index("-r") + 1]).read_text()))
        dest = Path(command[command.index("--dest") + 1])
        dest.mkdir()
        (dest / "ghost-0.0.1.tar.gz").write_bytes(serves[0])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(builder.subprocess, "run", pip)
    folder.mkdir(parents=True)
    (folder / "ghost-0.0.1.tar.gz").write_bytes(b"other bytes under the same name")  # not used: fetched again
    assert fetch_sdist(ghost) == folder / "ghost-0.0.1.tar.gz"
    assert (folder / "ghost-0.0.1.tar.gz").read_bytes() == pinned
    assert [path.name for path in folder.iterdir()] == ["ghost-0.0.1.tar.gz"]  # the download's folder is gone
    command, requirements = asked[0]
    assert requirements == f"ghost==0.0.1 --hash=sha256:{ghost.sha256}\n"
    assert "--require-hashes" in command and command[command.index("--no-binary") + 1] == "ghost"
    assert fetch_sdist(ghost) == folder / "ghost-0.0.1.tar.gz" and len(asked) == 1  # cached, checked, kept

    (folder / "ghost-0.0.1.tar.gz").write_bytes(b"changed in the cache")
    serves[0] = b"what a tampered index serves"  # (the real pip refuses it; this stand-in does not)
    with pytest.raises(BuildError, match=r"pip downloaded \['ghost-0.0.1.tar.gz'\] .* not a .tar.gz source "
                                         "distribution with the pinned sha256"):
        fetch_sdist(ghost)
    assert (folder / "ghost-0.0.1.tar.gz").read_bytes() == b"changed in the cache"  # never replaced by it

    with pytest.raises(BuildError, match="project 'ghost': no sha256 of its source distribution is pinned"):
        fetch_sdist(Project("ghost", ghost.requirement, "nobody/ghost", ("ghost",), ("tests",)))
    with pytest.raises(BuildError, match="is not name==version"):
        fetch_sdist(Project("ghost", "ghost==1\n--index-url x", "nobody/ghost", ("ghost",), ("tests",),
                            sha256=ghost.sha256))
    assert len(asked) == 2


# ----- editor (a folder stands in for the container here) -------------------------------------------------
class FolderFiles:
    """Unit-test double of the container's files: the real container path is in test_swe_docker.py."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _local(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def read(self, path):
        return self._local(path).read_bytes()

    def write(self, path, data):
        self._local(path).parent.mkdir(parents=True, exist_ok=True)
        self._local(path).write_bytes(data)

    def kind(self, path):
        local = self._local(path)
        return "dir" if local.is_dir() else "file" if local.exists() else "missing"

    def listing(self, path):
        return "\n".join(sorted(str(p) for p in self._local(path).iterdir()))


def test_the_editor_views_edits_inserts_and_undoes(tmp_path):
    editor = Editor(FolderFiles(tmp_path))
    assert editor.run("create", "/testbed/a.py", file_text="x = 1\ny = 2\nz = 3") == "File created: /testbed/a.py"
    assert "already exists" in editor.run("create", "/testbed/a.py", file_text="")
    view = editor.run("view", "/testbed/a.py", view_range=[2, -1])
    assert "     2\ty = 2" in view and "     3\tz = 3" in view and "x = 1" not in view
    assert "outside the file's lines 1-3" in editor.run("view", "/testbed/a.py", view_range=[0, 9])
    assert "was edited" in editor.run("str_replace", "/testbed/a.py", old_str="y = 2", new_str="y = 20")
    assert "does not occur" in editor.run("str_replace", "/testbed/a.py", old_str="nope", new_str="")
    editor.run("insert", "/testbed/a.py", insert_line=0, new_str="# top")
    assert (tmp_path / "testbed/a.py").read_text() == "# top\nx = 1\ny = 20\nz = 3"
    assert "occurs 3 times in /testbed/a.py (lines 2, 3, 4)" in editor.run("str_replace", "/testbed/a.py", old_str=" = ", new_str="=")
    editor.run("undo_edit", "/testbed/a.py")
    editor.run("undo_edit", "/testbed/a.py")
    assert (tmp_path / "testbed/a.py").read_text() == "x = 1\ny = 2\nz = 3"
    assert "no edit" in editor.run("undo_edit", "/testbed/a.py")
    assert "not absolute" in editor.run("view", "a.py") and "/testbed/a.py" in editor.run("view", "a.py")
    assert "unknown command" in editor.run("delete", "/testbed/a.py")
    assert "does not exist" in editor.run("view", "/testbed/zzz.py")
    assert "a.py" in editor.run("view", "/testbed")


def test_a_long_view_is_cut_with_a_note_saying_how_to_see_the_rest(tmp_path):
    (tmp_path / "big.py").write_text("\n".join(f"line_{i} = {i}" for i in range(5000)))
    view = Editor(FolderFiles(tmp_path), max_view_chars=2000).run("view", "/big.py")
    assert len(view) < 2300 and "view_range=[" in view and "shows the rest" in view


def test_the_editor_bounds_what_a_hostile_call_costs(tmp_path):
    """Found by an attacker's pass: each was unbounded before (hours of CPU, gigabytes of history, megabytes of
    snippet, a crashed step)."""
    editor = Editor(FolderFiles(tmp_path), max_view_chars=2000, max_history_bytes=2_500_000)
    (tmp_path / "a.txt").write_text("a" * 2_000_000)  # two million matches of old_str "a"
    refused = editor.run("str_replace", "/a.txt", old_str="a", new_str="b")
    assert refused == "Error: old_str occurs 2000000 times in /a.txt (lines 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, ...); make it unique."
    (tmp_path / "b.txt").write_text("x\n" * 3 + "y")
    assert "(lines 1, 2, 3)" in editor.run("str_replace", "/b.txt", old_str="x", new_str="z")

    one_line = tmp_path / "long.txt"
    one_line.write_text("q" * 1_000_000)  # an edit's snippet shows whole lines: this one is a million characters
    edited = editor.run("insert", "/long.txt", insert_line=1, new_str="tail")
    assert len(edited) < 2300 and "view_range=[1, 2] shows these lines" in edited
    for _ in range(4):  # each edit keeps the file as it was: a million characters each
        editor.run("insert", "/long.txt", insert_line=0, new_str="head")
    assert editor.history_bytes <= 2_500_000 and len(editor.history) == 2
    editor.run("undo_edit", "/long.txt")
    editor.run("undo_edit", "/long.txt")
    assert one_line.read_text().startswith("head\n" * 2 + "q")
    assert "no longer kept" in editor.run("undo_edit", "/long.txt")
    wide = Editor(FolderFiles(tmp_path), max_history_bytes=2_500_000)  # the bound is memory: 4 bytes a character here
    (tmp_path / "wide.txt").write_text("\U0001F600" * 500_000)
    for _ in range(2):
        wide.run("insert", "/wide.txt", insert_line=0, new_str="x")
    assert len(wide.history) == 1 and wide.history_bytes <= 2_500_000

    for name, value in (("file_text", 123), ("file_text", ["a"]), ("new_str", 5), ("old_str", {"a": 1})):
        arguments = {"file_text": None, "old_str": None, "new_str": None, name: value}
        command = "create" if name == "file_text" else "insert" if name == "new_str" else "str_replace"
        answer = editor.run(command, "/new.txt" if command == "create" else "/b.txt", insert_line=0, **arguments)
        assert answer == f"Error: {name} must be a string, got {type(value).__name__}."


# ----- grading rules -----------------------------------------------------------------------------------
def test_the_test_report_is_refused_when_tampered_with():
    nonce = "0123456789abcdef0123456789abcdef"
    good = nonce + '{"nodeid": "t.py::a", "outcome": "passed", "message": ""}\n' + nonce + '{"end": true, "exitstatus": 0}\n'
    assert parse_report(good, nonce).passed("t.py::a")
    for bad in (
        nonce + '{"nodeid": "t.py::a", "outcome": "passed"}\n',  # no end line: the run was cut short
        "PASSED t.py::a\n" + good,  # console text on the report channel
        nonce + '{"nodeid": "t.py::a", "outcome": "passed"}\n' + good,  # a test reported twice
        good + nonce + '{"nodeid": "t.py::b", "outcome": "passed"}\n',  # lines after the end
        good.replace(nonce, "f" * 32),  # lines without this run's nonce (a blind forger's)
    ):
        run = parse_report(bad, nonce)
        assert run.error and not run.passed("t.py::a")


def test_the_reporter_tells_an_xfail_raised_while_a_test_ran_from_one_its_mark_declares(tmp_path):
    """The real plugin under this machine's pytest: a FAIL_TO_PASS test needs a pass or a declared xfail, since
    library code can raise ``xfail`` too (the Docker tests run the forgery)."""
    import os

    from skyrl_gym.envs.swe.runtime import REPORT_HELPERS, REPORT_PLUGIN

    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.xfail\ndef test_marked():\n    assert False\n\n"
        "def test_raised():\n    pytest.xfail('raised')\n\ndef test_passes():\n    pass\n"
    )
    for name, source in REPORT_HELPERS.items():  # the plugin and the channel it writes on
        (tmp_path / name).write_bytes(source)
    nonce = "0123456789abcdef0123456789abcdef"
    (tmp_path / "nonce").write_text(nonce)
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SKYGYM_REPORT_FD": str(write),
           "SKYGYM_REPORT_NONCE": str(tmp_path / "nonce")}
    run_pytest("-p", REPORT_PLUGIN, "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), "test_x.py",
               cwd=tmp_path, env=env, pass_fds=(write,), capture_output=True, timeout=120)
    os.close(write)
    with os.fdopen(read, encoding="utf-8") as channel:
        run = parse_report(channel.read(), nonce)
    assert not run.error, run.error
    marked, raised, passes = (run.outcomes[f"test_x.py::test_{name}"] for name in ("marked", "raised", "passes"))
    assert (marked.outcome, marked.raised, marked.passed, marked.ran_to_a_pass) == ("xfailed", False, True, True)
    assert (raised.outcome, raised.raised, raised.passed, raised.ran_to_a_pass) == ("xfailed", True, True, False)
    assert passes.ran_to_a_pass and not passes.raised
    # the field is the reporter's: a wrong type is a tampered report
    end = nonce + '{"end": true, "exitstatus": 0}\n'
    assert "tampered" in parse_report(nonce + '{"nodeid": "a", "outcome": "xfailed", "raised": 1}\n' + end,
                                      nonce).error


def test_a_report_line_built_to_crash_the_parser_is_a_tampered_run_not_an_exception():
    """Each of these raised out of the grader (RecursionError, ValueError, TypeError) and so out of env.step."""
    end = '{"end": true, "exitstatus": 0}\n'
    for line in (
        "[" * 100_000 + "]" * 100_000,  # nesting deeper than the JSON decoder's recursion
        '{"nodeid": "t.py::a", "outcome": "passed", "exitstatus": ' + "1" * 5000 + "}",  # a number too long to convert
        '{"nodeid": "t.py::a", "outcome": "passed", "calls": 5}',  # fields of the wrong type
        '{"nodeid": "t.py::a", "outcome": "passed", "message": ["x"], "where": 3}',
        '{"nodeid": ["t.py::a"], "outcome": "passed"}',
    ):
        run = parse_report(line + "\n" + end)
        assert "tampered" in run.error and not run.outcomes


def test_an_evaluation_that_failed_without_a_verdict_is_tried_again_and_a_verdict_never_is(monkeypatch):
    """A container that could not be written to (``OSError``, as a loaded Docker engine once gave) is no verdict
    on the patch: the evaluation runs again in a fresh container, and only a third failure is the instance's
    error. An unresolved verdict is final. (A double stands in for the Docker engine here; the Docker tests run
    the real evaluation.)"""
    from skyrl_gym.envs.swe import grading

    instance = normalize_row(fixture_row())
    calls = []

    def evaluate(inst, patch, client=None, timeout_s=0.0):
        calls.append(patch)
        if patch == "flaky" and calls.count("flaky") == 1:
            raise OSError("cannot create /opt/skygym (exit status 1 after 0.1 s): no output")
        if patch == "broken":
            raise OSError("the Docker engine is gone")
        return grading.EvalReport(inst.instance_id, resolved=patch in ("flaky", "good"), patch_applied=True)

    monkeypatch.setattr(grading, "evaluate_patch", evaluate)
    flaky, good, unresolved, broken = grading.evaluate_many(
        [instance] * 4, ["flaky", "good", "wrong", "broken"], workers=1, retry_delay_s=0.0)
    assert flaky.resolved and not flaky.error and calls.count("flaky") == 2
    assert good.resolved and calls.count("good") == 1
    assert not unresolved.resolved and not unresolved.error and calls.count("wrong") == 1
    assert not broken.resolved and calls.count("broken") == 3
    assert broken.error == "evaluation failed (after 3 tries): OSError: the Docker engine is gone"


def test_patches_that_touch_the_harness_or_protected_files_are_caught():
    """The rules on what git says a patch changed (the Docker tests get those lists from git in a grading container)."""
    instance = normalize_row(fixture_row())
    library = ChangedFile("calc/ops.py", added=["import _pytest.runner"])
    assert "reaches for the test harness" in harness_tampering([library])
    for spelled in ("os.write(3, b'{}')", "open('/dev/fd/5', 'w')", "open('/proc/1/fd/5', 'w')", "open('/proc/self/mem', 'rb')", "io.FileIO(5, 'w')",
                    "def pytest_runtest_logreport(report):", "sys.modules['skygym_pytest_report']",
                    "gc.get_objects()", "f.__closure__[0]"):
        assert harness_tampering([ChangedFile("calc/ops.py", added=[spelled])]), spelled
    assert harness_tampering([ChangedFile("calc/ops.py", added=["return a + b"])]) is None
    hidden = patch_paths(instance.test_patch)
    protected = ["tests/test_ops.py", "tests/helpers.py", "conftest.py", "calc/x.pth", "calc/.pytest.ini", ".gitattributes",
                 "evil-1.0.dist-info/entry_points.txt", "src/evil.egg-info/entry_points.txt",
                 "calc/__pycache__/ops.cpython-311.pyc",
                 "EVIL-1.0.DIST-INFO/entry_points.txt", "calc/x.PTH"]  # importlib.metadata ignores the case
    assert [path for path in protected if not is_protected(path, hidden)] == []
    assert is_protected("calc/logo.png", hidden, binary=True)
    # a file where a hidden file's folder goes, or a folder where a hidden file goes, would keep the hidden tests
    # from applying: a set-up failure, no verdict, where the patch earned a 0
    assert is_protected("pkg", {"pkg/checks.py"}) and is_protected("pkg/checks.py/x.py", {"pkg/checks.py"})
    assert not is_protected("pkg2", {"pkg/checks.py"}) and not is_protected("pk", {"pkg/checks.py"})
    assert not is_protected("calc/ops.py", hidden) and not is_protected("skygym_pytest_report.py", hidden)


def test_the_added_lines_of_a_patch_are_read_by_its_hunks_not_by_lines_that_look_like_headers():
    """A line '++ b/tests/test_x.py' in a library file shows in the diff as '+++ b/tests/test_x.py': read as a
    header, the lines after it were taken for a test file's and left unchecked. (A double stands in for git's
    output here; the Docker tests grade the same patch in a container.)"""
    from skyrl_gym.envs.swe import grading

    diff = (
        "1\t0\tcalc/ops.py\0\0\0diff --git a/calc/ops.py b/calc/ops.py\nindex 1..2 100644\n--- a/calc/ops.py\n"
        '+++ b/calc/ops.py\n@@ -1,0 +2,3 @@\n+"""\n+++ b/tests/test_x.py\n+import pytest\n'
    )

    class Runtime:
        instance = normalize_row(fixture_row())

        def exec(self, command, timeout_s, output_cap):
            return ExecResult(0, diff)

    files = grading.changed_files(Runtime(), "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
    assert [(item.path, item.added) for item in files] == [("calc/ops.py", ['"""', "++ b/tests/test_x.py", "import pytest"])]
    assert "pytest" in harness_tampering(files)


def test_a_patch_replays_as_one_str_replace_per_hunk_then_submit():
    instance = normalize_row(fixture_row())
    assert hunks(instance.patch) == [("calc/ops.py", "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b")]
    actions = replay_actions(instance.patch)
    assert len(actions) == 2 and '"name": "submit"' in actions[-1]
    call = json.loads(actions[0][len("<tool_call>") : -len("</tool_call>")])
    assert call["arguments"]["path"] == "/testbed/calc/ops.py" and call["arguments"]["command"] == "str_replace"



def test_a_huge_patch_is_graded_but_not_kept_in_the_episodes_metadata():
    """The metadata of every episode of a batch stays in the trainer's memory and goes to its trajectory files:
    a patch may be 20 MB. Over 1,000,000 characters it is named by its length and hash instead."""
    import hashlib

    from skyrl_gym.envs.swe.env import MAX_KEPT_PATCH_CHARS, patch_metadata

    small = "diff --git a/x b/x\n+1\n"
    assert patch_metadata(small) == {"model_patch": small}
    huge = "+" + "x" * MAX_KEPT_PATCH_CHARS
    kept = patch_metadata(huge)
    assert kept["model_patch"] == "" and kept["model_patch_chars"] == len(huge)
    assert kept["model_patch_sha256"] == hashlib.sha256(huge.encode()).hexdigest()
    assert "graded whole" in kept["model_patch_left_out"]


def test_env_config_images_limits_the_images_a_row_may_run():
    from skyrl_gym.envs.swe.env import check_image
    from skyrl_gym.errors import DataError

    check_image("private/credentials:latest", None)  # no list: any image (a user's own machine)
    check_image("skyrl-gym-swe-six:0123", ["skyrl-gym-swe-"])
    check_image("skyrl-gym-swe-six:0123", "skyrl-gym-swe-")
    with pytest.raises(DataError, match="'private/credentials:latest' is not one this env may run"):
        check_image("private/credentials:latest", ["skyrl-gym-swe-"])
    with pytest.raises(ValueError, match="must be a list of image-name prefixes"):
        check_image("skyrl-gym-swe-six:0123", [""])


def test_the_restore_puts_back_protected_files_and_removes_new_ones_named_as_patterns(tmp_path):
    """A new file named "tests/test_[a]*.py" is a git pathspec that matches tests/test_a.py: its checkout
    succeeded, so the new file, which had to be removed, stayed (run here with the shell and git of this machine;
    the Docker tests run it in the grading container)."""
    import shutil
    import subprocess

    from skyrl_gym.envs.swe.grading import restore_command

    if not shutil.which("git"):
        pytest.skip("git is not installed: apt-get install git")
    run = lambda *args: subprocess.run(args, cwd=tmp_path, check=True, capture_output=True, text=True)  # noqa: E731
    run("git", "init", "-q")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    assert 1\n")
    run("git", "add", "-A")
    run("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    base = run("git", "rev-parse", "HEAD").stdout.strip()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    assert 0\n")  # the patch's edit
    paths = ["tests/test_[a]*.py", "tests/new/conftest.py", "tests/test_a.py"]
    for path in paths[:2]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("import os\n")
    (tmp_path / "listing").write_bytes(b"\0".join(p.encode() for p in paths))
    subprocess.run(["sh", "-c", restore_command("listing", base)], cwd=tmp_path, check=True)
    assert not (tmp_path / "tests" / "test_[a]*.py").exists() and not (tmp_path / "tests" / "new").exists()
    assert (tmp_path / "tests" / "test_a.py").read_text() == "def test_a():\n    assert 1\n"
    assert not (tmp_path / "listing").exists()


# ----- the `swe` commands' mistakes (no engine needed) ----------------------------------------------------
def test_a_build_with_other_settings_sets_the_earlier_one_aside_and_says_so(tmp_path):
    """A second build into the same --out with other options replaced its instances.jsonl, progress and card
    without a word (the earlier predictions then named instances it no longer held)."""
    from skyrl_gym.envs.swe.synth.builder import set_aside_other_build

    earlier = {"builder": "2", "seed": 0, "limit": 2, "projects": ["toolz"], "issue_writer": False}
    (tmp_path / "progress").mkdir()
    (tmp_path / "progress" / "toolz.json").write_text(json.dumps({"settings": earlier, "quota": 2}))
    (tmp_path / "instances.jsonl").write_text("{}\n")
    (tmp_path / "rows.jsonl").write_text("{}\n")  # not the build's: it stays
    assert set_aside_other_build(tmp_path, earlier) == ""  # the same settings: it resumes
    assert (tmp_path / "instances.jsonl").is_file()
    note = set_aside_other_build(tmp_path, {**earlier, "limit": 4, "projects": ["toolz", "six"]})
    moved = next((tmp_path / "earlier_builds").iterdir())
    assert note == (f"swe build: {tmp_path} held a build made with other settings (--limit 2 --projects toolz --seed 0);"
                    f" it was moved to {moved} (the same command as before resumes a build instead)")
    assert sorted(p.name for p in moved.iterdir()) == ["instances.jsonl", "progress"]
    assert not (tmp_path / "instances.jsonl").exists() and (tmp_path / "rows.jsonl").is_file()
    assert set_aside_other_build(tmp_path, earlier) == ""  # nothing left to set aside


def test_the_swe_commands_name_the_option_that_is_wrong(tmp_path):
    from tests.swe_fixtures import swe_cli

    rows = tmp_path / "instances.jsonl"
    write_jsonl([normalize_row(fixture_row())], rows)
    zero = swe_cli("validate", str(rows), "--limit", "0")
    assert zero.returncode == 2 and "--limit must be at least 1, got 0" in zero.stderr
    unwritable = swe_cli("validate", str(rows), "--report", str(rows / "validation.json"))  # before any container
    assert unwritable.returncode == 2, unwritable.stderr
    assert f"--report: cannot write {rows / 'validation.json'}: {rows} is a file, not a folder" in unwritable.stderr
    missing = swe_cli("score", "--instances", str(rows), "--predictions", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and f"--predictions: no such file: {tmp_path / 'nope.jsonl'}" in missing.stderr
    positions = tmp_path / "trajectories.jsonl"  # agent eval's output without data.instance_id_key
    positions.write_text(json.dumps({"instance_id": 0, "model_patch": ""}) + "\n")
    numbered = swe_cli("score", "--instances", str(rows), "--predictions", str(positions))
    assert numbered.returncode == 2 and "line 1's \"instance_id\" is 0, not an instance's id" in numbered.stderr
    assert "data.instance_id_key: instance_id" in numbered.stderr
    typo = swe_cli("build", "--out", str(tmp_path / "out"), "--limt", "2")
    assert typo.returncode == 2 and "usage: skyrl-gym swe build" in typo.stderr and "--limt" in typo.stderr
    socket = tmp_path / "docker.sock"  # the engine's socket given as a path, not the URL docker takes
    bare = swe_cli("build", "--out", str(tmp_path / "out"), "--limit", "1", "--projects", "toolz",
                   env={**os.environ, "SKYGYM_DOCKER_HOST": str(socket)})
    assert bare.returncode == 2 and f"an engine's address is a URL: unix://{socket} for a socket" in bare.stderr


def test_a_warning_the_patch_causes_does_not_unmark_a_binary_file(tmp_path):
    """git warns about line endings when a .gitattributes asks for them (the patch can bring its own); the warning
    came first in the list of changed files and made the first file's binary mark "warning...\\n-", so a binary
    file named to sort first ("!a.bin") was taken for text and left in place. Run with this machine's git and bash
    standing in for the container's (the Docker tests grade in one)."""
    import shutil
    import subprocess

    from skyrl_gym.envs.swe import grading
    from skyrl_gym.envs.swe.runtime import HELPERS

    if not shutil.which("git"):
        pytest.skip("git is not installed: apt-get install git")
    repo, helpers = tmp_path / "testbed", tmp_path / "helpers"
    repo.mkdir()

    class Runtime:  # the container's exec, on this machine: the helpers' folder inside tmp_path
        def exec(self, command, timeout_s=60, output_cap=16_000):
            done = subprocess.run(["bash", "-c", command.replace(HELPERS, str(helpers))], cwd=repo, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s)
            return ExecResult(done.returncode, done.stdout[:output_cap])  # one stream, in order, as there

    git = lambda *args: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,  # noqa: E731
                                       check=True, capture_output=True)
    git("init", "-q")
    (repo / "x.py").write_text("a = 1\n")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    before = grading.tree_before_patch(Runtime())
    (repo / ".gitattributes").write_text("* text eol=lf\n")  # what the patch adds
    (repo / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    (repo / "!a.bin").write_bytes(b"\0\1\2")
    files = {item.path: item.binary for item in grading.changed_files(Runtime(), before)}
    assert files == {"!a.bin": True, ".gitattributes": False, "crlf.txt": False}


def test_django_rows_are_graded_by_djangos_runner_on_the_test_patchs_modules():
    from skyrl_gym.envs.swe.instances import canonical_test_id, django_test_file
    from skyrl_gym.envs.swe.runtime import django_label

    test_patch = ("diff --git a/tests/admin_views/tests.py b/tests/admin_views/tests.py\n--- a/tests/admin_views/tests.py\n"
                  "+++ b/tests/admin_views/tests.py\n@@ -1 +1,2 @@\n x\n+y\n"
                  "diff --git a/tests/admin_views/models.py b/tests/admin_views/models.py\n--- a/tests/admin_views/models.py\n"
                  "+++ b/tests/admin_views/models.py\n@@ -1 +1,2 @@\n x\n+y\n"
                  "diff --git a/docs/ref/x.txt b/docs/ref/x.txt\n--- a/docs/ref/x.txt\n+++ b/docs/ref/x.txt\n@@ -1 +1,2 @@\n x\n+y\n")
    row = {**fixture_row(), "repo": "django/django", "test_patch": test_patch,
           "FAIL_TO_PASS": ["test_both_pk_and_id (admin_views.tests.AdminViewBasicTest)"],
           "PASS_TO_PASS": ["A docstring's first line.", "test_x (admin_views.tests.T.test_x)"]}
    instance = normalize_row(row)
    assert instance.test_runner == "django" and instance.grading_problem == ""
    assert instance.test_files == ["tests/admin_views/models.py", "tests/admin_views/tests.py"]
    assert [django_label(path) for path in instance.test_files] == ["admin_views.models", "admin_views.tests"]
    assert django_label("test_x (admin_views.tests.T.test_x)") == "admin_views.tests.T.test_x"
    assert canonical_test_id("test_x (admin_views.tests.T.test_x)") == "test_x (admin_views.tests.T)"
    assert canonical_test_id("A docstring's first line.") == "A docstring's first line."
    assert django_test_file("test_x (admin_views.tests.T)") == "tests/admin_views/tests.py"
    assert django_test_file("A docstring's first line.") == ""
    # Django's own testing tools (django/test/) are library code in its rows; its suite (tests/) is protected
    assert not is_protected("django/test/testcases.py", runner="django") and is_protected("django/test/testcases.py")
    assert is_protected("tests/runtests.py", runner="django") and is_protected("tests/test_sqlite.py", runner="django")


def test_the_reporters_copied_into_containers_run_on_the_pythons_of_swe_benchs_images():
    """They run under the image's Python: SWE-bench's Django 1.x and 2.x rows have Python 3.5, its 3.x rows 3.6.
    No f-string, walrus or annotated assignment (the grammar of 3.5)."""
    import ast

    from skyrl_gym.envs.swe.runtime import REPORT_HELPERS

    assert set(REPORT_HELPERS) == {"skygym_report_channel.py", "skygym_pytest_report.py", "skygym_django_report.py",
                                   "skygym_sympy_report.py"}
    for name, source in REPORT_HELPERS.items():
        tree = ast.parse(source, filename=name, feature_version=(3, 5))
        newer = [type(node).__name__ for node in ast.walk(tree)
                 if isinstance(node, (ast.JoinedStr, ast.NamedExpr, ast.AnnAssign))]
        assert newer == [], f"{name}: {newer}"


def test_sympy_rows_are_graded_by_sympys_runner_on_the_test_patchs_files_with_bare_names():
    from skyrl_gym.envs.swe.runtime import TestOutcome, TestRun

    test_patch = ("diff --git a/sympy/core/tests/test_basic.py b/sympy/core/tests/test_basic.py\n"
                  "--- a/sympy/core/tests/test_basic.py\n+++ b/sympy/core/tests/test_basic.py\n@@ -1 +1,2 @@\n x\n+y\n"
                  "diff --git a/doc/src/x.rst b/doc/src/x.rst\n--- a/doc/src/x.rst\n+++ b/doc/src/x.rst\n@@ -1 +1,2 @@\n x\n+y\n")
    row = {**fixture_row(), "repo": "sympy/sympy", "test_patch": test_patch,
           "FAIL_TO_PASS": ["test_issue_24062"], "PASS_TO_PASS": ["test_sympify"]}
    instance = normalize_row(row)
    assert instance.test_runner == "sympy" and instance.grading_problem == ""
    assert instance.test_files == ["sympy/core/tests/test_basic.py"]
    # SymPy's runner and helpers are the harness, wherever a version keeps them
    for harness in ("sympy/testing/runtests.py", "sympy/utilities/runtests.py", "sympy/utilities/pytest.py", "bin/test"):
        assert is_protected(harness, runner="sympy"), harness
    assert not is_protected("sympy/utilities/misc.py", runner="sympy")
    # a bare name names every test so named in the files run
    run = TestRun(outcomes={
        "sympy/a/tests/test_x.py::test_same": TestOutcome("sympy/a/tests/test_x.py::test_same", "passed", alias="test_same"),
        "sympy/b/tests/test_y.py::test_same": TestOutcome("sympy/b/tests/test_y.py::test_same", "failed", alias="test_same"),
        "sympy/a/tests/test_x.py::test_once": TestOutcome("sympy/a/tests/test_x.py::test_once", "passed", alias="test_once"),
    })
    assert run.passed("test_once") and not run.passed("test_same") and not run.passed("test_missing")


class _SleepingContainer:
    """A unit-test double of a container whose every command runs until its time limit (the real engine's case is
    test_swe_docker's): it records the limits it was given, and moves the tool group's clock on by each, so what
    is left of a message is exact (real sleeps ran over on a loaded machine and took the second command's share)."""

    def __init__(self, monkeypatch) -> None:
        from skyrl_gym.tools import core

        self.limits = []
        self.clock = _Clock()
        monkeypatch.setattr(core, "time", self.clock)

    def exec(self, command, timeout_s, output_cap=None):
        self.limits.append(timeout_s)
        self.clock.now += timeout_s
        return ExecResult(-1, "", timed_out=True, duration_s=timeout_s)


class _Clock:
    """The time module, but ``monotonic()`` reads ``now``."""

    now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name):
        import time

        return getattr(time, name)


def test_the_commands_of_one_message_share_its_time_and_the_next_message_has_its_own(monkeypatch):
    from skyrl_gym.envs.swe.tools import SWEToolGroup

    container = _SleepingContainer(monkeypatch)
    tools = SWEToolGroup(container, timeout_s=1.0, message_timeout_s=1.8)
    tools.start_message()
    first, second, third = (tools.bash("sleep 100") for _ in range(3))
    assert first == "(no output)\n[the command ran past 1 s and was killed]"
    assert container.limits[0] == 1.0 and container.limits[1] == pytest.approx(0.8)  # the second got what was left
    assert "s left of this message's 1.8 s for its commands and was killed]" in second
    assert third.startswith("Not run: this message's calls used up their 1.8 s.")
    assert len(container.limits) == 2  # the third never reached the container
    assert tools.str_replace_editor("view", "/testbed").startswith("Not run: this message's calls used up")
    assert len(container.limits) == 2  # nor did the editor's
    tools.start_message()
    tools.bash("sleep 100")
    assert container.limits[2] == 1.0
    # a message's time is never under one command's limit
    assert SWEToolGroup(container, timeout_s=5, message_timeout_s=1).message_timeout_s == 5
    assert SWEToolGroup(container, timeout_s=5).message_timeout_s == 10


def test_an_engine_out_of_reach_is_said_with_where_its_address_came_from(tmp_path, monkeypatch):
    """A command's --docker-host (or env_config's docker_host) that reaches no engine: the advice named
    SKYGYM_DOCKER_HOST, which the command had not read."""
    pytest.importorskip("docker", reason="needs the docker package: pip install -e '.[docker]'")
    from skygym_sandboxes.containers import docker_client
    from skygym_sandboxes.types import SandboxUnavailable

    gone = f"unix://{tmp_path / 'no-engine.sock'}"
    monkeypatch.delenv("SKYGYM_DOCKER_HOST", raising=False)
    with pytest.raises(SandboxUnavailable, match=r"or point the address given \(--docker-host, docker_host\) at an "):
        docker_client(gone, timeout_s=5)
    monkeypatch.setenv("SKYGYM_DOCKER_HOST", gone)
    with pytest.raises(SandboxUnavailable, match="or point SKYGYM_DOCKER_HOST at an engine that runs"):
        docker_client(None, timeout_s=5)
