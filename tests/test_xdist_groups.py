"""The core session's pytest-xdist groups (tests/conftest.py): tests sharing the Docker engine or a Ray cluster run on
one worker, and a test that uses the engine outside the docker group fails, saying where to add it, on the workers
too (they are told only their controller's argv, not its --dist)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import _distributed_by_group, xdist_group


def config(dist: str, mainargv=None):
    options = {"dist": dist}
    namespace = SimpleNamespace(getoption=lambda name, default=None: options.get(name, default))
    if mainargv is not None:
        namespace.workerinput = {"mainargv": mainargv, "workerid": "gw0"}
    return namespace


@pytest.mark.parametrize("made, grouped", [
    (config("loadgroup"), True),
    (config("no", ["pytest", "tests", "-n", "3", "--dist", "loadgroup"]), True),  # a worker of the core session
    (config("no", ["pytest", "tests", "-n", "3", "--dist=loadgroup"]), True),
    (config("no", ["pytest", "tests", "-n", "2"]), False),  # py310's workers: spread test by test
    (config("no"), False),
])
def test_workers_know_their_run_is_grouped(made, grouped):
    assert _distributed_by_group(made) is grouped


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
