"""A real Docker engine (started by the test setup, see tests/sandboxes/docker_support.py) and SWE
instances built by the real `skyrl-gym swe build` command, once per session.

A plugin of the root conftest (``pytest_plugins``), not a folder's conftest: the env's tests and the agent layer's
SWE task tests share one definition, so the engine starts and the instances are built once per session."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import pytest

BUILD_PROJECTS = "toolz,six,inflection"
BUILD_LIMIT = 5
REPO = Path(__file__).resolve().parents[1]
# What the build depends on: every file of the SWE env (its templates and project sources too), this fixture, and
# the Python the build command runs, followed from its module through the modules it imports by name (the sandboxes
# package's container and image code, not its service, local sandboxes or command line: an edit to any file of
# the package rebuilt for two minutes in the next CI). A change to any of them builds again.
BUILT_FROM = ("skyrl_gym/envs/swe", "tests/swe_fixtures.py")
BUILT_BY = ("skyrl_gym.cli.swe_cmd",)


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


def built_from() -> List[Path]:
    """The files :func:`build_key` hashes: ``BUILT_FROM``'s, and the modules ``BUILT_BY`` imports, followed (the
    reward fingerprint's import walk, into the env contract's plumbing too)."""
    from skyrl_gym.fingerprint import module_files

    files = {path for root in BUILT_FROM
             for path in ((REPO / root).rglob("*") if (REPO / root).is_dir() else [REPO / root])
             if path.is_file() and "__pycache__" not in path.parts}
    files |= set(module_files(BUILT_BY, skip=())[0].values())
    return sorted(files)


def build_key() -> str:
    """What the build's output depends on: the code that makes it (:func:`built_from`), the Python and what the
    fixture asks for. The projects are pinned (synth/projects.py) and their images are tagged with a hash of
    their content."""
    digest = hashlib.sha256(f"{BUILD_PROJECTS} {BUILD_LIMIT} {sys.version_info[:2]}".encode())
    for path in built_from():
        name = path.relative_to(REPO) if REPO in path.parents else path
        digest.update(str(name).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


@pytest.fixture(scope="session")
def swe_built(swe_docker, tmp_path_factory) -> Path:
    """The output folder of `skyrl-gym swe build --limit 5` over three projects.

    The build takes minutes, so a successful one is kept (under the project's cache folder, by
    :func:`build_key`) and a later session whose code it depends on is unchanged, and whose engine still has the
    images the instances name, reads it instead of building again. ``SKYRL_GYM_TESTS_FRESH_SWE_BUILD=1`` builds
    again regardless."""
    from skygym_sandboxes.images.build_image import cache_dir

    out = tmp_path_factory.mktemp("swe-build")
    kept = cache_dir() / "swe" / "test-builds" / build_key()
    if (kept / "instances.jsonl").is_file() and not os.environ.get("SKYRL_GYM_TESTS_FRESH_SWE_BUILD"):
        shutil.copytree(kept, out, dirs_exist_ok=True)
        if _images_present(swe_docker, out / "instances.jsonl"):
            return out
        shutil.rmtree(out)
        out.mkdir()
    done = swe_cli("build", "--out", str(out), "--limit", str(BUILD_LIMIT), "--projects", BUILD_PROJECTS)
    (out / "build.log").write_text(done.stdout + done.stderr)  # for a test that finds the build short
    if done.returncode != 0 and "could not download" in done.stdout + done.stderr:
        pytest.skip("the projects' source distributions could not be downloaded with pip (no package index here)")
    assert done.returncode == 0, done.stdout + done.stderr
    staging = kept.with_name(f"{kept.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(out, staging)
    shutil.rmtree(kept, ignore_errors=True)
    staging.rename(kept)  # whole or not at all: a session killed while copying leaves no half build to read
    return out


def _images_present(docker_host: str, instances: Path) -> bool:
    from skygym_sandboxes.containers import docker_client
    from skygym_sandboxes.images.build_image import image_exists

    from skyrl_gym.envs.swe.instances import load_instances

    client = docker_client(docker_host)
    return all(image_exists(client, image) for image in {i.image_name for i in load_instances(instances)})


@pytest.fixture(scope="session")
def swe_instances(swe_built):
    from skyrl_gym.envs.swe.instances import load_instances

    return load_instances(swe_built / "instances.jsonl")


@pytest.fixture(scope="session")
def docker_client_for_tests(swe_docker):
    from skygym_sandboxes.containers import docker_client

    return docker_client(swe_docker)


# ----- images of real projects laid out as SWE-bench's are (its Django and SymPy rows) -------------------------
def sdist_files(name: str, requirement: str, sha256: str) -> Dict[str, bytes]:
    """The files of a pinned source distribution with that SHA-256 (fetched with pip once, cached with the SWE
    build's sources)."""
    from skyrl_gym.envs.swe.synth.builder import fetch_sdist, read_sdist
    from skyrl_gym.envs.swe.synth.projects import Project

    return read_sdist(fetch_sdist(Project(name, requirement, "", (), (), sha256=sha256)))


def project_image(client, base_image: str, files: Dict[str, bytes], script: str, outputs: Sequence[str],
                  name: str):
    """``(image, {output: text})``: an image made from ``base_image`` (git and Python 3) with ``files`` (paths from
    ``/``) put in and ``script`` run (no network); each file of ``outputs`` under /opt is read, then removed from the
    image."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    holder = client.containers.run(base_image, "sleep 600", detach=True, network_mode="none")
    try:
        assert holder.exec_run(["rm", "-rf", "/testbed"]).exit_code == 0
        assert holder.put_archive("/", buffer.getvalue())
        made = holder.exec_run(["bash", "-c", script])
        assert made.exit_code == 0, made.output.decode()[-2000:]
        read = {output: holder.exec_run(["cat", f"/opt/{output}"]).output.decode() for output in outputs}
        assert holder.exec_run(["rm", "-f", *(f"/opt/{output}" for output in outputs)]).exit_code == 0
        image = holder.commit(repository=name, tag="latest")
    finally:
        holder.remove(force=True)
    return image, read


def swe_bench_like_row(client, base_image: str, project: Tuple[str, str, str],
                       dependencies: Sequence[Tuple[str, str, str]], script: str, name: str, **row: Any):
    """``(image, row)``: an image laid out as SWE-bench's (the project's source distribution in ``/testbed``, its
    dependencies' packages in ``/opt/project-deps``) made by ``script``, which leaves the gold patch, the test patch
    and the base commit in ``/opt/gold.patch``, ``/opt/test.patch`` and ``/opt/base_commit``; and its row (the other
    fields from ``row``). ``project`` and each dependency are ``(name, pinned requirement, sha256)``."""
    from skyrl_gym.envs.swe.instances import SWEInstance

    files = {f"testbed/{path}": data for path, data in sdist_files(*project).items()}
    for package, requirement, sha256 in dependencies:
        files.update({f"opt/project-deps/{path}": data for path, data in sdist_files(package, requirement, sha256).items()
                      if path.startswith(f"{package}/")})
    image, read = project_image(client, base_image, files, script, ("gold.patch", "test.patch", "base_commit"), name)
    instance = SWEInstance(base_commit=read["base_commit"].strip(), patch=read["gold.patch"],
                           test_patch=read["test.patch"], image_name=f"{name}:latest", **row)
    return image, instance
