"""SWE-bench's Django rows, graded under Django's own runner, against a real Docker engine and real Django.

The image is made here as SWE-bench's Django images are laid out: the repository (Django 4.2's source
distribution, which ships its test suite and ``tests/runtests.py``) in ``/testbed``, installed in place, with its
dependencies (and git's gc lock, as an image committed while git's automatic gc ran keeps it: set-up once
failed on it). A bug is committed at ``base_commit``; the row's tests are named as SWE-bench's Django rows name
them: ``test_x (app.module.Class)``, the same with the method repeated (Python 3.11's form), and a docstring's
first line.
"""

from __future__ import annotations

import contextlib
import re

import pytest

from skyrl_gym.envs.swe.grading import evaluate_many, evaluate_patch
from tests.swe_fixtures import sdist_files, swe_bench_like_row

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# The source distributions the image is made of, with their SHA-256 (fetched with pip once, cached with the SWE
# build's sources).
DJANGO = ("django", "django==4.2.16", "6f1616c2786c408ce86ab7e10f792b8f15742f7b7b7460243929cb371e7f1dad")
DEPENDENCIES = (("asgiref", "asgiref==3.8.1", "c343bd80a0bec947a9860adb4c432ffa7db769836c64238fc34bdc3fec84d590"),
                ("sqlparse", "sqlparse==0.5.1", "bb6b4df465655ef332548e24f08e205afc81b9ab86cb1c45657a7ff173a3a00e"))
TEST_FILE = "tests/utils_tests/test_text.py"
IMAGE_SCRIPT = r"""set -e
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site" && printf '/testbed\n/opt/project-deps\n' > "$site/testbed.pth"
cd /testbed
sed -i 's/    return x\[0\].upper() + x\[1:\]/    return x[0] + x[1:]/' django/utils/text.py
grep -q '    return x\[0\] + x\[1:\]' django/utils/text.py
git init -q && git add -A && git -c user.name=t -c user.email=t@t.invalid commit -q -m base
sed -i 's/    return x\[0\] + x\[1:\]/    return x[0].upper() + x[1:]/' django/utils/text.py
git diff > /opt/gold.patch && git checkout -q -- django/utils/text.py
cat >> tests/utils_tests/test_text.py <<'EOF'

    def test_capfirst(self):
        self.assertEqual(text.capfirst("hello world"), "Hello world")

    def test_capfirst_empty(self):
        \"\"\"capfirst() leaves an empty string as it is.\"\"\"
        self.assertEqual(text.capfirst(""), "")
EOF
git diff > /opt/test.patch && git checkout -q -- tests/utils_tests/test_text.py
git rev-parse HEAD > /opt/base_commit
printf '56 skygym-image-builder' > .git/gc.pid  # git's lock, as an image built during an automatic gc keeps it
""".replace('\\"', '"')
FAIL_TO_PASS = ["test_capfirst (utils_tests.test_text.TestUtilsText)"]
PASS_TO_PASS = [
    "capfirst() leaves an empty string as it is.",  # a test with a docstring, named by its first line
    "test_wrap (utils_tests.test_text.TestUtilsText.test_wrap)",  # Python 3.11's form
    "test_slugify (utils_tests.test_text.TestUtilsText)",
]


def make_django_image(client, base_image: str, name: str = "skyrl-gym-swe-test-django"):
    """``(image, row)``: an image made from ``base_image`` (one with git and Python 3) holding Django at a buggy
    ``base_commit`` in ``/testbed``, and its SWE-bench-shaped row (``bench/swe_tasks.py`` can time it too)."""
    return swe_bench_like_row(
        client, base_image, DJANGO, DEPENDENCIES, IMAGE_SCRIPT, name, instance_id="django__django-90001",
        repo="django/django", problem_statement="capfirst() no longer capitalizes the first letter",
        FAIL_TO_PASS=FAIL_TO_PASS, PASS_TO_PASS=PASS_TO_PASS, version="4.2",
    )


@pytest.fixture(scope="module")
def django_row(swe_instances, docker_client_for_tests):
    """A SWE-bench-shaped row of ``django/django`` and its image (removed afterwards)."""
    image, row = make_django_image(docker_client_for_tests, swe_instances[0].image_name)
    yield row
    with contextlib.suppress(Exception):
        docker_client_for_tests.images.remove(image.id, force=True)


def test_a_django_row_is_graded_by_djangos_runner_with_swe_benchs_test_names(django_row, docker_client_for_tests):
    """The gold patch resolves (every id form read), the empty one does not. With the gold patch, a new module of
    ``django/test/`` (a package Django ships, which fixes change) is library code, left in place; one under
    ``tests/`` (the suite) is put back, so the hidden tests run as they were written."""
    assert django_row.test_runner == "django" and django_row.grading_problem == ""
    assert django_row.test_files == [TEST_FILE]
    library = ("diff --git a/django/test/skygym_note.py b/django/test/skygym_note.py\nnew file mode 100644\n"
               "--- /dev/null\n+++ b/django/test/skygym_note.py\n@@ -0,0 +1 @@\n+NOTE = 'library code'\n")
    suite = ("diff --git a/tests/utils_tests/skygym_note.py b/tests/utils_tests/skygym_note.py\nnew file mode 100644\n"
             "--- /dev/null\n+++ b/tests/utils_tests/skygym_note.py\n@@ -0,0 +1 @@\n+NOTE = 'a test file'\n")
    gold, empty = evaluate_many([django_row] * 2, [django_row.patch + library + suite, ""],
                                client=docker_client_for_tests, workers=2)
    assert gold.resolved, gold.error
    assert gold.fail_to_pass["success"] == FAIL_TO_PASS and gold.pass_to_pass["success"] == PASS_TO_PASS
    assert gold.restored_paths == ["tests/utils_tests/skygym_note.py"]
    assert not empty.resolved and empty.fail_to_pass["failure"] == FAIL_TO_PASS, empty.error
    assert empty.pass_to_pass["success"] == PASS_TO_PASS and empty.error == ""


