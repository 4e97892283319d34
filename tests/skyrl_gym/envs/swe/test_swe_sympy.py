"""SWE-bench's SymPy rows, graded under SymPy's own runner, against a real Docker engine and real SymPy.

The image is made here as SWE-bench's SymPy images are laid out: the repository (SymPy 1.12's source
distribution, which ships its tests and its runner, ``sympy/testing/runtests.py``) in ``/testbed``, installed in
place, with mpmath. A bug is committed at ``base_commit`` (``ordinal(13)`` says "13rd"); the row's tests are named
as SWE-bench's SymPy rows name them: bare ``test_x``.
"""

from __future__ import annotations

import contextlib
import re

import pytest

from skyrl_gym.envs.swe.grading import evaluate_many, evaluate_patch
from tests.swe_fixtures import swe_bench_like_row

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SYMPY = ("sympy", "sympy==1.12", "ebf595c8dac3e0fdc4152c51878b498396ec7f30e7a914d6071e674d49420fb8")
DEPENDENCIES = (("mpmath", "mpmath==1.3.0", "7a28eb2a9774d00c7bc92411c19a89209d5da7c4c9a9e227be8330a23a25b91f"),)
TEST_FILE = "sympy/utilities/tests/test_misc.py"
IMAGE_SCRIPT = r"""set -e
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site" && printf '/testbed\n/opt/project-deps\n' > "$site/testbed.pth"
cd /testbed
sed -i 's/    if 11 <= k <= 13:/    if 11 <= k <= 12:/' sympy/utilities/misc.py
grep -q '    if 11 <= k <= 12:' sympy/utilities/misc.py
git init -q && git add -A && git -c user.name=t -c user.email=t@t.invalid commit -q -m base
sed -i 's/    if 11 <= k <= 12:/    if 11 <= k <= 13:/' sympy/utilities/misc.py
git diff > /opt/gold.patch && git checkout -q -- sympy/utilities/misc.py
cat >> sympy/utilities/tests/test_misc.py <<'EOF'


def test_ordinal_teens():
    assert [ordinal(n) for n in (11, 12, 13, 113)] == ['11th', '12th', '13th', '113th']
EOF
git diff > /opt/test.patch && git checkout -q -- sympy/utilities/tests/test_misc.py
git rev-parse HEAD > /opt/base_commit
"""
FAIL_TO_PASS = ["test_ordinal", "test_ordinal_teens"]
PASS_TO_PASS = ["test_translate", "test_replace", "test_as_int"]


def make_sympy_image(client, base_image: str, name: str = "skyrl-gym-swe-test-sympy"):
    """``(image, row)``: an image made from ``base_image`` holding SymPy at a buggy ``base_commit`` in
    ``/testbed``, and its SWE-bench-shaped row."""
    return swe_bench_like_row(
        client, base_image, SYMPY, DEPENDENCIES, IMAGE_SCRIPT, name, instance_id="sympy__sympy-90001",
        repo="sympy/sympy", problem_statement="ordinal(13) returns '13rd'", FAIL_TO_PASS=FAIL_TO_PASS,
        PASS_TO_PASS=PASS_TO_PASS, version="1.12",
    )


@pytest.fixture(scope="module")
def sympy_row(swe_instances, docker_client_for_tests):
    image, row = make_sympy_image(docker_client_for_tests, swe_instances[0].image_name)
    yield row
    with contextlib.suppress(Exception):
        docker_client_for_tests.images.remove(image.id, force=True)


def test_a_sympy_row_is_graded_by_sympys_runner_with_bare_test_names(sympy_row, docker_client_for_tests):
    """The gold patch resolves, the empty one does not; a change to SymPy's runner is put back (it is the
    harness), and library code that makes every ``assert`` pass is caught by the planted tests."""
    assert sympy_row.test_runner == "sympy" and sympy_row.grading_problem == ""
    assert sympy_row.test_files == [TEST_FILE]
    runner = ("diff --git a/sympy/testing/skygym_note.py b/sympy/testing/skygym_note.py\nnew file mode 100644\n"
              "--- /dev/null\n+++ b/sympy/testing/skygym_note.py\n@@ -0,0 +1 @@\n+NOTE = 'the harness'\n")
    gold, empty = evaluate_many([sympy_row] * 2, [sympy_row.patch + runner, ""], client=docker_client_for_tests,
                                workers=2)
    assert gold.resolved, gold.error
    assert gold.fail_to_pass["success"] == FAIL_TO_PASS and gold.pass_to_pass["success"] == PASS_TO_PASS
    assert gold.restored_paths == ["sympy/testing/skygym_note.py"]
    assert not empty.resolved and empty.fail_to_pass["failure"] == FAIL_TO_PASS, empty.error
    assert empty.pass_to_pass["success"] == PASS_TO_PASS and empty.error == ""


def test_a_forgery_from_sympys_library_code_is_caught_by_the_planted_tests(sympy_row, docker_client_for_tests):
    """Library code that has the runner's reporter report every failure as a pass (spelled so that the text check
    sees nothing) passes the hidden tests without the fix; the planted tests pass too, and say so."""
    forgery = (
        "diff --git a/sympy/utilities/fastpath.py b/sympy/utilities/fastpath.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/sympy/utilities/fastpath.py\n@@ -0,0 +1,3 @@\n"
        "+import sys\n"
        "+reporter = getattr(sys.modules['sympy.te' 'sting.runtests'], 'PyTe' 'stReporter')\n"
        "+reporter.test_fail = reporter.test_pass\n"
    )
    # the buggy line stays; the module the tests import loads the forgery when ordinal() first runs
    header = re.search(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", sympy_row.patch, re.MULTILINE)
    unfixed = sympy_row.patch.replace(
        "-    if 11 <= k <= 12:\n+    if 11 <= k <= 13:\n",
        "+    __import__('sympy.utilities.fastpath')\n     if 11 <= k <= 12:\n",
    ).replace(header.group(0),
              f"@@ -{header.group(1)},{header.group(2)} +{header.group(3)},{int(header.group(4)) + 1} @@")
    report = evaluate_patch(sympy_row, forgery + unfixed, client=docker_client_for_tests)
    assert report.patch_applied and not report.resolved, report.error
    assert "tampered" in report.error and report.fail_to_pass["failure"] == FAIL_TO_PASS, report.error
    assert report.forgery_resolved_hidden_tests is True  # the hidden tests alone took it for resolved
