"""One training micro-batch (forward, backward, optimizer step) in each layout the bundled trainer can run.

    python bench/packing_layouts.py                                   # SmolLM2-135M, 1 prompt x 8 answers of 256
    python bench/packing_layouts.py --prompts 2 --samples 8 --answer-tokens 512 --device cuda \
        --model random-qwen2.5-1.5b

Layouts: ``padded`` (a row per answer), ``shared_prefix`` with each prompt's answers in one segment (one long row
per prompt), and ``shared_prefix`` as the trainer runs it, cutting a prompt's answers into shorter segments
where one long row would cost more in attention than the repeated prompt costs in tokens
(``packing.break_even_keys``).

Token ids are random (the layouts' costs do not depend on them); every answer has its full length. Random-weight
shapes take their tokenizer from ``SKYRL_GYM_TINY_MODEL`` where it is set (else the embedded SmolLM2's). Prints
seconds per micro-batch (median of ``--repeats`` after one warm-up), the tokens each layout runs and its row shape,
and the peak of live memory in a training step as torch's memory tracker counts it (``MemTracker``: parameters,
gradients, optimizer state, activations; the same figure on any device), with CUDA's own peak on a GPU.
``--as-transformers`` runs the model as transformers does, for an A/B of what the trainer changes: its own SDPA,
which copies grouped key/value heads per query head under a mask (the trainer's ``skyrl_gym_sdpa``,
``hf_attention``, reads them in place), every MLP activation kept (``workers/activations.py``) and the logits made
(``workers/log_probs.py`` takes the log-probs from the LM head); ``--logits`` changes only the last. On the CPU,
``--recompute --bf16`` runs the step as on a GPU (log-prob chunks recomputed in the backward pass, bf16 autocast),
so that its memory figures stand for a GPU's:

    python bench/packing_layouts.py --model random-qwen2.5-0.5b --prompts 4 --samples 8 --prompt-tokens 40 \
        --answer-tokens 128 --layouts trainer --recompute --bf16 [--logits]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the trainer's entry point sets it (before torch loads)


def main(argv: object = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a model name or folder, tiny, or "
                        "random-qwen2.5-0.5b / random-qwen2.5-1.5b (those shapes, random weights)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--prompts", type=int, default=1)
    parser.add_argument("--samples", type=int, default=8, help="answers per prompt")
    parser.add_argument("--prompt-tokens", type=int, default=80)
    parser.add_argument("--answer-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--as-transformers", action="store_true",
                        help="transformers' own SDPA, MLPs and logits, not the trainer's attention, recomputed "
                        "activations and log-probs from the LM head")
    parser.add_argument("--logits", action="store_true", help="the model's logits, then log-probs over them, not "
                        "log-probs from the LM head (workers/log_probs.py): an A/B of the head alone")
    parser.add_argument("--recompute", action="store_true", help="recompute the log-prob chunks in the backward "
                        "pass on the CPU too, as on a GPU: the CPU's memory figures then stand for a GPU's")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast on the CPU too, as on a GPU")
    parser.add_argument("--layouts", choices=("all", "trainer"), default="all",
                        help="trainer: only the layout the trainer runs (shared prefix, cut where it pays)")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    from skygym_adapters.models import bench_model_folder
    from skygym_train.algorithms import POLICY_LOSSES
    from skygym_train.config.schema import AlgorithmConfig, OptimizerConfig
    from skygym_train.workers.activations import recompute_gated_activations
    from skygym_train.workers.batch import build_batch
    from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec
    from skygym_train.workers.packing import layout

    folder = bench_model_folder(args.model, tokenizer_from=os.environ.get("SKYRL_GYM_TINY_MODEL"))
    generator = torch.Generator().manual_seed(0)
    prompts, answers = [], []
    for _ in range(args.prompts):
        prompt = torch.randint(100, 10_000, (args.prompt_tokens,), generator=generator).tolist()
        for _ in range(args.samples):
            prompts.append(prompt)
            answers.append(torch.randint(100, 10_000, (args.answer_tokens,), generator=generator).tolist())
    batch = build_batch(prompts, answers, [[1] * len(a) for a in answers], pad_token_id=0)
    rows = batch.size
    batch = batch.with_tensors(advantages=torch.linspace(-1, 1, rows)[:, None].expand(-1, batch.response_length)
                               .contiguous())
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    worker = TrainingWorker(WorkerSpec(role="policy", model_path=folder, optimizer=OptimizerConfig(lr=1e-6),
                                       micro_train_batch_size=rows, micro_forward_batch_size=rows,
                                       bf16=True if args.bf16 else None))
    worker.load_model()
    if args.as_transformers:
        worker.model.set_attn_implementation("sdpa")
        recompute_gated_activations(worker.model, enabled=False)
    if args.as_transformers or args.logits:
        worker._log_prob_head = None  # the head stays a plain linear layer: logits (B, T, vocabulary) come out
    if args.recompute:
        from skygym_train.workers import log_probs

        log_probs.recomputes_on = lambda device: True
    worker.configure_algorithm(AlgorithmConfig(), POLICY_LOSSES.get("regular"), 1.0)
    break_even = worker._attention_break_even
    print(f"{args.model} on {name}: {args.prompts} prompt(s) of {args.prompt_tokens} tokens x {args.samples} "
          f"answers of {args.answer_tokens}, one micro-batch of {rows} rows, attention "
          f"{worker.model.config._attn_implementation} in {worker._attention_dtype()}; break-even "
          f"{break_even:,.0f} keys a query (packing.break_even_keys)", flush=True)
    layouts = [("padded", "padded", None), ("shared prefix, whole segments", "shared_prefix", None),
               ("shared prefix, as the trainer cuts it", "shared_prefix", break_even)]
    head = "the model's logits" if worker._log_prob_head is None else "log-probs from the LM head"
    print(f"log-probs: {head}{', chunks recomputed in the backward pass' if args.recompute else ''}", flush=True)
    for label, mode, cut in layouts[-1:] if args.layouts == "trainer" else layouts:
        worker.layout, worker._attention_break_even = mode, cut
        shape = tuple(layout(mode, batch.tensors, batch.prompt_length, cut).model_inputs(torch.device("cpu"))
                      ["input_ids"].shape)
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(args.repeats + 1):
            start = time.perf_counter()
            worker.train_step(batch)
            if args.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        tokens = shape[0] * shape[1]
        peak = peak_bytes(worker, batch)  # after the timed steps: the optimizer's state exists in every layout's
        allocated = (f", CUDA's peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if args.device == "cuda"
                     else "")
        print(f"{label:40s} {statistics.median(times[1:]):7.2f} s   rows x columns {shape[0]} x {shape[1]}"
              f" ({tokens:,} tokens), peak {peak / 2**30:.2f} GiB{allocated}", flush=True)
    return 0


def peak_bytes(worker: object, batch: object) -> int:
    """The peak of live memory in one training step (a step of its own, not timed), as torch's memory tracker counts
    it on any device: parameters, gradients, optimizer state, activations and temporaries."""
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(worker.model, worker.optimizer)
    with tracker:
        worker.train_step(batch)
    return sum(snapshot.get("Total", 0) for snapshot in tracker.get_tracker_snapshot("peak").values())


if __name__ == "__main__":
    raise SystemExit(main())
