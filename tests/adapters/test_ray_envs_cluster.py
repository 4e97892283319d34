"""Env work spread over a real two-node Ray cluster on this machine: two ``ray start`` processes (a head and a
second node, one CPU each), a driver that joins with ``ray.init(address=...)``, env workers placed with
``scheduling_strategy="SPREAD"`` and with a custom resource, episodes on both nodes with the same rewards as local.

The nodes are started with ``--block`` in process groups of their own and a temp dir of their own, and ended by
signalling those processes (``ray stop`` would end every Ray instance on the machine, other users' included).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

ray = pytest.importorskip("ray", reason="Ray env workers need ray: pip install -e '.[train]'")

from skygym_adapters.ray_envs import EnvWorkerPool, RayEnvCaller  # noqa: E402

from skyrl_gym.episode import ScriptedPolicy, make_env_factory, run_episode  # noqa: E402
from tests.adapters.ray_envs_support import CASES  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = "tests.adapters.ray_envs_support"
RAY = Path(sys.executable).with_name("ray")
START_TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-1500:]
    except OSError:
        return ""


def _stop(procs: List[subprocess.Popen], temp_dir: str) -> None:
    """End the nodes this test started: SIGTERM to each ``ray start --block`` (it ends its node's processes), then
    SIGKILL to whatever is left of them, found by their own process group or by this test's temp dir."""
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


@pytest.fixture(scope="module")
def two_node_cluster():
    if not RAY.exists():
        pytest.skip(f"the `ray` command is not beside {sys.executable}: pip install -e '.[train]'")
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    common = [
        "--num-cpus=1",
        "--num-gpus=0",
        "--object-store-memory=100000000",
        "--block",
        "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
    ]
    procs: List[subprocess.Popen] = []
    logs = [Path(temp_dir) / "head.log", Path(temp_dir) / "node2.log"]
    address = f"127.0.0.1:{port}"
    try:
        with open(logs[0], "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(RAY),
                        "start",
                        "--head",
                        f"--port={port}",
                        "--include-dashboard=false",
                        f"--temp-dir={temp_dir}/head",
                        *common,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _port_open(port):
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.skip(
                    f"`ray start --head` did not come up within {START_TIMEOUT_S} s on this machine "
                    f"(exit {procs[0].poll()}): {_tail(logs[0])}"
                )
            time.sleep(0.5)
        with open(logs[1], "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(RAY),
                        "start",
                        f"--address={address}",
                        '--resources={"node2": 1}',
                        f"--temp-dir={temp_dir}/node2",
                        *common,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
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
        nodes = {
            ("node2" if "node2" in n["Resources"] else "head"): n["NodeID"] for n in ray.nodes() if n["Alive"]
        }
        yield nodes
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(procs, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


async def _episode(
    make_env: Any, env_id: str, extras: Dict[str, Any], actions: List[str], caller: Any = None
):
    return await run_episode(
        make_env,
        [{"role": "user", "content": "q"}],
        ScriptedPolicy(actions),
        env_class=env_id,
        row_max_turns=extras.get("max_turns"),
        caller=caller,
    )


def _summary(episode: Any) -> Any:
    return episode.end, episode.rewards, episode.messages, episode.env_metrics, episode.error


async def test_env_work_runs_on_both_nodes_with_the_same_rewards_as_local(two_node_cluster):
    from tests.adapters.support import register_test_envs

    register_test_envs()
    assert set(two_node_cluster) == {"head", "node2"}
    with EnvWorkerPool(2, num_cpus_per_worker=1, scheduling_strategy="SPREAD", imports=[SUPPORT]) as pool:
        assert sorted(pool.worker_nodes()) == sorted(two_node_cluster.values()), "one worker on each node"
        local = [
            await _episode(make_env_factory(env_id, None, extras), env_id, extras, actions)
            for env_id, extras, actions in CASES
        ]
        # every case twice, all in flight at once: sessions go to the least busy worker, so to both nodes
        remote = await asyncio.gather(
            *[
                _episode(pool.env_factory(env_id, None, extras), env_id, extras, actions, RayEnvCaller())
                for _ in range(2)
                for env_id, extras, actions in CASES
            ]
        )
        assert [_summary(e) for e in remote] == [_summary(e) for e in local] * 2
        infos = pool.worker_info()
        assert {i["node_id"] for i in infos} == set(two_node_cluster.values())
        for info in infos:  # both nodes stepped envs, and closed every session they opened
            assert info["calls"].get("step", 0) > 0 and info["sessions_created"] > 0, info
            assert info["sessions_open"] == 0 and info["sessions_closed"] == info["sessions_created"], info
        assert sum(i["calls"]["step"] for i in infos) == 2 * sum(e.num_turns for e in local)

    # a custom resource pins env work to a node (here the second one)
    with EnvWorkerPool(
        1, num_cpus_per_worker=0, resources_per_worker={"node2": 1}, imports=[SUPPORT]
    ) as pinned:
        assert pinned.worker_nodes() == [two_node_cluster["node2"]]
        env_id, extras, actions = CASES[2]
        episode = await _episode(
            pinned.env_factory(env_id, None, extras), env_id, extras, actions, RayEnvCaller()
        )
        assert _summary(episode) == _summary(local[2]) and episode.rewards == [0.0, 0.0, 1.0]
