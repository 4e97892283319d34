"""The core session's pytest-xdist groups (tests/conftest.py): tests sharing the Docker engine or a Ray cluster run on
one worker, and a test that uses the engine outside the docker group fails, saying where to add it, on xdist's
workers too (their own ``dist`` option is "no": the check never ran there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import xdist_group
from tests.nested_pytest import run_pytest

ROOT = Path(__file__).resolve().parent.parent


def test_a_docker_test_outside_the_docker_group_fails_on_a_worker_saying_where_to_add_it(tmp_path):
    pytest.importorskip("xdist", reason="pytest-xdist is not installed: pip install -e '.[dev]'")
    (tmp_path / "test_misgrouped.py").write_text(
        "import pytest\n\n@pytest.mark.docker\ndef test_uses_the_engine():\n    pass\n\ndef test_plain():\n    pass\n")
    done = run_pytest(
        "-p", "tests.conftest", "-n", "1", "--dist", "loadgroup", "-q",
        "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestUnknownMarkWarning", "--rootdir", str(tmp_path),
        str(tmp_path / "test_misgrouped.py"),
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_uses_the_engine uses the Docker engine but is not in the docker xdist group: add its file to " \
           "_DOCKER_FILES in tests/conftest.py" in done.stdout, done.stdout
    assert "1 passed, 1 error" in done.stdout, done.stdout


@pytest.mark.parametrize("nodeid, group", [
    ("tests/sandboxes/test_docker_container_close.py::test_x", "docker"),
    ("tests/adapters/agents/test_swe_task.py::test_x", "docker"),
    ("tests/sandboxes/test_local.py::test_x[docker-warm]", "docker"),
    ("tests/sandboxes/test_local.py::test_x[bwrap]", None),
    ("tests/skygym_train/test_quickstart.py::test_x", "quickstart"),
    ("tests/skygym_train/test_resume.py::test_x", "ray"),
    ("tests/skyrl_gym/test_core.py::test_x", None),
])
def test_tests_go_to_their_group(nodeid, group):
    assert xdist_group(nodeid) == group
