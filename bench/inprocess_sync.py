"""In-process weight sync: the policy worker and an HF engine in one process (``trainer.use_ray=false``).

    python bench/inprocess_sync.py                                   # SmolLM2-135M, CPU, a bf16 engine
    python bench/inprocess_sync.py --engine-dtype float32            # the engine reads the policy's tensors
    python bench/inprocess_sync.py --policy-bf16                     # the engine lends the policy its weights
    python bench/inprocess_sync.py --device cuda --model random-qwen2.5-0.5b   # on a GPU

Sets the trainer up (no training step, which chooses the transport) and times ``--syncs`` calls of its weight
sync. With the engine in the policy's dtype the engine shares the policy's tensors and a sync moves nothing. A
bf16 engine beside a policy under bf16 autocast (the GPU default) lends the policy its weights: the policy writes
them after each optimizer step, cast on the way, and the sync moves nothing; that write is timed too. Otherwise
(fp32 compute beside a bf16 engine, the CPU default) each sync copies every weight into the engine, cast on the
way. Prints the transport, MiB per sync and the median seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model name or folder, tiny "
                        "(a tiny random Qwen2), or random-qwen2.5-0.5b")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--engine-dtype", default="bfloat16", help="generator.model_dtype (auto, float32,"
                        " ...)")
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--policy-bf16", action="store_true", help="the policy under bf16 autocast on the CPU too "
                        "(trainer.bf16=true; on a GPU it is the default): a bf16 engine then lends it its weights")
    parser.add_argument("--tokenizer-from", default=os.environ.get("SKYRL_GYM_TINY_MODEL"),
                        help="the tokenizer of random-shape models (default: SKYRL_GYM_TINY_MODEL, else "
                        "SmolLM2)")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    from skygym_adapters.models import bench_model_folder
    from skygym_train.config import load_config
    from skygym_train.trainer import PPOTrainer
    from tests.skygym_train.toy_envs import register_toy_env, toy_overrides, toy_rows

    model = bench_model_folder(args.model, tokenizer_from=args.tokenizer_from)
    register_toy_env()
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        from skyrl_gym.data import write_jsonl

        data = Path(tmp) / "train.jsonl"
        write_jsonl(toy_rows(8), data)
        engine = {"generator.model_dtype": args.engine_dtype,
                  "trainer.bf16": str(args.policy_bf16 or args.device == "cuda").lower()}
        cfg = load_config(toy_overrides(Path(model), data, Path(tmp), **engine))
        with PPOTrainer(cfg) as trainer:
            trainer.setup()  # chooses the transport
            trainer.sync_weights()  # a first sync, as a warm-up
            seconds = []
            for _ in range(args.syncs):
                if args.device == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                trainer.sync_weights()
                if args.device == "cuda":
                    torch.cuda.synchronize()
                seconds.append(time.perf_counter() - start)
            sync = trainer._weight_sync
            writes = []
            for _ in range(args.syncs if sync.lent else 0):  # what the policy does after each optimizer step
                if args.device == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                trainer.policy.worker.write_borrowed_weights()
                if args.device == "cuda":
                    torch.cuda.synchronize()
                writes.append(time.perf_counter() - start)
            written = (f"; the policy's write after each optimizer step: median {statistics.median(writes):.4f} s"
                       if writes else "")
            print(f"device {args.device}, model {args.model}, engine dtype {args.engine_dtype}: "
                  f"{sync.describe()}; {sync.bytes_last / 2**20:.0f} MiB per sync, median "
                  f"{statistics.median(seconds):.4f} s over {args.syncs} (min {min(seconds):.4f}){written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
