"""The docker backend against a real Docker engine (started by the tests when needed)."""

from __future__ import annotations

import pytest

from skygym_sandboxes import Limits, Status
from skygym_sandboxes.docker_backend import LABEL, OWNER_LABEL, DockerSandbox, remove_orphaned_containers
from tests.sandboxes.docker_support import make_docker_sandbox

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def client(docker_engine):
    import docker

    return docker.DockerClient(base_url=docker_engine.base_url)


def test_containers_are_locked_down_and_removed_on_close(docker_engine, client):
    box = make_docker_sandbox(docker_engine, Limits(wall_s=5, memory_mb=256, processes=32), pool_size=1)
    try:
        assert box.run("print('hi')").stdout == "hi\n"
        (container,) = box.containers()
        config = client.api.inspect_container(container.id)
        host = config["HostConfig"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
        assert host["Memory"] == (256 + 128) * 2**20 and host["PidsLimit"] == 32 + 16
        assert set(host["Tmpfs"]) == {"/sandbox", "/tmp"}
        assert config["Config"]["Labels"][LABEL] == "1"
    finally:
        box.close()
    assert box.containers() == []
    assert client.containers.list(all=True, filters={"label": f"{LABEL}.session={box._session}"}) == []


def test_a_cold_sandbox_uses_one_container_per_run(docker_engine, client):
    box = make_docker_sandbox(docker_engine, Limits(wall_s=5), warm=False)
    try:
        result = box.run("import socket\nprint(socket.gethostname() != '')")
        assert result.status == Status.OK and result.stdout == "True\n", result
        assert box.containers() == []  # removed right after the run
    finally:
        box.close()


def test_containers_of_a_dead_owner_are_removed_on_start(docker_engine, client):
    from skygym_sandboxes.images.build_image import DEFAULT_TAG

    orphan = client.containers.run(
        DEFAULT_TAG,
        ["sleep", "infinity"],
        detach=True,
        network_mode="none",
        labels={LABEL: "1", OWNER_LABEL: "some-host-that-died:1"},
    )
    import socket

    ours = client.containers.run(
        DEFAULT_TAG,
        ["sleep", "infinity"],
        detach=True,
        network_mode="none",
        labels={LABEL: "1", OWNER_LABEL: f"{socket.gethostname()}:999999999"},
    )
    try:
        removed = remove_orphaned_containers(client)
        assert ours.name in removed  # its owner process (on this host) does not exist
        assert orphan.name not in removed  # another host's: its owner may be alive
        assert client.containers.list(all=True, filters={"id": ours.id}) == []
        orphan.stop(timeout=0)
        assert orphan.name in remove_orphaned_containers(client)  # stopped: nobody can be using it
    finally:
        for container in (orphan, ours):
            try:
                container.remove(force=True)
            except Exception:
                pass


def test_missing_image_is_a_clear_error(docker_engine):
    from skygym_sandboxes.types import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="skygym-sandboxes build-image"):
        DockerSandbox(base_url=docker_engine.base_url, image="no-such-image:latest")


def test_numpy_and_sympy_are_importable_in_the_image(docker_engine):
    box = make_docker_sandbox(docker_engine, Limits(wall_s=20, cpu_s=20, memory_mb=1024), pool_size=1)
    try:
        result = box.run(
            "import numpy, sympy\nx = sympy.Symbol('x')\n"
            "print(int(numpy.arange(5).sum()), sympy.factor(x**2 - 1))"
        )
    finally:
        box.close()
    assert result.status == Status.OK and result.stdout == "10 (x - 1)*(x + 1)\n", result


def test_a_process_that_ends_without_closing_its_sandbox_leaves_no_container(docker_engine, client):
    """Only close() removed a sandbox's containers: a script that ended without it left `sleep infinity`
    containers running until another sandbox started on that engine (a resource audit)."""
    import subprocess
    import sys

    script = (f"from skygym_sandboxes.docker_backend import DockerSandbox; from skygym_sandboxes import Limits; "
              f"box = DockerSandbox(limits=Limits(wall_s=5), base_url={docker_engine.base_url!r}, "
              f"image={docker_engine.image or None!r}, pool_size=1); "
              f"print(box._session, box.run('print(1)').stdout.strip(), flush=True)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    session, printed = done.stdout.split()
    assert printed == "1"
    assert client.containers.list(all=True, filters={"label": f"{LABEL}.session={session}"}) == []
