"""HF engine decode throughput: generated tokens/s at batch 8, 32 and 128, beside transformers' ``model.generate``.

    python bench/engine_decode.py                                  # the embedded model, CPU (or CUDA when present)
    python bench/engine_decode.py --device cuda --dtype bfloat16 --tokens 512
    python bench/engine_decode.py --batches 8,32 --tokens 256 --baseline none
    python bench/engine_decode.py --model random-qwen2.5-0.5b --compile --engine-attention sdpa   # A/B of the
                                                                  # engine's grouped decode attention

Every row decodes its whole budget (EOS is ignored on both sides), from random prompts of ``--prompt-len`` tokens,
sampled at temperature 1 with log-probs (the trainer's settings). The engine's figure includes everything a caller
waits for: queueing, prefill, sampling on the device, stop checks and handing the rows back; the baseline is
``model.generate(do_sample=True, min_new_tokens=max_new_tokens)`` on the same prompts, without log-probs. Figures are
printed, never asserted; on a shared CPU the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the trainer's entry point sets it (before torch loads)


def engine_tokens_per_s(engine: Any, prompts: List[List[int]], tokens: int) -> float:
    params = {"max_generate_length": tokens, "temperature": 1.0, "logprobs": True}
    start = time.perf_counter()
    output = asyncio.run(engine.generate(prompts, params))
    seconds = time.perf_counter() - start
    generated = sum(len(ids) for ids in output["response_ids"])
    assert generated == len(prompts) * tokens, "every row must decode its whole budget"
    return generated / seconds


def generate_tokens_per_s(model: Any, prompts: List[List[int]], tokens: int, pad_id: int) -> float:
    import torch

    ids = torch.tensor(prompts, device=model.device)  # equal lengths: no padding needed
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                             top_p=1.0, top_k=0, max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=pad_id)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return (out.shape[1] - ids.shape[1]) * len(prompts) / seconds


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a model folder, hub id or embedded name, tiny, or "
                        "random-qwen2.5-0.5b / random-qwen2.5-1.5b (those shapes, random weights)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", default=None,
                        help="float32, bfloat16, ... (default: bfloat16 on CUDA, else float32)")
    parser.add_argument("--batches", default="8,32,128", help="comma-separated batch sizes")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per row")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--baseline", choices=["generate", "none"], default="generate")
    parser.add_argument("--engine-attention", choices=["grouped", "sdpa"], default="grouped",
                        help="grouped: the engine's decode attention (grouped key/value heads read in place); sdpa: "
                        "transformers' own, which copies them to every query head (for an A/B)")
    parser.add_argument("--compile", action="store_true", help="compile the engine's decode step on any device "
                        "(default: on CUDA only)")
    args = parser.parse_args(argv)

    import torch

    from skygym_adapters.engines.hf import HFEngine
    from skygym_adapters.models import bench_model_folder

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    batches = [int(b) for b in args.batches.split(",")]
    folder = bench_model_folder(args.model, tokenizer_from=os.environ.get("SKYRL_GYM_TINY_MODEL"))
    engine = HFEngine(folder, device=device, dtype=args.dtype, max_batch_size=max(batches),
                      compile_decode=True if args.compile else None)
    engine.eos_token_ids = frozenset()  # every row decodes its whole budget
    engine_attention = engine.model.config._attn_implementation
    # the model's own attention, as a user of model.generate has it: "sdpa" where the engine switched it
    model_attention = "sdpa" if engine.grouped_attention else engine_attention
    if args.engine_attention == "sdpa":
        engine.model.set_attn_implementation(engine_attention := model_attention)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU, {torch.get_num_threads()} threads"
    print(f"model {args.model} ({engine.weight_dtype}) on {name}; {args.tokens} new tokens, "
          f"prompts of {args.prompt_len}; engine attention {engine_attention}"
          f"{', compiled decode step' if engine.compile_decode else ''}", flush=True)
    generator = torch.Generator().manual_seed(0)
    vocab = engine.model.get_input_embeddings().weight.shape[0]
    engine_tokens_per_s(engine, [[1, 2, 3]], 4)  # warm-up (lazy initialisation, kernels)
    rows: List[Dict[str, Any]] = []
    for batch in batches:
        prompts = torch.randint(100, vocab, (batch, args.prompt_len), generator=generator).tolist()
        ours = engine_tokens_per_s(engine, prompts, args.tokens)
        theirs = float("nan")
        if args.baseline == "generate":
            engine.model.set_attn_implementation(model_attention)
            theirs = generate_tokens_per_s(engine.model, prompts, args.tokens, engine.pad_token_id)
            engine.model.set_attn_implementation(engine_attention)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        rows.append({"batch": batch, "engine": ours, "generate": theirs, "load": load})
        print(f"batch {batch:4d}: HFEngine {ours:8.1f} tok/s   model.generate {theirs:8.1f} tok/s   "
              f"ratio {ours / theirs:5.2f}x   (load average {load:.2f})", flush=True)
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
