"""Metric loggers (console, JSONL, TensorBoard, wandb) behind one ``Tracker``."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Protocol


class MetricLogger(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def _finite(metrics: Mapping[str, Any]) -> Dict[str, float]:
    out = {}
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


class ConsoleLogger:
    KEYS = ("reward/mean", "eval/reward", "policy/loss", "policy/kl", "policy/entropy", "policy/grad_norm")

    def __init__(self, stream: Any = None):
        self.stream = stream or sys.stderr

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        shown = [f"{k}={metrics[k]:.3f}" for k in self.KEYS if k in metrics]
        timing = [f"{k.split('/', 1)[1]}={metrics[k]:.1f}s" for k in sorted(metrics) if k.startswith("timing/")]
        line = f"[step {step}] " + " ".join(shown + timing)
        if metrics.get("policy/trained_group_fraction", 1) == 0:  # no policy/* figures: say why
            line += " (no update: each prompt's samples all got one reward)"
        # tqdm.write puts the line above any progress bar on the same stream instead of through it.
        from tqdm.auto import tqdm

        tqdm.write(line, file=self.stream)
        self.stream.flush()

    def close(self) -> None:
        pass


class JsonlLogger:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("a", encoding="utf-8")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._file.write(json.dumps({"step": step, "time": time.time(), **metrics}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardLogger:
    def __init__(self, log_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """wandb; offline (files only, no network) unless WANDB_MODE or an API key says otherwise."""

    def __init__(self, project: str, run_name: str, log_dir: Path, config: Optional[Dict[str, Any]] = None):
        import wandb

        if "WANDB_MODE" not in os.environ and not os.environ.get("WANDB_API_KEY"):
            os.environ["WANDB_MODE"] = "offline"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=project, name=run_name, dir=str(log_dir), config=config or {}, reinit=True)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class Tracker:
    """Sends each step's metrics to every configured logger and keeps the history for plots."""

    def __init__(
        self,
        names: List[str],
        *,
        project: str,
        run_name: str,
        log_dir: Path,
        config: Optional[Dict[str, Any]] = None,
        console_stream: Any = None,
    ):
        self.log_dir = log_dir
        self.loggers: List[MetricLogger] = []
        self.history: List[Dict[str, float]] = []
        for name in names:
            if name == "console":
                self.loggers.append(ConsoleLogger(console_stream))
            elif name == "jsonl":
                self.loggers.append(JsonlLogger(log_dir / "metrics.jsonl"))
            elif name == "tensorboard":
                self.loggers.append(TensorBoardLogger(log_dir / "tensorboard"))
            elif name == "wandb":
                self.loggers.append(WandbLogger(project, run_name, log_dir, config))
            else:
                raise ValueError(f"unknown logger {name!r}")

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        clean = _finite(metrics)
        self.history.append({"step": float(step), **clean})
        for logger in self.loggers:
            logger.log(clean, step)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def plot_reward_curve(history: List[Mapping[str, float]], out_path: Path, title: str = "reward per step") -> Path:
    """A PNG of the mean training reward per step (and eval reward where measured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(h["step"], h["reward/mean"]) for h in history if "reward/mean" in h]
    evals = [(h["step"], h["eval/reward"]) for h in history if "eval/reward" in h]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot([s for s, _ in train], [r for _, r in train], label="train reward (mean)", marker=".")
    if evals:  # evaluations are points in time (often only before and after): markers, no joining line
        ax.plot([s for s, _ in evals], [r for _, r in evals], label="held-out eval reward", marker="D", markersize=8,
                linestyle="none")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path


class PeakMemory:
    """The most memory this process held over a span (a training step): ``torch.cuda.max_memory_allocated`` on
    ``device`` when it is a GPU (since the span started, with ``reset``; else since the last reset), else the
    process's peak resident set (the high-water mark since it started: the OS keeps no per-span peak)."""

    def __init__(self, device: Any, reset: bool = True) -> None:
        import torch

        self.device = torch.device(device)
        if self.device.type == "cuda" and reset:
            torch.cuda.reset_peak_memory_stats(self.device)

    def gib(self) -> float:
        import torch

        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**30
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
