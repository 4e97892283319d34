"""Memory of the log-prob step of one training micro-batch, three ways: from the LM head (the trainer's way for the
causal LMs of ``log_probs.PLAIN_HEAD_CAUSAL_LMS``), from the model's logits in chunks of 2^25 vocabulary entries (the
trainer's way for other models), and from the logits in chunks of 4096 response tokens (the trainer before the head).

    python bench/log_prob_memory.py                                  # Qwen2.5-0.5B's head, 32 answers of 128 tokens
    python bench/log_prob_memory.py --hidden 1536 --rows 16 --tokens 512   # Qwen2.5-1.5B's, 16 answers of 512
    python bench/log_prob_memory.py --device cuda

Each way runs the step forward and backward from the last hidden states (bf16, under autocast with the head's weight
in fp32, as the trainer runs a GPU step) to the gradients of the hidden states and the weight. Prints the peak of
live memory above what existed before (the hidden states, the weight), as torch's ``MemTracker`` counts it on any
device, and on a GPU CUDA's own peak; chunks are recomputed in the backward pass as on a GPU, on the CPU too. The rest
of the micro-batch (the decoder layers' activations, which are alive at the same time) is the same in every way and
not counted. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: object = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=32, help="answers in the micro-batch")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per answer")
    parser.add_argument("--hidden", type=int, default=896, help="hidden size (Qwen2.5-0.5B: 896, 1.5B: 1536)")
    parser.add_argument("--vocab", type=int, default=49152, help="vocabulary (SmolLM2's; Qwen's own is 151,936)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)

    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from skygym_train.workers import log_probs

    log_probs.recomputes_on = lambda device: True  # as on a GPU, on the CPU too
    device = torch.device(args.device)
    torch.manual_seed(0)
    B, T, H, V = args.rows, args.tokens, args.hidden, args.vocab
    weight = torch.nn.Parameter(torch.randn(V, H, device=device) * 0.02)
    targets = torch.randint(0, V, (B, T), device=device)
    input_ids = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=device), targets], dim=1)

    def from_head(hidden):
        return log_probs.head_log_probs(hidden, weight, None, targets)

    def from_logits(chunk_tokens):
        def run(hidden):
            logits = torch.nn.functional.linear(hidden, weight)
            return log_probs.response_log_probs(logits, input_ids, 1, chunk_tokens=chunk_tokens)
        return run

    ways = [("from the LM head", from_head),
            ("from the logits, chunks of 2^25 entries", from_logits(None)),
            ("from the logits, chunks of 4096 tokens", from_logits(4096))]
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU"
    print(f"{name}: {B} answers x {T} tokens, hidden {H}, vocabulary {V:,}; one (tokens, vocabulary) copy is "
          f"{B * T * V * 2 / 2**30:.2f} GiB in bf16", flush=True)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    for label, way in ways:
        hidden = torch.randn(B, T, H, device=device, dtype=torch.bfloat16, requires_grad=True)
        weight.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        tracker = MemTracker()
        tracker.track_external(weight, hidden)
        start = time.perf_counter()
        with tracker:
            with autocast:
                lp, _ = way(hidden)
            lp.sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = sum(snapshot.get("Total", 0) for snapshot in tracker.get_tracker_snapshot("peak").values())
        # what existed before the step: the hidden states and the weight (its gradient is part of the step)
        held = hidden.numel() * hidden.element_size() + weight.numel() * weight.element_size()
        cuda = (f", CUDA's peak {(torch.cuda.max_memory_allocated() - base) / 2**30:.2f} GiB above before"
                if device.type == "cuda" else "")
        print(f"{label:42s} peak {(peak - held) / 2**30:5.2f} GiB above before{cuda}  ({seconds:.2f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
