"""Time one GRPO step of the bundled trainer, split into generation / env / training / sync, beside TRL.

Both trainers get the same model, the same rows (single-digit products from the ``multiply`` env,
scored by the same env), the same batch (8 prompts x 4 samples by default), 16 new tokens by default, lr 1e-5,
no KL term. TRL's ``GRPOTrainer`` runs first, in a subprocess, in the same run (its own virtual environment on
the CPU machine, where its transformers pin clashes; ``--trl-python``): when it exits, the GPU is all ours. The bundled trainer packs each micro-batch
(one copy of each prompt, no padding; ``skygym_train/workers/packing.py``) unless ``--no-packing``; TRL pads.

    python bench/train_step.py                         # tiny random Qwen2 (SmolLM2 tokenizer)
    python bench/train_step.py --model smollm2-135m     # the embedded SmolLM2-135M-Instruct
    python bench/train_step.py --trl-python ~/.cache/skyrl-gym/venvs/trl/bin/python --steps 6   # TRL in its own venv
    python bench/train_step.py --model smollm2-135m --no-packing   # the padded layout, for comparison
    python bench/train_step.py --model random-qwen2.5-0.5b --steps 3  # Qwen2.5-0.5B's shape, random weights

On a GPU (``--device cuda``) both trainers run on it in bf16 (fp32 master weights, bf16 compute: TRL's
``bf16=True``, the bundled trainer's mixed precision), HF generation in both; the GPU shapes are 16 prompts x
8 samples at 128 or 512 new tokens (``bench/gpu_check.sh`` runs them):

    python bench/train_step.py --device cuda --model random-qwen2.5-0.5b --prompts 16 --samples 8 \
        --new-tokens 128 --micro-batch 32
    python bench/train_step.py --device cuda --model random-qwen2.5-1.5b --prompts 16 --samples 8 \
        --new-tokens 512 --micro-batch 16

Both trainers run every row's forward and backward pass: the bundled trainer's skip of rows whose advantages are
all 0 (a group whose rewards agree; exact, ``TrainingWorker.skips_rows_without_advantage``) is off here, since a
random-weight model earns the same reward, 0, on every sample, and the skip would then time an optimizer step
against TRL's full passes. ``--skip-zero-advantage`` turns it on, as in training, and reports the rows skipped.

Prints seconds per step (mean over the steps after the first, which warms up), the split, generated tokens per
second and peak memory for both, and the ratio. ``--json PATH`` writes the same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPTS, SAMPLES, NEW_TOKENS, LR = 8, 4, 16, 1e-5


def write_rows(folder: Path) -> Path:
    from skyrl_gym.data import write_jsonl
    from skyrl_gym.envs.multiply.dataset import make_rows

    path = folder / "train.jsonl"
    write_jsonl(make_rows(256, num_digits=1, seed=0, split="train", max_turns=1), path)
    return path


def bench_skyrl(model_dir: str, rows: Path, steps: int, out: Path, bf16: bool, packing: bool = True,
                micro_batch: int = 0, skip_zero_advantage: bool = False,
                shard_one_gpu: bool = False) -> Dict[str, Any]:
    from skygym_train.config import load_config
    from skygym_train.trainer import PPOTrainer
    from skygym_train.workers.fsdp_worker import TrainingWorker

    # the worker runs in this process (trainer.use_ray=false), so the class attribute reaches it
    TrainingWorker.skips_rows_without_advantage = skip_zero_advantage

    cfg = load_config(
        [
            f"trainer.policy.model.path={model_dir}",
            f"data.train_data=[{rows}]",
            "environment.env_class=multiply",
            "environment.env_config.boxed_wrong_reward=0.1",
            "trainer.use_ray=false",
            f"trainer.train_batch_size={PROMPTS}",
            f"trainer.policy_mini_batch_size={PROMPTS}",
            f"generator.n_samples_per_prompt={SAMPLES}",
            f"trainer.micro_train_batch_size_per_gpu={micro_batch or PROMPTS * SAMPLES}",
            f"trainer.micro_forward_batch_size_per_gpu={micro_batch or PROMPTS * SAMPLES}",
            f"generator.sampling_params.max_generate_length={NEW_TOKENS}",
            f"trainer.policy.optimizer_config.lr={LR}",
            "trainer.policy.optimizer_config.weight_decay=0.0",
            "trainer.gradient_checkpointing=false",
            f"trainer.max_training_steps={steps}",
            "trainer.epochs=100",
            "trainer.eval_interval=-1",
            "trainer.eval_before_train=false",
            "trainer.ckpt_interval=-1",
            "trainer.resume_mode=none",
            "trainer.logger=jsonl",
            f"trainer.log_path={out}",
            "trainer.progress_bar=false",
            f"trainer.cpu_bf16_autocast={str(bf16).lower()}",
            # the engine in TRL's precision: auto would decode in bf16 on a CPU that has it, where TRL runs fp32
            f"generator.model_dtype={'bfloat16' if bf16 else 'float32'}",
            f"trainer.use_sample_packing={str(packing).lower()}",
            f"trainer.policy.fsdp_config.shard_one_gpu={str(shard_one_gpu).lower()}",
        ]
    )
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
        weight_sync = trainer.weight_sync_backend()
    history = [h for h in result["history"] if "timing/step" in h][1:]  # drop the warm-up step
    split = {
        key: statistics.mean(h.get(f"timing/{key}", 0.0) for h in history)
        for key in ("generate", "env", "prepare", "train", "sync", "step")
    }
    tokens = statistics.mean(h.get("policy/model_tokens", 0.0) for h in history)
    generated = statistics.mean(h.get("generate/response_length", 0.0) for h in history) * PROMPTS * SAMPLES
    peak = max(max(h.get("memory/peak_gib", 0.0), h.get("memory/policy_peak_gib", 0.0)) for h in history)
    peak_generate = max(h.get("memory/peak_generate_gib", 0.0) for h in history)
    skipped = statistics.mean(h.get("policy/skipped_rows", 0.0) for h in history)
    engine_held = {key: history[-1].get(f"memory/engine_{key}_gib", 0.0) for key in ("weights", "kv_cache")}
    return {"step_s": split["step"], "split": split, "steps": len(history), "model_tokens": tokens,
            "skipped_rows": skipped, "engine_held_gib": engine_held, "weight_sync": weight_sync,
            "generated_tokens": generated, "peak_gib": peak, "peak_generate_gib": peak_generate,
            "all": [h["timing/step"] for h in result["history"] if "timing/step" in h]}


TRL_TEMPLATE = r'''
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
model_dir, rows_path, steps, out = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
import torch
cuda = %(cuda)s
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
import skyrl_gym
from skyrl_gym.data import load_rows

rows = load_rows(rows_path)
dataset = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["reward_spec"]["ground_truth"]} for r in rows])

def multiply_env_reward(prompts, completions, ground_truth, **kwargs):
    # the same env the bundled trainer uses, one step per completion
    rewards = []
    for completion, truth in zip(completions, ground_truth):
        text = completion[0]["content"] if isinstance(completion, list) else completion
        env = skyrl_gym.make("multiply", env_config={"boxed_wrong_reward": 0.1},
                             extras={"reward_spec": {"method": "rule", "ground_truth": truth}, "max_turns": 1})
        env.init([])
        rewards.append(float(env.step(text)["reward"]))
        env.close()
    return rewards

class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self.start, self.peaks, self.lengths, self.generate = [], None, [], [], []
    def on_step_begin(self, args, state, control, **kw):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        self.start = time.perf_counter()
    def on_step_end(self, args, state, control, **kw):
        if cuda:
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - self.start)
        if cuda:
            self.peaks.append(torch.cuda.max_memory_allocated() / 2**30)
        else:  # VmHWM: this process's own peak (ru_maxrss would carry the bench process's peak across exec)
            import re
            status = open("/proc/self/status").read()
            self.peaks.append(int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 2**20)
    def on_log(self, args, state, control, logs=None, **kw):
        logs = logs or {}
        if "completions/mean_length" in logs:
            self.lengths.append(float(logs["completions/mean_length"]))
        for key, value in logs.items():  # TRL's own timing of its generation, where it logs one
            if "Time taken" in key and "generate" in key.lower():
                self.generate.append(float(value))

tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)  # fp32 master weights, as ours
config = GRPOConfig(
    output_dir=out, use_cpu=not cuda, report_to="none", max_steps=steps, learning_rate=%(lr)s,
    per_device_train_batch_size=%(micro)d, num_generations=%(samples)d, max_completion_length=%(new_tokens)d,
    # one optimizer step (and one generation) per batch, as ours
    gradient_accumulation_steps=%(accumulate)d, beta=0.0, temperature=1.0, logging_steps=1,
    save_strategy="no", weight_decay=0.0, max_grad_norm=1.0, seed=42, dataloader_num_workers=0,
    disable_tqdm=True,
    gradient_checkpointing=False,  # as in the bundled trainer's run (TRL turns it on by default)
    bf16=%(bf16)s,  # TRL's default, bf16 autocast: the bundled trainer's --bf16 (GPU: mixed precision)
)
timer = StepTimer()
trainer = GRPOTrainer(model=model, reward_funcs=multiply_env_reward, args=config, train_dataset=dataset,
                      processing_class=tokenizer, callbacks=[timer])
trainer.train()
times = timer.times[1:]
lengths = timer.lengths[1:] or timer.lengths
result = {"step_s": statistics.mean(times), "steps": len(times), "all": timer.times,
          "peak_gib": max(timer.peaks[1:] or timer.peaks),
          "generated_tokens": (statistics.mean(lengths) if lengths else 0.0) * %(batch)d}
if timer.generate[1:]:
    result["generate_s"] = statistics.mean(timer.generate[1:])
print("TRL_RESULT " + json.dumps(result))
'''


def trl_script(bf16: bool, cuda: bool = False, micro_batch: int = 0) -> str:
    batch = PROMPTS * SAMPLES
    micro = micro_batch or batch
    if batch % micro or micro % SAMPLES:
        raise ValueError(f"--micro-batch {micro} must divide the batch ({batch}) and be a multiple of the "
                         "samples")
    return TRL_TEMPLATE % {"lr": LR, "batch": batch, "samples": SAMPLES, "new_tokens": NEW_TOKENS,
                           "bf16": bf16, "cuda": cuda, "micro": micro, "accumulate": batch // micro}


def bench_trl(python: str, model_dir: str, rows: Path, steps: int, out: Path, bf16: bool,
              cuda: bool = False, micro_batch: int = 0) -> Dict[str, Any]:
    script = out / "trl_grpo_step.py"
    script.write_text(trl_script(bf16, cuda, micro_batch))
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", WANDB_DISABLED="true")
    proc = subprocess.run(
        [python, str(script), str(ROOT), model_dir, str(rows), str(steps), str(out / "trl")],
        capture_output=True, text=True, env=env,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("TRL_RESULT "):
            return json.loads(line[len("TRL_RESULT "):])
    raise RuntimeError(f"TRL run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def count_parameters(model_dir: str) -> int:
    """From the safetensors headers, without loading the weights."""
    from safetensors import safe_open

    total = 0
    for path in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                shape = f.get_slice(name).get_shape()
                count = 1
                for dim in shape:
                    count *= dim
                total += count
    return total


def default_trl_python() -> str:
    """``TRL_PYTHON``; else the test runner's TRL environment where there is one (``bash scripts/test.sh -s trl``
    makes it), else this interpreter."""
    if os.environ.get("TRL_PYTHON"):
        return os.environ["TRL_PYTHON"]
    venvs = Path(os.environ.get("SKYRL_GYM_VENVS", Path.home() / ".cache" / "skyrl-gym" / "venvs"))
    made = venvs / "trl" / "bin" / "python"
    return str(made) if made.exists() else sys.executable


def trl_missing(python: str) -> Optional[str]:
    """Why ``python`` cannot run TRL's side (``trl`` or ``datasets`` does not import), or None."""
    probe = subprocess.run([python, "-c", "import trl, datasets"], capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
    return (f"{python} cannot run TRL ({why}): pip install -e '.[trl]' in its environment, or pass --trl-python "
            "PY (`bash scripts/test.sh -s trl` makes one), or --skip-trl")


def report(name: str, result: Dict[str, Any]) -> None:
    split = result.get("split")
    generated = result.get("generated_tokens", 0.0)
    line = f"{name}: {result['step_s']:.2f} s/step"
    if generated:
        line += f", {generated / result['step_s']:.0f} generated tokens/s per step"
    if "peak_gib" in result:
        line += f", peak memory {result['peak_gib']:.2f} GiB"
    print(line, flush=True)
    held = result.get("engine_held_gib")
    if held and any(held.values()):
        print(f"  held by the engine between steps (part of the peak): its own weights {held['weights']:.2f} GiB, "
              f"KV cache {held['kv_cache']:.2f} GiB")
    if result.get("weight_sync"):
        print(f"  weight sync: {result['weight_sync']}")
    if result.get("peak_generate_gib"):
        print(f"  peak up to the end of generation: {result['peak_generate_gib']:.2f} GiB (the rest of the peak "
              "came while training)")
    if split:
        parts = ("generate", "env", "prepare", "train", "sync")
        print("  split: " + ", ".join(f"{k} {split[k]:.2f}s" for k in parts))
        print(f"  generation: {generated:.0f} tokens in {split['generate']:.2f}s = "
              f"{generated / max(split['generate'], 1e-9):.0f} tokens/s; env time is the env calls' own, "
              "summed over trajectories (it overlaps generation)")
        print(f"  tokens through the policy per training step: {result['model_tokens']:.0f} (padding "
              f"included), {result['model_tokens'] / max(split['train'], 1e-9):.0f} tokens/s in training")
        if result.get("skipped_rows"):
            print(f"  rows skipped (all-zero advantages, --skip-zero-advantage): {result['skipped_rows']:.0%}")
    elif result.get("generate_s"):
        print(f"  generation: {generated:.0f} tokens in {result['generate_s']:.2f}s = "
              f"{generated / result['generate_s']:.0f} tokens/s")


def main() -> int:
    global PROMPTS, SAMPLES, NEW_TOKENS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="'tiny' (random Qwen2, SmolLM2 tokenizer), "
                        "'random-qwen2.5-0.5b' or 'random-qwen2.5-1.5b' (those shapes, random weights, "
                        "SmolLM2 tokenizer) or a model name/folder")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu (GPUs hidden from both trainers) or cuda (both on the first GPU, bf16)")
    parser.add_argument("--steps", type=int, default=5, help="steps per trainer (the first is a warm-up)")
    parser.add_argument("--prompts", type=int, default=PROMPTS, help="prompts per step")
    parser.add_argument("--samples", type=int, default=SAMPLES, help="samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS, help="new tokens per sample at most")
    parser.add_argument("--micro-batch", type=int, default=0, help="rows per micro-batch in both trainers "
                        "(TRL: per_device_train_batch_size, with gradient accumulation up to the batch; "
                        "default: the batch)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast on CPU in both trainers (TRL's "
                        "default; always on with --device cuda)")
    parser.add_argument("--no-packing", action="store_true", help="padded micro-batches (trainer.use_sample_packing=false)")
    parser.add_argument("--trl-python", default=None, help="the Python that runs TRL (default: TRL_PYTHON, else "
                        "the test runner's trl environment where there is one, else this one)")
    parser.add_argument("--skip-trl", action="store_true", help="time the bundled trainer only")
    parser.add_argument("--skip-zero-advantage", action="store_true", help="let the bundled trainer skip the "
                        "passes of rows whose advantages are all 0, as in training (off: both trainers run every "
                        "row, like for like)")
    parser.add_argument("--shard-one-gpu", action="store_true", help="the bundled trainer wraps the policy with "
                        "FSDP2 on the one GPU too (trainer.policy.fsdp_config.shard_one_gpu): bf16 mixed precision "
                        "instead of autocast over fp32 parameters, for less activation memory (--device cuda only)")
    parser.add_argument("--tokenizer-from", default=os.environ.get("SKYRL_GYM_TINY_MODEL"),
                        help="a model folder whose tokenizer the random models take (default: "
                        "SKYRL_GYM_TINY_MODEL, else the embedded SmolLM2)")
    parser.add_argument("--json", default=None, help="write the figures to this file too")
    args = parser.parse_args()
    PROMPTS, SAMPLES, NEW_TOKENS = args.prompts, args.samples, args.new_tokens
    cuda = args.device == "cuda"
    if args.shard_one_gpu and not cuda:
        parser.error("--shard-one-gpu is a GPU setting (FSDP2's bf16 mixed precision on one GPU): add --device cuda")
    if not cuda:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch starts: both trainers stay on the CPU
    bf16 = args.bf16 or cuda

    import torch

    if cuda and not torch.cuda.is_available():
        print("--device cuda: this machine has no CUDA GPU", file=sys.stderr)
        return 2
    from skygym_adapters.models import bench_model_folder

    model_dir = bench_model_folder(args.model, tokenizer_from=args.tokenizer_from)
    figures: Dict[str, Any] = {"model": args.model, "device": args.device, "prompts": PROMPTS,
                               "samples": SAMPLES, "new_tokens": NEW_TOKENS}
    with tempfile.TemporaryDirectory(prefix="bench-train-step-") as tmp:
        out = Path(tmp)
        rows = write_rows(out)
        device = torch.cuda.get_device_name(0) if cuda else f"CPU ({os.cpu_count()} cores)"
        figures["device_name"] = device
        print(f"device: {device}; parameters: {count_parameters(model_dir) / 1e6:.0f}M", flush=True)
        print(f"model: {args.model} ({model_dir}); batch {PROMPTS} prompts x {SAMPLES} samples, "
              f"{NEW_TOKENS} new tokens, {args.steps} steps each (first one dropped)", flush=True)
        print(f"precision: {'bf16 compute, fp32 master weights' if bf16 else 'float32'} in both", flush=True)
        if args.shard_one_gpu:
            print("bundled trainer: FSDP2 on the one GPU (bf16 mixed precision, not autocast)", flush=True)
        print(f"sequence packing: {'off' if args.no_packing else 'on'}; rows with all-zero advantages "
              f"{'skipped (bundled trainer)' if args.skip_zero_advantage else 'trained by both'}", flush=True)
        # TRL first, in a process of its own: when it exits, all of its GPU memory is free for ours (the other
        # order would leave our CUDA-graph pools and caches beside TRL)
        theirs = None
        if args.skip_trl:
            print("TRL: skipped (--skip-trl)")
        else:
            t0 = time.perf_counter()
            trl_python = args.trl_python or default_trl_python()
            try:
                missing = trl_missing(trl_python)
                if missing is not None:
                    raise RuntimeError(missing)
                theirs = bench_trl(trl_python, model_dir, rows, args.steps, out, bf16, cuda, args.micro_batch)
            except RuntimeError as exc:  # still time ours (a device run is too dear to lose both), then exit 1
                print(f"TRL GRPOTrainer failed: {exc}", flush=True)
                figures["trl_error"] = str(exc)[-3000:]
            else:
                figures["trl"] = theirs
                report(f"TRL GRPOTrainer (ran {time.perf_counter() - t0:.0f}s)", theirs)
        try:
            t0 = time.perf_counter()
            ours = bench_skyrl(model_dir, rows, args.steps, out / "skyrl", bf16, packing=not args.no_packing,
                               micro_batch=args.micro_batch, skip_zero_advantage=args.skip_zero_advantage,
                               shard_one_gpu=args.shard_one_gpu)
            figures["skygym_train"] = ours
            report(f"skygym_train (ran {time.perf_counter() - t0:.0f}s)", ours)
            if theirs is not None:
                figures["speedup"] = theirs["step_s"] / ours["step_s"]
                print(f"speed-up (TRL s/step / skygym_train s/step): {figures['speedup']:.2f}x")
                if theirs.get("peak_gib"):
                    print(f"peak memory, skygym_train / TRL: {ours['peak_gib'] / theirs['peak_gib']:.2f}")
        finally:
            if args.json:
                Path(args.json).write_text(json.dumps(figures, indent=1))
    return 1 if "trl_error" in figures else 0


if __name__ == "__main__":
    raise SystemExit(main())
