"""Episodes per second of the ``search`` env against the bundled retrieval server, and how much of
the time the event loop was blocked (with ``--sql``, the same for ``text2sql`` on SQLite).

    python bench/tool_env_throughput.py [--concurrency 1 64 512] [--episodes 1500] [--documents 20000] [--sql]

It writes a corpus, starts ``python -m skyrl_gym.retrieval`` on 127.0.0.1 (a real BM25 server
in its own process), then runs two-turn episodes (``<search>`` then ``<answer>``) at each
concurrency level in two ways, side by side:

* ``astep``: every episode is a coroutine on one event loop; requests go through aiohttp.
* ``step in threads`` (baseline, what a trainer does with a synchronous env): ``env.step`` runs in
  a thread pool as large as the concurrency level; requests go through ``requests``.

Event-loop figures for the astep runs, from timing every callback the loop runs:
"loop busy" is the share of wall time the loop spent running callbacks (useful work included);
"loop blocked" is the share spent in callbacks longer than 5 ms that used that much CPU or slept in
a blocking system call, i.e. calls that held up every other episode ("longest block": the longest
of them); "preempted" is time in long callbacks that were only descheduled by other processes. "heartbeat lag" is the share of time
by which a 5 ms timer on the loop was late (queueing behind ready callbacks counts here too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import skyrl_gym  # noqa: E402
from skyrl_gym.tools.search import SearchToolGroup  # noqa: E402

TOPICS = ["river", "mountain", "city", "painter", "composer", "planet", "language", "empire", "island", "bridge"]
WORDS = ("ancient northern famous coastal modern royal golden silent eastern western central great old new "
         "long high deep wide bright dark early late grand small").split()


def write_corpus(path: str, documents: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(documents):
            topic = TOPICS[i % len(TOPICS)]
            title = f"{rng.choice(WORDS).title()} {topic.title()} {i}"
            text = " ".join(rng.choice(WORDS) for _ in range(60))
            handle.write(json.dumps({"id": str(i), "contents": f'"{title}"\n{title} is a {topic}. {text}'}) + "\n")


def start_server(corpus: str) -> "tuple[subprocess.Popen, str]":
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    process = subprocess.Popen([sys.executable, "-m", "skyrl_gym.retrieval", "--corpus", corpus, "--port", "0"],
                               stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = open(log.name).read()
        if "listening on " in text:
            return process, text.split("listening on ", 1)[1].split()[0]
        if process.poll() is not None:
            raise SystemExit(f"retrieval server failed:\n{text}")
        time.sleep(0.1)
    process.kill()
    raise SystemExit("retrieval server did not start")


def env_for(url: str, i: int) -> Any:
    return skyrl_gym.make(
        "search",
        env_config={"search_url": url, "topk": 3, "timeout": 60, "retry_attempts": 3},
        extras={"reward_spec": {"ground_truth": {"target": f"River {i}"}}, "max_turns": 2},
    )


def question(i: int) -> str:
    return f"<think>look it up</think><search>{random.choice(WORDS)} {TOPICS[i % len(TOPICS)]} {i}</search>"


class CallbackTimer:
    """Times every callback the event loop runs (patches ``asyncio.Handle._run`` while active).

    A callback longer than 5 ms counts as *blocking* when it either used that much CPU itself or
    slept in a blocking system call (a voluntary context switch of the loop thread: a synchronous
    HTTP request, a lock); otherwise it was merely preempted by other processes on a busy machine,
    which is reported apart.
    """

    BLOCKING_S = 0.005

    def __init__(self) -> None:
        self.busy = 0.0
        self.blocked = 0.0
        self.preempted = 0.0
        self.longest_blocking = 0.0
        self._original = asyncio.events.Handle._run

    def __enter__(self) -> "CallbackTimer":
        timer, original = self, self._original

        def timed_run(handle: asyncio.events.Handle) -> None:
            wall, cpu = time.perf_counter(), time.thread_time()
            switches = resource.getrusage(RUSAGE_THREAD).ru_nvcsw
            try:
                original(handle)
            finally:
                wall = time.perf_counter() - wall
                timer.busy += wall
                if wall > timer.BLOCKING_S:
                    cpu = time.thread_time() - cpu
                    slept = resource.getrusage(RUSAGE_THREAD).ru_nvcsw > switches
                    if cpu > timer.BLOCKING_S or slept:
                        timer.blocked += wall
                        timer.longest_blocking = max(timer.longest_blocking, wall)
                    else:
                        timer.preempted += wall

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.events.Handle._run = self._original  # type: ignore[method-assign]


async def run_async(url: str, episodes: int, concurrency: int) -> Dict[str, float]:
    gate = asyncio.Semaphore(concurrency)
    lag = {"blocked": 0.0, "max": 0.0}
    stop = asyncio.Event()

    async def heartbeat() -> None:
        interval = 0.005
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(interval)
            late = max(0.0, time.perf_counter() - before - interval)
            lag["blocked"] += late
            lag["max"] = max(lag["max"], late)

    async def episode(i: int) -> float:
        async with gate:
            env = env_for(url, i)
            await env.astep(question(i))
            return (await env.astep("<answer>unknown</answer>"))["reward"]

    monitor = asyncio.get_running_loop().create_task(heartbeat())
    with CallbackTimer() as timer:
        start = time.perf_counter()
        await asyncio.gather(*(episode(i) for i in range(episodes)))
        wall = time.perf_counter() - start
    stop.set()
    await monitor
    await SearchToolGroup.close_async_sessions()
    return {"episodes_per_s": episodes / wall, "heartbeat_lag": lag["blocked"] / wall, "busy": timer.busy / wall,
            "blocked": timer.blocked / wall, "preempted": timer.preempted / wall,
            "longest_blocking_ms": timer.longest_blocking * 1000, "wall_s": wall}


def run_threads(url: str, episodes: int, concurrency: int) -> Dict[str, float]:
    def episode(i: int) -> float:
        env = env_for(url, i)
        env.step(question(i))
        return env.step("<answer>unknown</answer>")["reward"]

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(episode, range(episodes)))
    wall = time.perf_counter() - start
    return {"episodes_per_s": episodes / wall, "wall_s": wall}


def sql_rows(out_dir: str) -> List[Dict[str, Any]]:
    import importlib.util

    path = os.path.join(REPO_ROOT, "examples", "text2sql", "build_sample_databases.py")
    spec = importlib.util.spec_from_file_location("build_sample_databases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.build(out_dir)


SQL_EXPLORE = "<think>look at the data</think><sql>SELECT * FROM {table} LIMIT 20</sql>"
SQL_TABLES = {"retail": "orders", "university": "enrollments", "flights": "flights"}


async def run_sql_async(db_path: str, rows: List[Dict[str, Any]], episodes: int, concurrency: int) -> Dict[str, float]:
    gate = asyncio.Semaphore(concurrency)

    async def episode(i: int) -> float:
        row = rows[i % len(rows)]
        async with gate:
            env = skyrl_gym.make("text2sql", env_config={"db_path": db_path}, extras=row)
            await env.astep(SQL_EXPLORE.format(table=SQL_TABLES[row["db_id"]]))
            final = await env.astep(f"<think>ok</think><solution>{row['reward_spec']['ground_truth']}</solution>")
            return final["reward"]

    with CallbackTimer() as timer:
        start = time.perf_counter()
        rewards = await asyncio.gather(*(episode(i) for i in range(episodes)))
        wall = time.perf_counter() - start
    assert all(r == 1.0 for r in rewards), "a gold solution did not score 1.0"
    return {"episodes_per_s": episodes / wall, "busy": timer.busy / wall, "blocked": timer.blocked / wall,
            "longest_blocking_ms": timer.longest_blocking * 1000}


def run_sql_threads(db_path: str, rows: List[Dict[str, Any]], episodes: int, concurrency: int) -> Dict[str, float]:
    def episode(i: int) -> float:
        row = rows[i % len(rows)]
        env = skyrl_gym.make("text2sql", env_config={"db_path": db_path}, extras=row)
        env.step(SQL_EXPLORE.format(table=SQL_TABLES[row["db_id"]]))
        return env.step(f"<think>ok</think><solution>{row['reward_spec']['ground_truth']}</solution>")["reward"]

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(episode, range(episodes)))
    return {"episodes_per_s": episodes / (time.perf_counter() - start)}


def _sql_workers() -> str:
    from skyrl_gym.tools.blocking import tool_process_pool

    pool = tool_process_pool()
    if pool is None:
        return f"the tool thread pool ({os.environ.get('SKYRL_GYM_TOOL_THREADS', '32')} threads; SKYRL_GYM_TOOL_PROCESSES=0)"
    return f"{pool.size} tool helper processes"


def bench_sql(concurrency_levels: List[int], episodes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = sql_rows(tmp)
        print(f"\ntext2sql env, two-turn episodes (one exploratory query, then the solution: 2 reward queries), "
              f"sample SQLite databases, queries in {_sql_workers()}")
        print(f"{'concurrency':>11}  {'episodes':>8}  {'astep ep/s':>10}  {'loop busy':>9}  {'loop blocked':>12}  "
              f"{'longest block':>13}  {'step-in-threads ep/s':>20}")
        for concurrency in concurrency_levels:
            n = episodes if concurrency > 1 else max(100, episodes // 6)
            result = asyncio.run(run_sql_async(tmp, rows, n, concurrency))
            threaded = run_sql_threads(tmp, rows, n, concurrency)
            print(f"{concurrency:>11}  {n:>8}  {result['episodes_per_s']:10.1f}  {result['busy'] * 100:8.1f}%  "
                  f"{result['blocked'] * 100:11.2f}%  {result['longest_blocking_ms']:11.1f}ms  "
                  f"{threaded['episodes_per_s']:20.1f}", flush=True)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 512])
    parser.add_argument("--episodes", type=int, default=1500, help="episodes per run (a sixth of it at concurrency 1)")
    parser.add_argument("--documents", type=int, default=20000)
    parser.add_argument("--skip-threads", action="store_true", help="only the async path")
    parser.add_argument("--sql", action="store_true", help="also measure text2sql episodes on the sample databases")
    parser.add_argument("--sql-only", action="store_true", help="only the text2sql measurement")
    args = parser.parse_args(argv)
    if args.sql_only:
        bench_sql(args.concurrency, args.episodes)
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.jsonl")
        write_corpus(corpus, args.documents)
        process, url = start_server(corpus)
        try:
            asyncio.run(run_async(url, 50, 16))  # warm-up: connections, index pages
            print(f"search env, two-turn episodes, BM25 server over {args.documents} documents on 127.0.0.1, "
                  f"{os.cpu_count()} CPUs shared by client and server")
            print(f"{'concurrency':>11}  {'episodes':>8}  {'astep ep/s':>10}  {'loop busy':>9}  {'loop blocked':>12}  "
                  f"{'longest block':>13}  {'preempted':>9}  {'heartbeat lag':>13}  {'step-in-threads ep/s':>20}")
            for concurrency in args.concurrency:
                episodes = args.episodes if concurrency > 1 else max(100, args.episodes // 6)
                result = asyncio.run(run_async(url, episodes, concurrency))
                threaded = None if args.skip_threads else run_threads(url, episodes, concurrency)
                threaded_text = f"{threaded['episodes_per_s']:20.1f}" if threaded else f"{'-':>20}"
                print(f"{concurrency:>11}  {episodes:>8}  {result['episodes_per_s']:10.1f}  "
                      f"{result['busy'] * 100:8.1f}%  {result['blocked'] * 100:11.2f}%  "
                      f"{result['longest_blocking_ms']:11.1f}ms  {result['preempted'] * 100:8.1f}%  "
                      f"{result['heartbeat_lag'] * 100:12.1f}%  {threaded_text}", flush=True)
        finally:
            process.terminate()
            process.wait(timeout=10)
    if args.sql:
        bench_sql(args.concurrency, args.episodes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
