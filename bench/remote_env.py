"""Step latency and throughput of envs served by ``skyrl-gym serve-env``, side by side with the same envs in-process.

    python bench/remote_env.py                         # 512 concurrent sessions of gsm8k_multi_turn, 4 turns each
    python bench/remote_env.py --sessions 128 --env gsm8k_multi_turn --turns 8

One server process (``skyrl-gym serve-env`` on a free loopback port) and one client process on the same machine.
``--sessions`` episodes are opened at once (create + init, not timed), then all of them step together on one event
loop, ``--turns`` steps each (wrong answers, then the right one), and every step's latency is recorded. The same
episodes then run in-process, two ways: ``env.step`` called on the loop (what the episode driver does for a local
env) and ``await env.astep`` (a worker thread per call). A last row is the floor of the HTTP stack: the same number
of requests, as concurrent, to a FastAPI route that only echoes its body (uvicorn, same process layout). Prints
one table: steps, p50/p99 step latency, steps/s, and the machine's load average (the figures move with it).
Both processes share this machine's cores, so the remote figures include the server's CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

REPO_ROOT = Path(__file__).resolve().parent.parent


def row(i: int, turns: int) -> Dict[str, Any]:
    a, b = 17 + i, 5 + 2 * i
    return {
        "reward_spec": {"method": "rule", "ground_truth": str(a + b)},
        "max_turns": turns,
        "prompt": [{"role": "user", "content": f"Episode {i}: what is {a} + {b}? Answer after ####."}],
    }


def actions(i: int, turns: int) -> List[str]:
    a, b = 17 + i, 5 + 2 * i
    return [f"I think #### {a + b + k + 1}" for k in range(turns - 1)] + [
        f"{a} + {b} = {a + b}\n#### {a + b}"
    ]


def percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def run_all(envs: List[Any], turns: int, mode: str) -> Dict[str, Any]:
    latencies: List[float] = []
    rewards: List[float] = []

    async def episode(i: int, env: Any) -> None:
        for action in actions(i, turns):
            start = time.perf_counter()
            if mode == "inline":
                output = env.step(action)
            else:
                output = await env.astep(action)
            latencies.append(time.perf_counter() - start)
            rewards.append(output["reward"])
            if output["done"]:
                break

    start = time.perf_counter()
    await asyncio.gather(*(episode(i, env) for i, env in enumerate(envs)))
    wall = time.perf_counter() - start
    return {
        "steps": len(latencies),
        "p50_ms": 1e3 * percentile(latencies, 0.50),
        "p99_ms": 1e3 * percentile(latencies, 0.99),
        "mean_ms": 1e3 * statistics.fmean(latencies),
        "steps_per_s": len(latencies) / wall,
        "wall_s": wall,
        "reward_sum": sum(rewards),
    }


def local_run(env_id: str, sessions: int, turns: int, mode: str) -> Dict[str, Any]:
    import skyrl_gym

    envs = []
    for i in range(sessions):
        r = row(i, turns)
        env = skyrl_gym.make(env_id, extras={k: v for k, v in r.items() if k != "prompt"})
        env.init(r["prompt"])
        envs.append(env)
    result = asyncio.run(run_all(envs, turns, mode))
    for env in envs:
        env.close()
    return result


def remote_run(url: str, env_id: str, sessions: int, turns: int) -> Dict[str, Any]:
    import skyrl_gym
    from skyrl_gym.remote.client import RemoteEnv

    def open_session(i: int) -> Any:
        r = row(i, turns)
        env = skyrl_gym.make(
            "remote", url=url, env_id=env_id, extras={k: v for k, v in r.items() if k != "prompt"}
        )
        env.init(r["prompt"])
        return env

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        envs = list(pool.map(open_session, range(sessions)))
    setup_s = time.perf_counter() - started

    async def main() -> Dict[str, Any]:
        try:
            return await run_all(envs, turns, "astep")
        finally:
            await RemoteEnv.close_async_sessions()

    result = asyncio.run(main())
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda env: env.close(), envs))
    result["setup_s"], result["close_s"] = setup_s, time.perf_counter() - started
    return result


ECHO_SERVER = """
import sys, uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
from skyrl_gym.retrieval.server import bind_socket
app = FastAPI()
async def echo(request: Request):
    return Response(await request.body(), media_type="application/json")
app.add_api_route("/echo", echo, methods=["POST"])
sock = bind_socket("127.0.0.1", 0)
print(f"http://127.0.0.1:{sock.getsockname()[1]}/echo", flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning", backlog=2048)).run(sockets=[sock])
"""


def echo_run(sessions: int, turns: int) -> Dict[str, Any]:
    """The HTTP floor: ``sessions`` clients each posting ``turns`` step-sized bodies to an echo route."""
    import aiohttp

    process = subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    url = process.stdout.readline().strip()
    latencies: List[float] = []

    async def client(session: Any, i: int) -> None:
        for action in actions(i, turns):
            start = time.perf_counter()
            async with session.post(url, json={"action": action, "request_id": "0" * 32}) as response:
                await response.read()
            latencies.append(time.perf_counter() - start)

    async def main() -> float:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1024)) as session:
            await client(session, 0)  # connect once before timing
            latencies.clear()
            start = time.perf_counter()
            await asyncio.gather(*(client(session, i) for i in range(sessions)))
            return time.perf_counter() - start

    try:
        wall = asyncio.run(main())
    finally:
        process.terminate()
        process.wait(timeout=30)
    return {
        "steps": len(latencies),
        "p50_ms": 1e3 * percentile(latencies, 0.50),
        "p99_ms": 1e3 * percentile(latencies, 0.99),
        "mean_ms": 1e3 * statistics.fmean(latencies),
        "steps_per_s": len(latencies) / wall,
    }


def start_server(max_sessions: int) -> Any:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skyrl_gym.cli",
            "serve-env",
            "--port",
            "0",
            "--max-sessions",
            str(max_sessions),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if not line.startswith("env service listening on "):
        process.kill()
        raise SystemExit(f"serve-env did not start: {line!r}")
    return process, line.split()[4]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=512)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--env", default="gsm8k_multi_turn")
    args = parser.parse_args()

    process, url = start_server(max(args.sessions * 2, 64))
    try:
        remote = remote_run(url, args.env, args.sessions, args.turns)
    finally:
        process.terminate()
        process.wait(timeout=30)
    inline = local_run(args.env, args.sessions, args.turns, "inline")
    threaded = local_run(args.env, args.sessions, args.turns, "astep")
    echo = echo_run(args.sessions, args.turns)
    sums = {round(r["reward_sum"], 6) for r in (remote, inline, threaded)}
    assert len(sums) == 1, f"the remote and local episodes disagree on the rewards: {sums}"

    print(
        f"{args.sessions} concurrent sessions of {args.env}, {args.turns} steps each, one event loop "
        f"(CPUs: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}; server and client on this machine)"
    )
    header = f"{'':34} {'steps':>6} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9} {'steps/s':>9}"
    print(header)
    print("-" * len(header))
    for name, r in (
        ("local, env.step on the loop", inline),
        ("local, await env.astep (thread)", threaded),
        ("remote, await env.astep (HTTP)", remote),
        ("HTTP floor: FastAPI echo route", echo),
    ):
        print(
            f"{name:34} {r['steps']:>6} {r['p50_ms']:>9.3f} {r['p99_ms']:>9.2f} {r['mean_ms']:>9.2f} "
            f"{r['steps_per_s']:>9.0f}"
        )
    print(
        f"remote session setup (create + init, 32 threads): {remote['setup_s']:.2f} s for {args.sessions}; "
        f"close: {remote['close_s']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
