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
