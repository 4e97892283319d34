"""``await env.astep(action)`` for every env (a thread for blocking envs, the loop for tool envs), and the tool
worker processes."""

from __future__ import annotations

import asyncio
import os
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


def test_cpu_bound_work_runs_in_helper_processes_or_in_threads_when_they_are_off(monkeypatch):
    import os

    from skyrl_gym.tools.blocking import run_cpu_bound

    monkeypatch.setenv("SKYRL_GYM_TOOL_PROCESSES", "2")
    assert asyncio.run(run_cpu_bound(os.getpid)) != os.getpid()
    monkeypatch.setenv("SKYRL_GYM_TOOL_PROCESSES", "0")
    assert asyncio.run(run_cpu_bound(os.getpid)) == os.getpid()


def test_a_script_without_a_main_guard_gets_its_sql_tool_calls(tmp_path):
    """The tool workers were a multiprocessing pool, whose workers import the caller's main script again: a script
    without ``if __name__ == "__main__":`` ran again in each and broke the pool (BrokenProcessPool twice)."""
    import subprocess
    import sys

    folder = shared_sample_databases()
    row = {"reward_spec": {"ground_truth": "SELECT COUNT(*) FROM airports"},
           "db_file": str(folder / "databases" / "flights.sqlite")}
    script = tmp_path / "explore.py"
    script.write_text(
        "import asyncio, skyrl_gym\n"
        "print('top level ran')\n"
        f"env = skyrl_gym.make('text2sql', env_config={{}}, extras={row!r})\n"
        "asyncio.run(env.ainit([]))\n"
        "out = asyncio.run(env.astep('<think>t</think><sql>SELECT COUNT(*) FROM airports</sql>'))\n"
        "print(out['observations'][0]['content'].split('[')[0].split()[-1])\n"
        "out = asyncio.run(env.astep('<think>t</think><solution>SELECT COUNT(code) FROM airports</solution>'))\n"
        "print(out['reward'])\n"
    )
    env = {**os.environ, "SKYRL_GYM_TOOL_PROCESSES": "2"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "top level ran" and lines.count("top level ran") == 1, done.stdout
    assert lines[-1] == "1.0" and lines[-2].isdigit() and int(lines[-2]) > 0, done.stdout + done.stderr[-2000:]
