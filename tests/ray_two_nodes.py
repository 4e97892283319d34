"""A real two-node Ray cluster on this machine, for the tests that place work on a second node.

Two ``ray start --block`` processes (a head and a second node carrying a custom resource ``node2``), each in a
process group and a temp dir of its own, and a driver that joins with ``ray.init(address=...)``. They are ended by
signalling those processes (``ray stop`` would end every Ray instance on the machine, other users' included).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Sequence

import pytest

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
START_TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-1500:]
    except OSError:
        return ""


def _stop(procs: List[subprocess.Popen], temp_dir: str) -> None:
    """End the nodes started here: SIGTERM to each ``ray start --block`` (it ends its node's processes), then
    SIGKILL to whatever is left of them, found by their own process group or by this cluster's temp dir."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in reversed(procs):
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        import psutil
    except ImportError:
        return
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if temp_dir in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid():
                p.kill()
        except (psutil.Error, TypeError):
            pass


def _ray_env() -> Dict[str, str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    return env


def _ray_start(log_path: Path, node_ip: str, *args: str, hide: Sequence[str] = ()) -> subprocess.Popen:
    """``ray start <args> --block`` for one CPU-only node announcing ``node_ip``, in a process group of its own
    (so :func:`_stop` can end all of it), its output in ``log_path``. ``hide``: folders the node sees empty (an
    empty tmpfs over each, in a mount namespace of the node's own: ``unshare``, as root), as a node of another
    machine would not see this one's files."""
    common = ["--num-gpus=0", "--object-store-memory=100000000", "--block", "--disable-usage-stats",
              f"--node-ip-address={node_ip}"]
    command = [str(RAY), "start", *args, *common]
    if hide:
        mounts = " && ".join(f"mount -t tmpfs tmpfs {shlex.quote(folder)}" for folder in hide)
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$@"', "sh",
                   *command]
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_ray_env(), start_new_session=True)


@contextlib.contextmanager
def two_node_ray_cluster(head_cpus: int = 1, node2_cpus: int = 1, node_ip: str = "127.0.0.1"
                         ) -> Iterator[Dict[str, str]]:
    """Start the two nodes, join them from this process, and yield ``{"head": node id, "node2": node id}``; skips
    the test (with the node's log) when a node does not come up within ``START_TIMEOUT_S``. ``node_ip``: the
    address both nodes announce (e.g. this machine's own, so that traffic between them leaves the loopback)."""
    import ray

    if not RAY.exists():
        pytest.skip(f"the `ray` command is not beside {sys.executable}: pip install -e '.[train]'")
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    port = _free_port()
    procs: List[subprocess.Popen] = []
    logs = [Path(temp_dir) / "head.log", Path(temp_dir) / "node2.log"]
    address = f"{node_ip}:{port}"
    try:
        procs.append(_ray_start(logs[0], node_ip, "--head", f"--port={port}", "--include-dashboard=false",
                                f"--temp-dir={temp_dir}/head", f"--num-cpus={head_cpus}"))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _port_open(node_ip, port):
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.skip(
                    f"`ray start --head` did not come up within {START_TIMEOUT_S} s on this machine "
                    f"(exit {procs[0].poll()}): {_tail(logs[0])}"
                )
            time.sleep(0.5)
        procs.append(_ray_start(logs[1], node_ip, f"--address={address}", '--resources={"node2": 1}',
                                f"--temp-dir={temp_dir}/node2", f"--num-cpus={node2_cpus}"))
        if ray.is_initialized():
            ray.shutdown()
        os.environ["RAY_AUTH_MODE"] = "disabled"
        ray.init(
            address=address,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}},
        )
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            if procs[1].poll() is not None or time.monotonic() > deadline:
                pytest.skip(
                    f"the second `ray start` did not join the head within {START_TIMEOUT_S} s "
                    f"(exit {procs[1].poll()}): {_tail(logs[1])}"
                )
            time.sleep(0.5)
        yield {("node2" if "node2" in n["Resources"] else "head"): n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(procs, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


@contextlib.contextmanager
def second_ray_node(num_cpus: int = 1, hide: Sequence[str] = ()) -> Iterator[Dict[str, str]]:
    """Join one more node (``ray start --address``, custom resource ``node2``) to the Ray this process is connected
    to, announcing the head's own address; yield ``{"head": node id, "node2": node id}`` and end the node after.
    ``hide``: folders the second node sees empty (:func:`_ray_start`; skips where they cannot be hidden).

    Cheaper than :func:`two_node_ray_cluster` where a local Ray is already up (the session's): nothing is shut down
    or started again but the second node. Skips when the node does not join within ``START_TIMEOUT_S``.
    """
    import ray

    if not RAY.exists():
        pytest.skip(f"the `ray` command is not beside {sys.executable}: pip install -e '.[train]'")
    head = [n for n in ray.nodes() if n["Alive"]]
    if len(head) != 1:
        pytest.skip(f"second_ray_node expects a one-node Ray, this one has {len(head)} nodes")
    address = ray.get_runtime_context().gcs_address
    temp_dir = tempfile.mkdtemp(prefix="rn", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    log_path = Path(temp_dir) / "node2.log"
    procs: List[subprocess.Popen] = []
    if hide and (os.geteuid() != 0 or shutil.which("unshare") is None):
        pytest.skip("hiding folders from the second Ray node takes root and util-linux's unshare (a mount namespace "
                    "of the node's own); run the tests as root")
    try:
        procs.append(_ray_start(log_path, head[0]["NodeManagerAddress"], f"--address={address}",
                                '--resources={"node2": 1}', f"--temp-dir={temp_dir}/node2", f"--num-cpus={num_cpus}",
                                hide=hide))
        deadline = time.monotonic() + START_TIMEOUT_S
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.skip(
                    f"`ray start --address={address}` did not join within {START_TIMEOUT_S} s "
                    f"(exit {procs[0].poll()}): {_tail(log_path)}"
                )
            time.sleep(0.5)
        yield {("node2" if "node2" in n["Resources"] else "head"): n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        _stop(procs, temp_dir)
        deadline = time.monotonic() + START_TIMEOUT_S
        while len([n for n in ray.nodes() if n["Alive"]]) > 1 and time.monotonic() < deadline:
            time.sleep(0.5)  # later users of this Ray see one node again
        shutil.rmtree(temp_dir, ignore_errors=True)
