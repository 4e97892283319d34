"""SWE tasks: what a container, a tool call and a grading cost, per instance.

    python bench/swe_tasks.py outputs/swe/instances.jsonl [--limit 10]

For each instance it measures:

- container start: a new container of the instance's image, with its Python environment found (the probe's
  cost is also shown alone);
- set-up: the repository at ``base_commit``, with the setup patch applied and the commit checked;
- the tools: ``bash`` running ``true``, ``bash`` running ``git status``, and a ``str_replace_editor`` view;
- grading: the gold patch in a fresh container, with the hidden tests run, and the same with nothing planted
  (the planted tests' cost: reading and writing one test file, and two more tests in the run).

Baselines on the same machine: a bare ``bash -c true`` subprocess on the host, beside the tool call,
and ``docker run --rm IMAGE true`` through the Docker CLI, beside the container start, when the CLI is
installed. It prints medians and 90th percentiles in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import time
from typing import Dict, List


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def main() -> None:
    from skygym_sandboxes.containers import docker_client

    from skyrl_gym.envs.swe import canary
    from skyrl_gym.envs.swe.grading import evaluate_patch
    from skyrl_gym.envs.swe.instances import load_instances
    from skyrl_gym.envs.swe.runtime import SWERuntime, python_environment
    from skyrl_gym.envs.swe.tools import SWEToolGroup

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instances")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10, help="tool calls of each kind per instance")
    args = parser.parse_args()

    client = docker_client()
    instances = load_instances(args.instances, limit=args.limit)
    times: Dict[str, List[float]] = {name: [] for name in (
        "container start", "python environment probe (in container start)", "set-up at base_commit", "bash `true`", "bash `git status`", "editor view",
        "grading (gold patch)", "grading, nothing planted (baseline)", "host `bash -c true` (baseline)",
        "`docker run --rm IMAGE true` (baseline)",
    )}
    for instance in instances:
        started = time.perf_counter()
        runtime = SWERuntime(instance, client=client)
        times["container start"].append(_ms(time.perf_counter() - started))
        try:
            started = time.perf_counter()
            python_environment(runtime.container)  # done once as the container started: its cost alone
            times["python environment probe (in container start)"].append(_ms(time.perf_counter() - started))
            started = time.perf_counter()
            runtime.setup()
            times["set-up at base_commit"].append(_ms(time.perf_counter() - started))
            tools = SWEToolGroup(runtime.container)
            target = f"/testbed/{instance.extra.get('mutation', {}).get('path') or 'README.rst'}"
            for _ in range(args.calls):
                for name, call in (
                    ("bash `true`", lambda: tools.bash("true")),
                    ("bash `git status`", lambda: tools.bash("git status")),
                    ("editor view", lambda: tools.str_replace_editor("view", target, view_range=[1, 40])),
                ):
                    started = time.perf_counter()
                    call()
                    times[name].append(_ms(time.perf_counter() - started))
        finally:
            runtime.close()
        started = time.perf_counter()
        report = evaluate_patch(instance, instance.patch, client=client)
        times["grading (gold patch)"].append(_ms(time.perf_counter() - started))
        if not report.resolved:
            print(f"warning: the gold patch does not resolve {instance.instance_id}: {report.error[:200]}")
        plant, canary.plant = canary.plant, lambda *args: []
        try:
            started = time.perf_counter()
            evaluate_patch(instance, instance.patch, client=client)
            times["grading, nothing planted (baseline)"].append(_ms(time.perf_counter() - started))
        finally:
            canary.plant = plant
        for _ in range(args.calls):
            started = time.perf_counter()
            subprocess.run(["bash", "-c", "true"], check=True)
            times["host `bash -c true` (baseline)"].append(_ms(time.perf_counter() - started))
        if shutil.which("docker"):
            env = dict(os.environ)
            if os.environ.get("SKYGYM_DOCKER_HOST"):
                env["DOCKER_HOST"] = os.environ["SKYGYM_DOCKER_HOST"]
            started = time.perf_counter()
            done = subprocess.run(["docker", "run", "--rm", "--network", "none", instance.image_name, "true"],
                                  env=env, capture_output=True)
            if done.returncode == 0:
                times["`docker run --rm IMAGE true` (baseline)"].append(_ms(time.perf_counter() - started))

    print(f"{len(instances)} instances, {args.calls} calls of each tool per instance; load average {os.getloadavg()[0]:.1f}")
    print(f"{'':48} {'median ms':>10} {'p90 ms':>10} {'n':>5}")
    for name, values in times.items():
        if not values:
            continue
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        print(f"{name:48} {statistics.median(values):>10.1f} {p90:>10.1f} {len(values):>5}")


if __name__ == "__main__":
    main()
