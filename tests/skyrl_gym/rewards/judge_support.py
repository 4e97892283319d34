"""The judge tests' judge server, run as a process of its own (``judge_server.py``), and their dataset row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import requests

HERE = Path(__file__).resolve().parent


class JudgeServer:
    """``judge_server.py`` on a free port of 127.0.0.1; ``token`` guards it, ``redirect_to`` is where its
    ``redirect-judge`` model sends clients."""

    def __init__(self, token: str = "", redirect_to: str = "") -> None:
        command = [sys.executable, str(HERE / "judge_server.py"), "--port", "0"]
        command += (["--token", token] if token else []) + (["--redirect-to", redirect_to] if redirect_to else [])
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        port = self.process.stdout.readline().strip()  # the server prints its port once it listens
        assert port.isdigit(), f"the judge server did not start (printed {port!r})"
        self.url = f"http://127.0.0.1:{port}"
        self.token = token

    def stats(self) -> Dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return requests.get(self.url + "/stats", headers=headers, timeout=10).json()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process.stdout.close()


def gsm8k_row(truth: str = "72", **reward_spec: Any) -> Dict[str, Any]:
    return {"reward_spec": {"method": "judge", "ground_truth": truth, **reward_spec}}
