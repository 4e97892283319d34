"""A real Docker engine for the docker backend's tests.

The tests start their own ``dockerd`` on a private socket, data root and exec root (no bridge, no
iptables: sandbox containers have no network anyway), so they neither need nor disturb an engine
someone else runs. Set ``SANDBOX_DOCKER_HOST`` to use an existing engine instead. The image is
built once by ``skygym_sandboxes.images.build_image`` (debootstrap + docker import) and cached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

PRIVATE_ROOT = Path("/run/skyrl-sandbox-docker")
PRIVATE_SOCKET = f"unix://{PRIVATE_ROOT}/docker.sock"
DATA_ROOT = Path(os.environ.get("SANDBOX_DOCKER_DATA_ROOT", "/var/lib/skyrl-sandbox-docker"))


@dataclass
class DockerEngine:
    base_url: str
    image: str
    process: Optional[subprocess.Popen] = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # dockerd stops its containerd and cleans its exec root
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _ping(base_url: str) -> bool:
    import docker

    try:
        docker.DockerClient(base_url=base_url, timeout=5).ping()
        return True
    except Exception:
        return False


def start_engine() -> DockerEngine:
    pytest.importorskip("docker", reason="the docker Python package is not installed (extra: docker)")
    import docker

    from skygym_sandboxes.images.build_image import build_image

    process = None
    base_url = os.environ.get("SANDBOX_DOCKER_HOST")
    if not base_url:
        if shutil.which("dockerd") is None:
            pytest.skip("dockerd is not installed (apt-get install docker.io)")
        if os.geteuid() != 0:
            pytest.skip("starting a Docker engine for the tests needs root")
        base_url = PRIVATE_SOCKET
        if not _ping(base_url):
            PRIVATE_ROOT.mkdir(parents=True, exist_ok=True)
            log = open(PRIVATE_ROOT.parent / "skyrl-sandbox-dockerd.log", "ab")
            process = subprocess.Popen(
                [
                    "dockerd",
                    "--host",
                    base_url,
                    "--data-root",
                    str(DATA_ROOT),
                    "--exec-root",
                    str(PRIVATE_ROOT / "exec"),
                    "--pidfile",
                    str(PRIVATE_ROOT / "dockerd.pid"),
                    "--bridge",
                    "none",
                    "--iptables=false",
                    "--ip6tables=false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            deadline = time.monotonic() + 90
            while not _ping(base_url):
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    pytest.skip(f"dockerd did not start (see {log.name})")
                time.sleep(0.5)
    client = docker.DockerClient(base_url=base_url, timeout=120)
    engine = DockerEngine(base_url=base_url, image="", process=process)
    try:
        engine.image = build_image(client=client)
    except Exception as exc:
        engine.stop()
        pytest.skip(f"could not build the sandbox image: {exc}")
    return engine


def make_docker_sandbox(engine: DockerEngine, limits, **options):
    from skygym_sandboxes.docker_backend import DockerSandbox

    box = DockerSandbox(limits=limits, base_url=engine.base_url, image=engine.image, **options)
    if not box.wait_ready(120):
        box.close()
        pytest.fail("docker sandbox workers did not start")
    return box
