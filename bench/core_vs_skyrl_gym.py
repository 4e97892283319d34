"""Our core against the public SkyRL-gym 0.4.0, side by side: episodes/s of ``gsm8k`` and ``import skyrl_gym`` time.

    python bench/core_vs_skyrl_gym.py [--seconds 0.5] [--rounds 15] [--imports 7]

SkyRL-gym 0.4.0 has our distribution name (``skyrl-gym``), so it gets a virtual environment of its own,
created on the first run and reused: ``~/.cache/skyrl-gym/bench-venvs/skyrl-gym-0.4.0`` (``pip install
skyrl-gym==0.4.0`` with its dependencies; the package index must be reachable that once). Ours runs in
the interpreter that runs this script, from this repository.

Both sides run the same worker, one long-lived process each: a round cycles for ``--seconds`` through
300 GSM8K-style rows, each episode ``make("gsm8k", extras=row)`` + ``init(prompt)`` + ``step(action)`` +
``close()``, with a mix of correct, wrong and unformatted answers (``#### N``). Rounds alternate between
the two so that a busy machine slows both alike; the median and the best round are reported (on a
shared machine the best round is the better estimate of the uncontended speed). ``import skyrl_gym`` is timed in fresh processes
(median of ``--imports``), without interpreter start-up. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
VENV_DIR = Path(os.path.expanduser("~/.cache/skyrl-gym/bench-venvs")) / "skyrl-gym-0.4.0"
THEIRS_REQUIREMENT = "skyrl-gym==0.4.0"

WORKER = r"""
import json, sys, time
import skyrl_gym
rows, actions = [], []
for i in range(300):
    a, b = 3 + i % 97, 5 + (i * 7) % 89
    rows.append({"data_source": "openai/gsm8k",
                 "prompt": [{"role": "user", "content": f"What is {a} + {b}? Let's think step by step."}],
                 "env_class": "gsm8k", "reward_spec": {"method": "rule", "ground_truth": str(a + b)},
                 "extra_info": {"split": "test", "index": i}})
    kind = i % 3
    actions.append(f"{a} + {b} = {a + b}\n#### {a + b}" if kind == 0 else
                   f"{a} + {b} = {a + b + 1}\n#### {a + b + 1}" if kind == 1 else f"The answer is {a + b}.")
print(json.dumps({"ready": True, "file": skyrl_gym.__file__}), flush=True)
count = 0
for line in sys.stdin:  # one round per line: the seconds to run
    rewards, episodes = 0.0, 0
    start = time.perf_counter()
    deadline = start + float(line)
    while time.perf_counter() < deadline:
        for _ in range(50):
            row = rows[count % 300]
            env = skyrl_gym.make("gsm8k", extras=row)
            env.init(row["prompt"])
            rewards += env.step(actions[count % 300])["reward"]
            env.close()
            count += 1
            episodes += 1
    elapsed = time.perf_counter() - start
    print(json.dumps({"eps": episodes / elapsed, "mean_reward": rewards / episodes}), flush=True)
"""

IMPORT_TIMER = "import time; t = time.perf_counter(); import skyrl_gym; print(time.perf_counter() - t)"


def theirs_python() -> Path:
    python = VENV_DIR / "bin" / "python"
    marker = VENV_DIR / ".installed"
    if marker.exists() and python.exists():
        return python
    print(f"creating {VENV_DIR} with {THEIRS_REQUIREMENT} (once)", file=sys.stderr, flush=True)
    venv.EnvBuilder(with_pip=False, clear=True).create(VENV_DIR)
    # the running interpreter's pip installs into the other venv (pip >= 22.3)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", THEIRS_REQUIREMENT],
                   check=True)
    marker.write_text(THEIRS_REQUIREMENT + "\n")
    return python


OURS_SRC = REPO


def _env(side: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if side == "ours":
        env["PYTHONPATH"] = str(OURS_SRC)
    return env


class Worker:
    """One side's worker process, kept running; each round is a line on its stdin."""

    def __init__(self, python: Path, side: str) -> None:
        self.process = subprocess.Popen([str(python), "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=_env(side), cwd="/")
        self.file = self._read()["file"]

    def _read(self) -> Dict[str, Any]:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker failed:\n{self.process.stderr.read()}")
        return json.loads(line)

    def round(self, seconds: float) -> Dict[str, Any]:
        self.process.stdin.write(f"{seconds}\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def import_seconds(python: Path, side: str, times: int) -> float:
    samples = []
    for _ in range(times):
        out = subprocess.run([str(python), "-c", IMPORT_TIMER], capture_output=True, text=True, env=_env(side),
                             cwd="/", check=True)
        samples.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(samples)


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one round on one side")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per side, alternating")
    parser.add_argument("--imports", type=int, default=7, help="fresh processes timing `import skyrl_gym`")
    parser.add_argument("--ours-src", type=Path, default=REPO,
                        help="source tree of ours (default: this repository; e.g. an older commit's "
                             "`git archive` to compare before and after a change)")
    args = parser.parse_args(argv)
    global OURS_SRC
    OURS_SRC = args.ours_src.resolve()

    sides = {"ours": Path(sys.executable), "skyrl-gym 0.4.0": theirs_python()}
    workers = {name: Worker(python, "ours" if name == "ours" else "theirs") for name, python in sides.items()}
    results: Dict[str, List[Dict[str, Any]]] = {name: [] for name in sides}
    try:
        for name, worker in workers.items():
            worker.round(min(args.seconds, 0.5))  # warm-up: imports, caches
        for _ in range(args.rounds):
            for name, worker in workers.items():
                results[name].append(worker.round(args.seconds))
    finally:
        for worker in workers.values():
            worker.close()
    imports = {name: import_seconds(python, "ours" if name == "ours" else "theirs", args.imports)
               for name, python in sides.items()}

    print(f"gsm8k make + init + step + close: {args.rounds} alternating rounds of {args.seconds:g} s per side; "
          f"`import skyrl_gym`: median of {args.imports} fresh processes")
    print(f"{'':17}{'median eps':>11}{'best eps':>10}{'us/episode':>11}{'reward':>8}{'import skyrl_gym':>18}")
    median, best = {}, {}
    for name, runs in results.items():
        median[name] = statistics.median(r["eps"] for r in runs)
        best[name] = max(r["eps"] for r in runs)
        print(f"{name:17}{median[name]:11.0f}{best[name]:10.0f}{1e6 / median[name]:11.1f}"
              f"{runs[0]['mean_reward']:8.3f}{imports[name]:17.3f}s")
    theirs = "skyrl-gym 0.4.0"
    print(f"ratio ours / 0.4.0: {median['ours'] / median[theirs]:.2f}x (median rounds), "
          f"{best['ours'] / best[theirs]:.2f}x (best rounds)")
    print(f"ours from {workers['ours'].file}; 0.4.0 from {workers[theirs].file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
