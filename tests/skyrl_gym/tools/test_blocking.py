"""``await env.astep(action)`` for every env (a thread for blocking envs, the loop for tool envs), and the tool
worker processes."""

from __future__ import annotations

import asyncio
import threading

import skyrl_gym
from tests.tool_env_support import shared_sample_databases


def test_sync_env_steps_in_the_pool_and_async_env_on_the_loop():
    folder = shared_sample_databases()
    loop_thread = []

    class RecordingGsm8k(type(skyrl_gym.make("gsm8k", extras={"reward_spec": {"ground_truth": "72"}}))):
        def step(self, action):
            loop_thread.append(threading.current_thread() is threading.main_thread())
            return super().step(action)

    async def main():
        plain = RecordingGsm8k(extras={"reward_spec": {"ground_truth": "72"}})
        plain.init([{"role": "user", "content": "q"}])
        plain_out = await plain.astep("#### 72")
        row = {"reward_spec": {"ground_truth": "SELECT COUNT(*) FROM airports"}, "db_file": str(folder / "databases" / "flights.sqlite")}
        sql_env = skyrl_gym.make("text2sql", env_config={}, extras=row)
        await sql_env.ainit([])
        sql_out = await sql_env.astep("<think>t</think><solution>SELECT COUNT(code) FROM airports</solution>")
        return plain, plain_out, sql_env, sql_out

    plain, plain_out, sql_env, sql_out = asyncio.run(main())
    assert not plain.has_native_astep and sql_env.has_native_astep
    assert plain_out["reward"] == 1.0 and loop_thread == [False]  # the sync env ran off the loop thread
    assert sql_out["reward"] == 1.0 and sql_out["done"]


def _die_once(flag: str) -> int:
    """Kills its worker process the first time (as an out-of-memory kill would), answers the second."""
    import os

    if not os.path.exists(flag):
        open(flag, "w").close()
        os._exit(1)
    return os.getpid()


def test_cpu_bound_work_runs_in_worker_processes_and_survives_a_dead_worker(tmp_path, monkeypatch):
    import os

    from skyrl_gym.tools.blocking import run_cpu_bound

    monkeypatch.setenv("SKYRL_GYM_TOOL_PROCESSES", "2")
    worker_pid = asyncio.run(run_cpu_bound(os.getpid))
    assert worker_pid != os.getpid()
    # a worker that dies breaks the pool; the call is retried once on a fresh pool
    assert asyncio.run(run_cpu_bound(_die_once, str(tmp_path / "flag"))) not in (os.getpid(), worker_pid)
    # and with processes off it runs in the thread pool of this process
    monkeypatch.setenv("SKYRL_GYM_TOOL_PROCESSES", "0")
    assert asyncio.run(run_cpu_bound(os.getpid)) == os.getpid()


_OWNER = """
import asyncio, json, multiprocessing.forkserver, os, sys
from skyrl_gym.tools.blocking import run_cpu_bound, tool_process_pool

if __name__ == "__main__":
    asyncio.run(run_cpu_bound(os.getpid))
    pids = [*tool_process_pool()._processes, multiprocessing.forkserver._forkserver._forkserver_pid]
    with open(sys.argv[1], "w") as out:
        json.dump(pids, out)
    os._exit(0)  # as a Ray actor or a pytest-xdist worker ends: no atexit, so the pool is never shut down
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: a process reparented to an init that does not reap stays one)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_tool_workers_and_their_fork_server_end_with_the_process_that_made_them(tmp_path):
    """An owner that ended without shutting its pool down (killed, or ``os._exit``) left the fork server and its
    workers waiting for good: each worker holds both ends of its call queue and the server's lifeline."""
    import json
    import subprocess
    import sys
    import time

    script, found, log = tmp_path / "owner.py", tmp_path / "pids.json", tmp_path / "owner.log"
    script.write_text(_OWNER)
    with log.open("w") as output:  # a file, not a pipe: workers left behind would hold a pipe open
        done = subprocess.run([sys.executable, str(script), str(found)], stdout=output, stderr=output, timeout=120)
    assert done.returncode == 0, log.read_text()
    pids = json.loads(found.read_text())
    assert len(pids) >= 2  # a worker, and the fork server
    deadline = time.monotonic() + 30  # only stops a broken test from hanging: they end at once
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if _running(pid)]