def test_a_forgery_from_djangos_library_code_is_caught_by_the_planted_tests(django_row, docker_client_for_tests):
    """Library code that makes every ``assertEqual`` pass (it names nothing the text check knows) passes the
    hidden test without the fix; the planted tests (methods of the hidden test's class, one a mutant of it) pass
    too, and say so."""
    forged_lines = ("+    return x[0] + x[1:]\n+import unittest\n"
                    "+unittest.TestCase.assertEqual = lambda self, first, second, msg=None: None\n")
    header = re.search(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", django_row.patch, re.MULTILINE)
    forgery = django_row.patch.replace("+    return x[0].upper() + x[1:]\n", forged_lines).replace(
        header.group(0), f"@@ -{header.group(1)},{header.group(2)} +{header.group(3)},{int(header.group(4)) + 2} @@")
    report = evaluate_patch(django_row, forgery, client=docker_client_for_tests)
    assert report.patch_applied and not report.resolved, report.error
    assert "tampered" in report.error and report.fail_to_pass["failure"] == FAIL_TO_PASS, report.error
    assert report.forgery_resolved_hidden_tests is True  # the hidden tests alone took it for resolved


# An attacker's pass against the first version of this runner: three result classes that Django's runner was made to
# use (django/test/runner.py is library code), each of which resolved the row with the bug in place.
RUNNER = "django/test/runner.py"
GET_RESULTCLASS = "        elif self.pdb:\n            return PDBDebugResult\n"
STAND_INS = '''
class _StandIn:
    def __init__(self, named):
        self._testMethodDoc = named


class _StandInResult(unittest.TextTestResult):
    def _stand_in(self, test):
        name, cls = getattr(test, "_testMethodName", ""), type(test)
        named = ["%s (%s.%s)" % (name, cls.__module__, cls.__qualname__), (test._testMethodDoc or "").strip()]
        for one in named:
            unittest.TestResult.addSuccess(self, _StandIn(one))

    def addFailure(self, test, err):
        self._stand_in(test)

    def addError(self, test, err):
        self._stand_in(test)
'''
HELD_FAILURES = '''
class _HeldResult(unittest.TextTestResult):
    def startTestRun(self):
        self._held, self._passes = [], 0
        super().startTestRun()

    def addSuccess(self, test):
        self._passes += 1
        super().addSuccess(test)

    def addFailure(self, test, err):
        self._held.append(test)

    def addError(self, test, err):
        self._held.append(test)

    def stopTestRun(self):
        if self._held and not self._passes:
            os._exit(1)
        for test in self._held:
            unittest.TestResult.addSuccess(self, test)
        super().stopTestRun()
'''
BY_THE_LABELS = '''
class _LabelResult(unittest.TextTestResult):
    def addFailure(self, test, err):
        planted_run = any(label.count(".") >= 3 for label in sys.argv[1:] if not label.startswith("-"))
        return super().addFailure(test, err) if planted_run else super().addSuccess(test)
'''


def test_result_classes_that_swallow_hold_or_pick_their_run_do_not_resolve(django_row, docker_client_for_tests):
    """1. Failures swallowed and passes reported for stand-ins named like the failing tests (the hidden run fell back
    to docstring names; nothing of the planted run was reported, which passed as "its file was not collected").
    2. Failures held back, and the run stopped before its report whenever nothing had passed (the planted run:
    "no report proves nothing"). 3. Failures passed only in a run whose labels named methods (the planted run's
    did; both runs now name the same modules). Stand-ins are not reported, a planted test not reported or a planted
    run without its report counts every test failed, and no run's command line differs."""
    import difflib

    old = sdist_files(*DJANGO)[RUNNER].decode("utf-8")
    assert GET_RESULTCLASS in old
    patches = []
    for source, name in ((STAND_INS, "_StandInResult"), (HELD_FAILURES, "_HeldResult"), (BY_THE_LABELS, "_LabelResult")):
        new = old.replace(GET_RESULTCLASS, GET_RESULTCLASS + f"        return {name}\n").rstrip("\n") + "\n\n" + source
        patches.append(f"diff --git a/{RUNNER} b/{RUNNER}\n" + "".join(difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{RUNNER}", f"b/{RUNNER}")))
    reports = evaluate_many([django_row] * 3, patches, client=docker_client_for_tests, workers=2)
    for report in reports:
        assert report.patch_applied and not report.resolved, report
        assert report.fail_to_pass["failure"] == FAIL_TO_PASS, report.error
    assert "not reported" in reports[0].error and "gave no verdict" in reports[1].error
    assert "tampered" in reports[2].error
