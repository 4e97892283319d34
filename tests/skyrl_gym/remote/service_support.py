"""The env service as the tests run it: ``skyrl-gym serve-env`` in a process of its own on a free port, plus a few
test envs (imported by the server with ``--import``) that sleep, raise and count the steps they apply."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import requests

from skyrl_gym import BaseTextEnv, StepOutput, register

REPO_ROOT = Path(__file__).resolve().parents[3]
COUNTER_ID = "test_service/counter"  # "test" first: suites that walk the registry skip test envs


class ServiceProcess:
    def __init__(self, process: subprocess.Popen, url: str, token: Optional[str]) -> None:
        self.process, self.url, self.token = process, url, token

    def health(self) -> Dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return requests.get(self.url + "/health", headers=headers, timeout=10).json()

    def wait_for(self, predicate, timeout_s: float = 30.0) -> Dict[str, Any]:
        """Poll /health until ``predicate(health)`` holds (the deadline only stops a broken test from hanging)."""
        deadline = time.monotonic() + timeout_s
        while True:
            health = self.health()
            if predicate(health) or time.monotonic() > deadline:
                return health
            time.sleep(0.05)


@contextlib.contextmanager
def env_service(
    *options: str, token: Optional[str] = None, env: Optional[Dict[str, str]] = None
) -> Iterator[ServiceProcess]:
    """``skyrl-gym serve-env --port 0 --import <this module> OPTIONS``; yields its URL once it listens."""
    command = [
        sys.executable,
        "-m",
        "skyrl_gym.cli",
        "serve-env",
        "--port",
        "0",
        "--import",
        "tests.skyrl_gym.remote.service_support",
        *options,
    ]
    if token:
        command += ["--token", token]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env} if env else None,
    )
    try:
        line = process.stdout.readline()
        if not line.startswith("env service listening on "):
            process.kill()
            raise RuntimeError(f"serve-env did not start: {line!r} {process.stderr.read()[-2000:]}")
        running = ServiceProcess(process, line.split()[4], token)
        running.listening_line = line.strip()
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


class CounterEnv(BaseTextEnv):
    """A test env: counts the steps it applies; 'sleep:S' sleeps S seconds, 'wait:PATH' blocks until PATH
    exists (20 s at most), 'raise' raises, 'good' earns 1."""

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.max_turns = int((extras or {}).get("max_turns", 3))
        self.applied: List[str] = []

    def step(self, action: str) -> StepOutput:
        if action == "raise":
            raise ValueError("asked to raise")
        if isinstance(action, str) and action.startswith("sleep:"):
            time.sleep(float(action.split(":", 1)[1]))
        if isinstance(action, str) and action.startswith("wait:"):  # blocks its thread until the file exists
            deadline = time.monotonic() + 20
            while not Path(action.split(":", 1)[1]).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        self.turns += 1
        self.applied.append(action)
        done = self.turns >= self.max_turns
        observations = [] if done else [{"role": "user", "content": f"turn {self.turns} done"}]
        metadata: Dict[str, Any] = {"applied_steps": len(self.applied)}
        if action == "odd values":  # what envs put in metadata that JSON has no type for
            metadata.update(tags={"only"}, pair=(1, 2), raw=b"bytes", ratio=float("nan"))
        return StepOutput(
            observations=observations, reward=1.0 if action == "good" else 0.0, done=done, metadata=metadata
        )

    def get_metrics(self) -> Dict[str, Any]:
        return {"applied_steps": len(self.applied)}


register(COUNTER_ID, entry_point=CounterEnv, description="A test env of the env service.", provider="tests")

# The text2sql env under an id of the operator's own (an --import): it needs the operator's data folder too.
register("test_service/sql_alias", entry_point="skyrl_gym.envs.sql.env:SQLEnv", description="text2sql again.",
         provider="tests")
