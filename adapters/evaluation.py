"""Evaluation: roll out dataset rows with an engine, summarise (reward, pass@k, turns, lengths, stop reasons,
env metrics, speed), and write the trajectories with their token ids as JSONL. Used by ``skyrl-gym eval``."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from skygym_adapters.engines.base import EngineError
from skygym_adapters.rollout import RolloutConfig, RolloutGenerator, Trajectory, pass_at_k, rollout_metrics
from skygym_adapters.rollout.loop import ENGINE_ERROR_PREFIX


@dataclass
class EvalResult:
    trajectories: List[Trajectory]
    summary: Dict[str, Any]
    seconds: float


def summarize(trajectories: Sequence[Trajectory], seconds: float, success_threshold: float = 1.0) -> Dict[str, Any]:
    """Headline figures over all trajectories (pass@k per prompt, averaged), plus per-env metrics."""
    if not trajectories:
        return {"trajectories": 0}
    by_prompt: Dict[str, List[bool]] = {}
    for t in trajectories:
        by_prompt.setdefault(t.trajectory_id["instance_id"], []).append(t.total_reward >= success_threshold)
    k = min(len(v) for v in by_prompt.values())
    generated = sum(sum(t.response_loss_mask()) for t in trajectories if t.error is None)
    metrics = rollout_metrics(trajectories, success_threshold)
    summary: Dict[str, Any] = {
        "prompts": len(by_prompt),
        "samples_per_prompt": k,
        "trajectories": len(trajectories),
        "mean_reward": sum(t.total_reward for t in trajectories) / len(trajectories),
        "pass@1": sum(pass_at_k(len(v), sum(v), 1) for v in by_prompt.values()) / len(by_prompt),
        f"pass@{k}": sum(pass_at_k(len(v), sum(v), k) for v in by_prompt.values()) / len(by_prompt),
        "mean_turns": sum(t.num_turns for t in trajectories) / len(trajectories),
        "mean_response_tokens": sum(len(t.response_ids()) for t in trajectories) / len(trajectories),
        "mean_model_tokens": generated / len(trajectories),
        "stop_reasons": dict(Counter(t.stop_reason for t in trajectories)),
        "errors": sum(t.error is not None for t in trajectories),
        "seconds": seconds,
        "episodes_per_s": len(trajectories) / seconds if seconds > 0 else 0.0,
        "model_tokens_per_s": generated / seconds if seconds > 0 else 0.0,
        "env_time_share": metrics.get("timing/env_share", 0.0),
        "env_metrics": {key.split("/", 1)[1]: value for key, value in metrics.items() if key.startswith("environment/")},
    }
    if "drift/checked" in metrics:
        summary["drifted_trajectories"] = metrics["drift/num_drifted"]
    return summary


async def evaluate(
    rows: Sequence[Mapping[str, Any]],
    engine: Any,
    tokenizer: Any,
    n_samples_per_prompt: int = 1,
    config: Optional[RolloutConfig] = None,
    env_class: Optional[str] = None,
    progress: bool = True,
    on_trajectory: Optional[Callable[[int, Trajectory], None]] = None,
) -> EvalResult:
    """Run ``n_samples_per_prompt`` rollouts per row (``env_class`` overrides the rows' own) and summarise;
    ``on_trajectory`` gets each trajectory as it finishes (see :meth:`RolloutGenerator.run`).

    An engine error (a server that failed one request, a reply that is not one) ends only its own
    trajectory, which records it ("engine: ..."), so one bad answer does not cost the others. When every
    trajectory ended that way, the engine never worked (a server that is down, the wrong ``--api``): that
    is raised as the first :class:`EngineError`."""
    if env_class is not None:
        rows = [{**row, "env_class": env_class} for row in rows]
    missing = [i for i, row in enumerate(rows) if not row.get("env_class")]
    if missing:
        raise ValueError(f"rows {missing[:5]} have no env_class; pass an env (--env)")
    generator = RolloutGenerator(engine, tokenizer, config or RolloutConfig())
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows) * n_samples_per_prompt, desc="eval", unit="traj")
    start = time.perf_counter()
    try:
        trajectories = await generator.run_rows(rows, n_samples_per_prompt, progress=bar,
                                                record_engine_errors=True, on_trajectory=on_trajectory)
    finally:
        if bar is not None:
            bar.close()
        generator.close()
    seconds = time.perf_counter() - start
    engine_errors = [t.error for t in trajectories if (t.error or "").startswith(ENGINE_ERROR_PREFIX)]
    if trajectories and len(engine_errors) == len(trajectories):
        raise EngineError(engine_errors[0][len(ENGINE_ERROR_PREFIX):])
    return EvalResult(trajectories, summarize(trajectories, seconds), seconds)


def write_trajectories(trajectories: Sequence[Trajectory], path: Union[str, Path]) -> Path:
    """One JSON object per line: ids, masks, rewards, logprobs, conversation, turns, timing, drift."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for trajectory in trajectories:
            handle.write(json.dumps(trajectory.to_json_dict(), ensure_ascii=False, default=str) + "\n")
    return path


def replacing_note(path: Union[str, Path]) -> str:
    """What to add to "wrote ... to PATH" when PATH was there before the command wrote it (a default output beside
    the rows replaced whatever file of that name was there, and said nothing)."""
    if not Path(path).exists():
        return ""
    return " (replacing the file that was there; --output FILE writes elsewhere)"


__all__ = ["EvalResult", "evaluate", "replacing_note", "summarize", "write_trajectories"]
