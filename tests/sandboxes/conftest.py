"""Backends under test. Each fixture starts a real sandbox once per session, or skips with the
reason the machine cannot run it (printed with ``pytest -ra``)."""

from __future__ import annotations

import os
import shutil
from typing import Iterator

import pytest

from tests.sandboxes.support import TEST_LIMITS


LOCAL_BACKENDS = ["local-bwrap-warm", "local-bwrap-cold", "local-unshare-warm"]


def _make_local(kind: str):
    from skygym_sandboxes.local import LocalSandbox

    _, isolation, mode = kind.split("-")
    if isolation == "bwrap" and not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    if isolation == "unshare" and (os.geteuid() != 0 or not shutil.which("unshare")):
        pytest.skip("the unshare fallback needs root and util-linux unshare")
    box = LocalSandbox(limits=TEST_LIMITS, isolation=isolation, warm=(mode == "warm"), pool_size=2)
    if not box.wait_ready(60):
        box.close()
        pytest.skip(f"{kind}: the sandbox workers did not start on this machine")
    return box


@pytest.fixture(scope="session", params=LOCAL_BACKENDS)
def local_sandbox(request) -> Iterator:
    box = _make_local(request.param)
    yield box
    box.close()


ALL_BACKENDS = LOCAL_BACKENDS + ["docker-warm", "remote"]


@pytest.fixture(scope="session")
def docker_engine():
    """A running Docker engine with the sandbox image; started (and stopped) by the tests if needed."""
    from tests.sandboxes.docker_support import start_engine

    engine = start_engine()
    yield engine
    engine.stop()


def _make(kind: str, request):
    if kind.startswith("local-"):
        return _make_local(kind)
    if kind == "docker-warm":
        from tests.sandboxes.docker_support import make_docker_sandbox

        return make_docker_sandbox(request.getfixturevalue("docker_engine"), TEST_LIMITS)
    if kind == "remote":
        from tests.sandboxes.remote_support import make_remote_sandbox

        return make_remote_sandbox(TEST_LIMITS)
    raise ValueError(kind)


@pytest.fixture(scope="session", params=ALL_BACKENDS)
def sandbox(request) -> Iterator:
    """Every backend this machine can run, one session-wide instance each."""
    box = _make(request.param, request)
    yield box
    box.close()
