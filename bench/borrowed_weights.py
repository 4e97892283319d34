"""Peak memory and time of one training micro-batch under bf16 autocast, two ways: the linear layers reading
autocast's casts of the fp32 parameters (the trainer before), and reading an HF engine's bf16 copy of them
(``skygym_train/workers/borrowed_weights.py``: the trainer on one GPU beside an engine in its process).

    python bench/borrowed_weights.py                                     # a tiny random Qwen2, CPU
    python bench/borrowed_weights.py --model random-qwen2.5-0.5b --rows 4 --tokens 128
    python bench/borrowed_weights.py --device cuda --model random-qwen2.5-1.5b --rows 16 --tokens 640

The engine's copy exists either way (the engine decodes with it). Prints, for each way, the bf16 casts of the
parameters made in the step and the most of them alive at once (``borrowed_weights.WeightCasts``: autocast keeps
them to the end of the forward pass, autograd until the backward pass has used them) and the time of forward +
backward; on a GPU also CUDA's peak above
what existed before (the parameters and the engine's copy), whose difference between the two ways is the bf16
copy autocast no longer makes. The gradients agree bitwise
(``tests/skygym_train/workers/test_borrowed_weights.py``). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: object = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny, random-qwen2.5-0.5b, random-qwen2.5-1.5b or a folder")
    parser.add_argument("--rows", type=int, default=8, help="sequences in the micro-batch")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per sequence")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per way (the best is reported)")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="recompute each decoder layer in the "
                        "backward pass (trainer.gradient_checkpointing, the trainer's default; the GPU benches "
                        "beside TRL turn it off in both)")
    parser.add_argument("--tokenizer-from", default=os.environ.get("SKYRL_GYM_TINY_MODEL"),
                        help="the tokenizer of random-shape models (default: SKYRL_GYM_TINY_MODEL, else SmolLM2)")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from skygym_adapters.models import bench_model_folder
    from skygym_train.workers.borrowed_weights import BorrowedWeights, WeightCasts

    device = torch.device(args.device)
    folder = bench_model_folder(args.model, tokenizer_from=args.tokenizer_from)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").to(device)
    model.train()
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    engine = {name: torch.empty_like(p, dtype=torch.bfloat16)
              for name, p in model.named_parameters(remove_duplicate=False)}
    if getattr(model.config, "tie_word_embeddings", False):
        engine["lm_head.weight"] = engine["model.embed_tokens.weight"]
    borrowed = BorrowedWeights.check(model, engine, torch.bfloat16)
    borrowed.write()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, model.config.vocab_size, (args.rows, args.tokens), generator=generator).to(device)
    params = sum(p.numel() for p in model.parameters())
    copy = sum(t.numel() * t.element_size() for t in {t.data_ptr(): t for t in engine.values()}.values())
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU"
    recompute = ", gradient checkpointing" if args.gradient_checkpointing else ""
    print(f"{name}: {args.model} ({params / 1e6:.0f}M parameters), {args.rows} x {args.tokens} tokens{recompute}; "
          f"the engine's bf16 copy {copy / 2**20:.0f} MiB", flush=True)

    def step(use_engine_copy: bool) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            kwargs = {"input_ids": input_ids, "use_cache": False, "logits_to_keep": 1}
            out = borrowed.call(model, **kwargs) if use_engine_copy else model(**kwargs)
            # the last position only: the head's logits are bench/log_prob_memory.py's subject, not this one's
            loss = out.logits.float().logsumexp(-1).mean()
        loss.backward()

    for label, use_engine_copy in (("autocast's casts", False), ("the engine's bf16 copy", True)):
        seconds = []
        for _ in range(args.repeats):  # timed and CUDA's peak, without the counting below (it slows every op)
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            start = time.perf_counter()
            step(use_engine_copy)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        cuda = (f", CUDA's peak {(torch.cuda.max_memory_allocated() - base) / 2**30:.2f} GiB above before"
                if device.type == "cuda" else "")
        model.zero_grad(set_to_none=True)
        with WeightCasts(model.parameters()) as casts:
            step(use_engine_copy)
        print(f"{label:24s} {casts.casts:4d} casts of parameters, {casts.bytes / 2**20:6.0f} MiB, at most "
              f"{casts.peak_bytes / 2**20:6.0f} MiB alive at once{cuda}"
              f"  ({min(seconds):.3f} s forward + backward, best of {args.repeats})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
