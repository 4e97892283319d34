"""Time one GRPO step of the bundled trainer, split into generation / env / training / sync, beside TRL.

Both trainers get the same model, the same rows (single-digit products from the ``multiply`` env,
scored by the same env), the same batch (8 prompts x 4 samples), 16 new tokens, lr 1e-5, no KL term.
TRL's ``GRPOTrainer`` runs in its own virtual environment (its transformers pin clashes), started by
this script as a subprocess in the same run. The bundled trainer packs each micro-batch (one copy of each
prompt, no padding; ``skygym_train/workers/packing.py``) unless ``--no-packing``; TRL pads.

    python bench/train_step.py                         # tiny random Qwen2 (SmolLM2 tokenizer)
    python bench/train_step.py --model smollm2-135m     # the embedded SmolLM2-135M-Instruct
    python bench/train_step.py --trl-python /work/.venvs/trl/bin/python --steps 6
    python bench/train_step.py --model smollm2-135m --no-packing   # the padded layout, for comparison
    python bench/train_step.py --model random-qwen2.5-0.5b --steps 3  # Qwen2.5-0.5B's shape, random weights

Prints seconds per step (mean over the steps after the first, which warms up) and the ratio.
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
from typing import Any, Dict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPTS, SAMPLES, NEW_TOKENS, LR = 8, 4, 16, 1e-5


def write_rows(folder: Path) -> Path:
    from skyrl_gym.data import write_jsonl
    from skyrl_gym.envs.multiply.dataset import make_rows

    path = folder / "train.jsonl"
    write_jsonl(make_rows(256, num_digits=1, seed=0, split="train", max_turns=1), path)
    return path


def bench_skyrl(model_dir: str, rows: Path, steps: int, out: Path, bf16: bool, packing: bool = True) -> Dict[str, Any]:
    from skygym_train.config import load_config
    from skygym_train.trainer import PPOTrainer

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
            f"trainer.micro_train_batch_size_per_gpu={PROMPTS * SAMPLES}",
            f"trainer.micro_forward_batch_size_per_gpu={PROMPTS * SAMPLES}",
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
            f"trainer.use_sample_packing={str(packing).lower()}",
        ]
    )
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
    history = [h for h in result["history"] if "timing/step" in h][1:]  # drop the warm-up step
    split = {
        key: statistics.mean(h.get(f"timing/{key}", 0.0) for h in history)
        for key in ("generate", "env", "prepare", "train", "sync", "step")
    }
    tokens = statistics.mean(h.get("policy/model_tokens", 0.0) for h in history)
    generated = statistics.mean(h.get("generate/response_length", 0.0) for h in history) * PROMPTS * SAMPLES
    return {"step_s": split["step"], "split": split, "steps": len(history), "model_tokens": tokens,
            "generated_tokens": generated}


TRL_TEMPLATE = r'''
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
model_dir, rows_path, steps, out = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
import torch
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
        self.times, self.start = [], None
    def on_step_begin(self, args, state, control, **kw):
        self.start = time.perf_counter()
    def on_step_end(self, args, state, control, **kw):
        self.times.append(time.perf_counter() - self.start)

tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
config = GRPOConfig(
    output_dir=out, use_cpu=True, report_to="none", max_steps=steps, learning_rate=%(lr)s,
    per_device_train_batch_size=%(batch)d, num_generations=%(samples)d, max_completion_length=%(new_tokens)d,
    gradient_accumulation_steps=1, beta=0.0, temperature=1.0, logging_steps=1, save_strategy="no",
    weight_decay=0.0, max_grad_norm=1.0, seed=42, dataloader_num_workers=0, disable_tqdm=True,
    gradient_checkpointing=False,  # as in the bundled trainer's run (TRL turns it on by default)
    bf16=%(bf16)s,  # TRL's default is bf16 autocast; the bundled trainer's --bf16 flag matches it
)
timer = StepTimer()
trainer = GRPOTrainer(model=model, reward_funcs=multiply_env_reward, args=config, train_dataset=dataset,
                      processing_class=tokenizer, callbacks=[timer])
trainer.train()
times = timer.times[1:]
print("TRL_RESULT " + json.dumps({"step_s": statistics.mean(times), "steps": len(times), "all": timer.times}))
'''


def trl_script(bf16: bool) -> str:
    return TRL_TEMPLATE % {"lr": LR, "batch": PROMPTS * SAMPLES, "samples": SAMPLES, "new_tokens": NEW_TOKENS, "bf16": bf16}


def bench_trl(python: str, model_dir: str, rows: Path, steps: int, out: Path, bf16: bool) -> Dict[str, Any]:
    script = out / "trl_grpo_step.py"
    script.write_text(trl_script(bf16))
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="'tiny' (random Qwen2, SmolLM2 tokenizer), 'random-qwen2.5-0.5b' "
                        "(Qwen2.5-0.5B's shape, random weights, SmolLM2 tokenizer) or a model name/folder")
    parser.add_argument("--steps", type=int, default=5, help="steps per trainer (the first is a warm-up)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast on CPU in both trainers (TRL's default)")
    parser.add_argument("--no-packing", action="store_true", help="padded micro-batches (trainer.use_sample_packing=false)")
    parser.add_argument("--trl-python", default=os.environ.get("TRL_PYTHON", "/work/.venvs/trl/bin/python"))
    args = parser.parse_args()

    from skygym_adapters.models import build_tiny_model, resolve_model

    if args.model == "tiny":
        model_dir = str(build_tiny_model())
    elif args.model == "random-qwen2.5-0.5b":
        model_dir = str(build_tiny_model(architecture="qwen2.5-0.5b"))
    else:
        model_dir = str(resolve_model(args.model).path)
    with tempfile.TemporaryDirectory(prefix="bench-train-step-") as tmp:
        out = Path(tmp)
        rows = write_rows(out)
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
        print(f"device: {device}; parameters: {count_parameters(model_dir) / 1e6:.0f}M", flush=True)
        print(f"model: {args.model} ({model_dir}); batch {PROMPTS} prompts x {SAMPLES} samples, "
              f"{NEW_TOKENS} new tokens, {args.steps} steps each (first one dropped)", flush=True)
        t0 = time.perf_counter()
        print(f"precision: {'bf16 autocast' if args.bf16 else 'float32'} in both", flush=True)
        print(f"sequence packing: {'off' if args.no_packing else 'on'}", flush=True)
        ours = bench_skyrl(model_dir, rows, args.steps, out / "skyrl", args.bf16, packing=not args.no_packing)
        print(f"skygym_train: {ours['step_s']:.2f} s/step  (ran {time.perf_counter() - t0:.0f}s)", flush=True)
        split = ours["split"]
        print("  split: " + ", ".join(f"{k} {split[k]:.2f}s" for k in ("generate", "env", "prepare", "train", "sync")))
        print("  (env time is summed inside generation; it overlaps with it)")
        print(f"  tokens through the policy per training step: {ours['model_tokens']:.0f} (padding included), "
              f"{ours['model_tokens'] / max(split['train'], 1e-9):.0f} tokens/s in training; "
              f"{ours['generated_tokens']:.0f} generated, {ours['generated_tokens'] / max(split['generate'], 1e-9):.0f} tokens/s")
        if not Path(args.trl_python).exists():
            print(f"TRL: skipped ({args.trl_python} not found; pass --trl-python)")
            return 0
        t0 = time.perf_counter()
        theirs = bench_trl(args.trl_python, model_dir, rows, args.steps, out, args.bf16)
        print(f"TRL GRPOTrainer: {theirs['step_s']:.2f} s/step  (ran {time.perf_counter() - t0:.0f}s)")
        print(f"speed-up (TRL s/step / skygym_train s/step): {theirs['step_s'] / ours['step_s']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
