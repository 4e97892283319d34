"""A real Docker engine (started by the test setup, see tests/sandboxes/docker_support.py) and SWE
instances built by the real `skyrl-gym swe build` command, once per session.

A plugin of the root conftest (``pytest_plugins``), not a folder's conftest: the env's tests and the agent layer's
SWE task tests share one definition, so the engine starts and the instances are built once per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

BUILD_PROJECTS = "toolz,six,inflection"
BUILD_LIMIT = 5


def swe_cli(*args: str, timeout: float = 1200, **kwargs) -> subprocess.CompletedProcess:
    """`skyrl-gym swe ...` in a process of its own, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "swe", *args, "--no-progress"],
        capture_output=True, text=True, timeout=timeout, **kwargs,
    )


@pytest.fixture(scope="session")
def swe_docker() -> Iterator[str]:
    from tests.sandboxes.docker_support import start_engine

    engine = start_engine()
    previous = os.environ.get("SKYGYM_DOCKER_HOST")
    os.environ["SKYGYM_DOCKER_HOST"] = engine.base_url
    yield engine.base_url
    if previous is None:
        os.environ.pop("SKYGYM_DOCKER_HOST", None)
    else:
        os.environ["SKYGYM_DOCKER_HOST"] = previous
    engine.stop()


@pytest.fixture(scope="session")
def swe_built(swe_docker, tmp_path_factory) -> Path:
    """The output folder of `skyrl-gym swe build --limit 5` over three projects."""
    out = tmp_path_factory.mktemp("swe-build")
    done = swe_cli("build", "--out", str(out), "--limit", str(BUILD_LIMIT), "--projects", BUILD_PROJECTS)
    (out / "build.log").write_text(done.stdout + done.stderr)  # for a test that finds the build short
    if done.returncode != 0 and "could not download" in done.stdout + done.stderr:
        pytest.skip("the projects' source distributions could not be downloaded with pip (no package index here)")
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="session")
def swe_instances(swe_built):
    from skyrl_gym.envs.swe.instances import load_instances

    return load_instances(swe_built / "instances.jsonl")


@pytest.fixture(scope="session")
def docker_client_for_tests(swe_docker):
    from skygym_sandboxes.containers import docker_client

    return docker_client(swe_docker)
