"""Sandbox throughput: executions/s and latency percentiles, beside a bare ``python -c`` subprocess.

    python bench/sandbox_throughput.py                       # every backend this machine can run
    python bench/sandbox_throughput.py --runs 300 --backends local-bwrap-warm
    python bench/sandbox_throughput.py --backends local-bwrap-warm local-bwrap-warm-noseccomp  # the filter's cost
    python bench/sandbox_throughput.py --backends local-bwrap-warm local-bwrap-warm-nocgroup  # the memory cgroup's

Workloads: ``short`` (a one-line program) and ``lcb`` (one ``lcb`` env step grading a correct
solution against 2 stdin tests, i.e. 2 sandboxed runs). Each at concurrency 1 and 2. The baseline,
bare unsandboxed ``python3 -c`` subprocesses of the same interpreter (one per program, one per lcb
test, same comparison of outputs), is measured in the same run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skygym_sandboxes import Limits, Status  # noqa: E402
from skygym_sandboxes.local import LocalSandbox, default_python  # noqa: E402

SHORT_PROGRAM = "print(sum(range(100)))"
LCB_TESTS = json.dumps(
    [
        {"input": "4\n8 2 5 1\n", "output": "3\n", "testtype": "stdin"},
        {"input": "3\n3 2 1\n", "output": "2\n", "testtype": "stdin"},
    ]
)
LCB_ANSWER = (
    "```python\nN = int(input())\nA = list(map(int, input().split()))\nB = sorted(A, reverse=True)\n"
    "print(A.index(B[1]) + 1)\n```"
)


def measure(task: Callable[[], bool], runs: int, concurrency: int) -> Dict[str, float]:
    latencies: List[float] = []
    failures = 0

    def timed() -> None:
        nonlocal failures
        started = time.perf_counter()
        ok = task()
        latencies.append(time.perf_counter() - started)
        failures += 0 if ok else 1

    for _ in range(min(5, runs)):  # warm-up: caches, lazily started pools
        task()
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(lambda _: timed(), range(runs)))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "per_s": runs / elapsed,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        "failures": failures,
    }


def bare_python_task(python: str) -> Callable[[], bool]:
    def task() -> bool:
        done = subprocess.run([python, "-c", SHORT_PROGRAM], capture_output=True, text=True)
        return done.stdout == "4950\n"

    return task


def bare_lcb_task(python: str) -> Callable[[], bool]:
    """The lcb grading work without any sandbox: one bare ``python3 -c`` subprocess per test."""
    from skyrl_gym.envs.lcb.grading import PREAMBLE, extract_last_code_block, parse_tests, stdout_matches

    tests = parse_tests(LCB_TESTS)

    def task() -> bool:
        program = PREAMBLE + "\n" + (extract_last_code_block(LCB_ANSWER) or "")
        for test in tests:
            done = subprocess.run([python, "-c", program], input=test["input"], capture_output=True, text=True)
            if done.returncode != 0 or not stdout_matches(done.stdout, test["output"]):
                return False
        return True

    return task


def make_sandboxes(names: List[str], concurrency: int, engines: Dict[str, object]):
    """Yield (name, sandbox) for each backend that starts here; say why for those that do not.

    ``docker-warm`` uses ``SANDBOX_DOCKER_HOST`` or starts the tests' private dockerd (root);
    ``remote`` starts a real ``skygym-sandboxes serve`` on 127.0.0.1 (local backend behind it).
    """
    limits = Limits(wall_s=10, cpu_s=10)
    for name in names:
        try:
            if name.startswith("local-"):
                _, isolation, mode, *flags = name.split("-")
                box = LocalSandbox(
                    isolation=isolation,
                    warm=(mode == "warm"),
                    pool_size=max(2, concurrency),
                    limits=limits,
                    seccomp="noseccomp" not in flags,
                    memory_cgroup=False if "nocgroup" in flags else None,
                )
            elif name == "docker-warm":
                from tests.sandboxes.docker_support import make_docker_sandbox, start_engine

                if "docker" not in engines:
                    engines["docker"] = start_engine()
                box = make_docker_sandbox(engines["docker"], limits, pool_size=max(2, concurrency))
            elif name == "remote":
                from tests.sandboxes.remote_support import start_server

                box = start_server(limits, max_concurrency=max(2, concurrency))
            else:
                raise ValueError(f"unknown backend {name}")
            if hasattr(box, "wait_ready") and not box.wait_ready(120):
                raise RuntimeError("workers did not start")
            probe = box.run(SHORT_PROGRAM)
            if probe.status != Status.OK:
                raise RuntimeError(f"probe run failed: {probe.status} {probe.message}")
        except BaseException as exc:  # pytest.skip raises a BaseException: report it and go on
            if isinstance(exc, KeyboardInterrupt):
                raise
            print(f"  skipped {name}: {exc}", flush=True)
            continue
        yield name, box


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs", type=int, default=200, help="runs per warm measurement (cold ones use a quarter)"
    )
    parser.add_argument("--backends", nargs="*", default=None)
    parser.add_argument("--concurrency", nargs="*", type=int, default=[1, 2])
    args = parser.parse_args()
    names = args.backends
    if names is None:
        names = ["local-bwrap-warm", "local-bwrap-cold"] if shutil.which("bwrap") else []
        if os.geteuid() == 0 and shutil.which("unshare"):
            names.append("local-unshare-warm")
        names += ["docker-warm", "remote"]
    python = default_python()
    import skyrl_gym

    rows = []
    print(f"cpus: {os.cpu_count()}  interpreter: {python}  runs: {args.runs}", flush=True)
    for concurrency in args.concurrency:
        rows.append(
            (
                "bare python -c",
                "short",
                concurrency,
                measure(bare_python_task(python), args.runs // 2, concurrency),
            )
        )
        rows.append(
            ("bare python -c", "lcb (2 tests)", concurrency, measure(bare_lcb_task(python), args.runs // 4, concurrency))
        )
        print(f"  measured bare python -c, concurrency {concurrency}", flush=True)
    engines: Dict[str, object] = {}
    for concurrency in args.concurrency:
        for name, box in make_sandboxes(names, concurrency, engines):
            runs = args.runs if ("warm" in name or name == "remote") else max(20, args.runs // 4)

            def short_task(box=box) -> bool:
                return box.run(SHORT_PROGRAM).stdout == "4950\n"

            def lcb_task(box=box) -> bool:
                env = skyrl_gym.make(
                    "lcb", extras={"reward_spec": {"method": "rule", "ground_truth": LCB_TESTS}}
                )
                env._sandbox = box  # the env under test, on this backend
                return env.step(LCB_ANSWER)["reward"] == 1.0

            rows.append((name, "short", concurrency, measure(short_task, runs, concurrency)))
            rows.append(
                (name, "lcb (2 tests)", concurrency, measure(lcb_task, max(10, runs // 2), concurrency))
            )
            print(f"  measured {name}, concurrency {concurrency}", flush=True)
            box.close()
    for engine in engines.values():
        engine.stop()  # type: ignore[attr-defined]
    baseline = {(w, c): m["per_s"] for n, w, c, m in rows if n == "bare python -c"}
    print()
    print(
        f"{'backend':<28}{'workload':<16}{'conc':>5}{'exec/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'vs bare':>9}{'fail':>6}"
    )
    for name, workload, concurrency, m in rows:
        ratio_text = f"{m['per_s'] / baseline[(workload, concurrency)]:.2f}x"
        print(
            f"{name:<28}{workload:<16}{concurrency:>5}{m['per_s']:>10.1f}{m['p50_ms']:>10.2f}{m['p99_ms']:>10.2f}"
            f"{ratio_text:>9}{int(m['failures']):>6}"
        )


if __name__ == "__main__":
    main()
