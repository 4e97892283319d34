"""Sandbox soak: many hostile and honest runs at once, each with a unique marker; counts results
delivered to the wrong run, traces of one run seen by another, and honest runs that failed.

    python bench/sandbox_soak.py --runs 10000                         # local bubblewrap warm pool
    python bench/sandbox_soak.py --runs 2000 --backend remote --concurrency 4
    python bench/sandbox_soak.py --runs 2000 --backend local-unshare-warm
    python bench/sandbox_soak.py --runs 2000 --backend docker-warm    # starts the tests' private dockerd

Half the runs are hostile (fork bombs, output floods, sleepers, memory bombs, signals to the
supervisor, 3000-deep trees, files and daemons left behind, forged reply frames), half honest
(Python with stdin, files and a fetched file, some with limits of 1e10 s; shell commands; peekers
that search the sandbox, /proc and their own memory for other runs' markers). Exits 1 when any
result was misattributed, any trace was seen, or any honest run failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skygym_sandboxes import Limits  # noqa: E402
from tests.sandboxes.soak_support import soak  # noqa: E402

BACKENDS = ("local-bwrap-warm", "local-unshare-warm", "docker-warm", "remote")


def make_sandbox(name: str, limits: Limits, pool_size: int):
    if name.startswith("local-"):
        from skygym_sandboxes.local import LocalSandbox

        box = LocalSandbox(limits=limits, isolation=name.split("-")[1], pool_size=pool_size)
        return box, None
    if name == "docker-warm":
        from tests.sandboxes.docker_support import make_docker_sandbox, start_engine

        engine = start_engine()
        return make_docker_sandbox(engine, limits, pool_size=pool_size), engine
    from tests.sandboxes.remote_support import start_server

    return start_server(limits, max_concurrency=pool_size), None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--backend", choices=BACKENDS, default="local-bwrap-warm")
    parser.add_argument("--concurrency", type=int, default=4, help="runs submitted at once")
    parser.add_argument("--pool-size", type=int, default=2, help="warm workers (service slots for remote)")
    parser.add_argument("--memory-scan-share", type=float, default=0.2, help="share of peekers that scan memory")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    limits = Limits(wall_s=3, cpu_s=3, memory_mb=512, processes=64, output_bytes=200_000, scratch_mb=64)
    box, engine = make_sandbox(args.backend, limits, args.pool_size)
    try:
        if hasattr(box, "wait_ready") and not box.wait_ready(120):
            print("the sandbox workers did not start", file=sys.stderr)
            return 2
        print(f"soak: {args.runs} runs on {args.backend}, concurrency {args.concurrency}", flush=True)
        report = soak(
            box.run,
            runs=args.runs,
            limits=limits,
            concurrency=args.concurrency,
            memory_scan_share=args.memory_scan_share,
            seed=args.seed,
            progress=lambda done: print(f"  {done} runs done", flush=True),
        )
    finally:
        box.close()
        if engine is not None:
            engine.stop()
    print(report.summary())
    return 1 if (report.misattributed or report.traces or report.honest_failures) else 0


if __name__ == "__main__":
    sys.exit(main())
