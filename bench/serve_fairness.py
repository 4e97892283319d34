"""How long one serve-env client's step waits while another client floods the server with slow steps.

    python bench/serve_fairness.py                          # 8 flooding sessions, 12 timed steps per setting
    python bench/serve_fairness.py --flood-sessions 16 --honest-steps 20 --verify-timeout 2

A real ``skyrl-gym serve-env`` (a free loopback port) serves the ``math`` env, with the operator's
``verify_timeout`` (``--verify-timeout``, default 2 s). The flooding client keeps ``--flood-sessions`` episodes
stepping at once, each answering ``\\boxed{9^{9^{9^{9^9}}}}``: math-verify works on it until the time limit, so each
of its steps holds a math helper for ``verify_timeout`` seconds (the server has as many helpers as CPUs, 4 at most,
plus one). The other client steps one episode at a time with an answer that needs math-verify
(``\\frac{144}{2}`` for 72) and times each step (create and init are not timed). Three settings, a fresh server
each:

- alone: no flood, the floor;
- one token: both clients send the same token, so the server sees one client and serves waiting calls in
  arrival order (what every server did before its pools took turns by client);
- a token each (``--tokens-file``): the server's env threads and math helpers go to the clients in turns.

Prints the honest step's p50 and max latency per setting and the flood's steps per second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import requests

REPO_ROOT = Path(__file__).resolve().parent.parent
HARD = r"so \boxed{9^{9^{9^{9^9}}}}"  # math-verify works on it until the time limit
TOKENS = {"flood": "f" * 32, "honest": "h" * 32}


def start_server(folder: Path, verify_timeout: float, tokens_file: bool) -> Any:
    config = folder / "server.json"
    config.write_text(json.dumps({"math": {"verify_timeout": verify_timeout}}))
    command = [sys.executable, "-m", "skyrl_gym.cli", "serve-env", "--port", "0", "--envs", "math",
               "--env-config", str(config)]
    environment = dict(os.environ)
    if tokens_file:
        names = folder / "tokens.json"
        names.write_text(json.dumps(TOKENS))
        names.chmod(0o600)  # the server warns about a tokens file others can read
        command += ["--tokens-file", str(names)]
    else:
        environment["SKYRL_GYM_ENV_SERVICE_TOKEN"] = TOKENS["flood"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, env=environment)
    line = process.stdout.readline()
    if not line.startswith("env service listening on "):
        process.kill()
        raise SystemExit(f"serve-env did not start: {line!r}")
    return process, line.split()[4]


def episode(http: requests.Session, url: str, token: str, ground_truth: str, answer: str) -> float:
    """One math episode: create and init (not timed), one step (timed, in seconds), close."""
    headers = {"Authorization": f"Bearer {token}"}
    row = {"env_id": "math", "extras": {"reward_spec": {"ground_truth": ground_truth}}}
    made = http.post(f"{url}/sessions", json=row, headers=headers, timeout=120)
    made.raise_for_status()
    session = made.json()["session_id"]
    try:
        http.post(f"{url}/sessions/{session}/init", json={}, headers=headers, timeout=120).raise_for_status()
        started = time.perf_counter()
        step = http.post(f"{url}/sessions/{session}/step", json={"action": answer}, headers=headers, timeout=600)
        took = time.perf_counter() - started
        step.raise_for_status()
        reward = step.json()["output"]["reward"]
        if answer != HARD and reward != 1.0:
            raise SystemExit(f"the honest answer scored {reward}: {step.text[:300]}")
        return took
    finally:
        http.delete(f"{url}/sessions/{session}", headers=headers, timeout=120)


def run(verify_timeout: float, flood_sessions: int, honest_steps: int, setting: str) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        process, url = start_server(Path(folder), verify_timeout, tokens_file=setting == "a token each")
        stop = threading.Event()
        flood_steps: List[float] = []

        def flood() -> None:
            with requests.Session() as http:
                while not stop.is_set():
                    flood_steps.append(episode(http, url, TOKENS["flood"], "1", HARD))

        honest_token = TOKENS["honest"] if setting == "a token each" else TOKENS["flood"]
        flooders = [threading.Thread(target=flood, daemon=True) for _ in range(flood_sessions if setting != "alone"
                                                                                 else 0)]
        try:
            with requests.Session() as http:
                episode(http, url, honest_token, "72", r"\boxed{\frac{144}{2}}")  # helpers started, not timed
                for thread in flooders:
                    thread.start()
                time.sleep(2 * verify_timeout if flooders else 0)  # every helper busy, the rest of the flood queued
                flood_started, done_before = time.perf_counter(), len(flood_steps)
                latencies = [episode(http, url, honest_token, "72", r"\boxed{\frac{144}{2}}")
                             for _ in range(honest_steps)]
                flood_rate = (len(flood_steps) - done_before) / (time.perf_counter() - flood_started)
        finally:
            stop.set()
            for thread in flooders:
                thread.join(timeout=120 + verify_timeout)
            process.terminate()
            process.wait(timeout=60)
    return {"p50_s": statistics.median(latencies), "max_s": max(latencies), "flood_steps_per_s": flood_rate}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood-sessions", type=int, default=8, help="episodes the flooding client steps at once")
    parser.add_argument("--honest-steps", type=int, default=12, help="timed steps of the other client per setting")
    parser.add_argument("--verify-timeout", type=float, default=2.0, help="the operator's math verify_timeout")
    args = parser.parse_args(argv)

    from skyrl_gym.helper_processes import DEFAULT_SIZE

    results = {setting: run(args.verify_timeout, args.flood_sessions, args.honest_steps, setting)
               for setting in ("alone", "one token", "a token each")}
    print(f"serve-env, math env, verify_timeout {args.verify_timeout:g} s, {DEFAULT_SIZE} math helpers; "
          f"{args.flood_sessions} flooding sessions, {args.honest_steps} timed steps of the other client "
          f"(CPUs: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f})")
    header = f"{'':40} {'p50 s':>8} {'max s':>8} {'flood steps/s':>14}"
    print(header)
    print("-" * len(header))
    for setting, result in results.items():
        name = {"alone": "alone (no flood)", "one token": "one token: arrival order",
                "a token each": "a token each: turns by client"}[setting]
        flood = f"{result['flood_steps_per_s']:.2f}" if setting != "alone" else "-"
        print(f"{name:40} {result['p50_s']:>8.3f} {result['max_s']:>8.3f} {flood:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
