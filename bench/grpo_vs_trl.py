"""GRPO steps of the bundled trainer beside TRL's GRPOTrainer, alternated step by step in one run.

Both sides get the same model (the embedded SmolLM2-135M-Instruct by default), the same rows (single-digit
products from the ``multiply`` env, scored by that env: 1.0 for the right boxed number, 0.1 for a boxed wrong
one), 4 prompts x 4 samples, at most 32 new tokens, temperature 1.0, AdamW lr 1e-5 without weight decay,
gradient clipping at 1.0, fp32, no KL term, no gradient checkpointing.

Each side runs as a subprocess in its own virtual environment (TRL pins a transformers that the trainer's
extras do not share; see ``scripts/noxfile.py``'s ``trl`` session) and is driven one step at a time over its
stdin: while one side steps, the other is blocked on its pipe, so both see the same machine load. The order
alternates (ours-TRL, TRL-ours, ...). The first ``--warmup`` steps of each side are dropped.

    V=/root/.cache/skyrl-gym/venvs/core/bin
    $V/python bench/grpo_vs_trl.py                       # Ray workers (the default trainer.use_ray=true)
    $V/python bench/grpo_vs_trl.py --no-ray              # the in-process path (trainer.use_ray=false)
    $V/python bench/grpo_vs_trl.py --steps 6 --trl-python /root/.cache/skyrl-gym/venvs/trl/bin/python
    $V/python bench/grpo_vs_trl.py --override generator.weight_sync_backend=gloo   # any trainer key
    git worktree add /tmp/base <older commit>
    $V/python bench/grpo_vs_trl.py --baseline /tmp/base   # a third side: the trainer of that checkout (before/after)

Prints per-step medians (seconds, and the bundled trainer's split into rollout / train / sync), the time to
the first step of each side, the step ratio (TRL s/step over ours) and the per-token ratio (seconds per
generated token, TRL over ours), plus the machine's load average before and after.
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
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
PROMPTS, SAMPLES, NEW_TOKENS, LR = 4, 4, 32, 1e-5
MARK = "@@BENCH "
DEFAULT_TRL_PYTHON = "/root/.cache/skyrl-gym/venvs/trl/bin/python"


def _emit(kind: str, payload: Dict[str, Any]) -> None:
    sys.stdout.write(f"{MARK}{kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


def _cpu_seconds(pids: List[int] = ()) -> float:
    """User + system CPU seconds of this process and of ``pids`` (Ray actors on this node), all threads."""
    own = os.times()
    total = own.user + own.system
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        except OSError:
            pass
    return total


def _commands():
    """Yield each command the driver sends (one line each) until it says quit or closes the pipe."""
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            return
        yield command


# ---------------------------------------------------------------------- the bundled trainer's side
def run_ours(args: argparse.Namespace) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("skygym_train").setLevel(logging.INFO)  # set-up time, weight sync choice: into the side's log
    sys.path.insert(0, args.root or str(ROOT))
    from skygym_train.config import load_config
    from skygym_train.trainer import PPOTrainer

    overrides = [
        f"trainer.policy.model.path={args.model_dir}",
        f"data.train_data=[{args.rows}]",
        "environment.env_class=multiply",
        "environment.env_config.boxed_wrong_reward=0.1",
        f"trainer.use_ray={str(args.ray).lower()}",
        f"trainer.train_batch_size={PROMPTS}",
        f"trainer.policy_mini_batch_size={PROMPTS}",
        f"generator.n_samples_per_prompt={SAMPLES}",
        f"trainer.micro_train_batch_size_per_gpu={PROMPTS * SAMPLES}",
        f"trainer.micro_forward_batch_size_per_gpu={PROMPTS * SAMPLES}",
        f"generator.sampling_params.max_generate_length={NEW_TOKENS}",
        "generator.sampling_params.temperature=1.0",
        "generator.model_dtype=float32",  # as TRL generates here (auto would decode in bf16 on a CPU that has it)
        f"trainer.policy.optimizer_config.lr={LR}",
        "trainer.policy.optimizer_config.weight_decay=0.0",
        "trainer.policy.optimizer_config.max_grad_norm=1.0",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.algorithm.use_kl_in_reward=false",
        "trainer.gradient_checkpointing=false",
        f"trainer.max_training_steps={args.total_steps}",
        "trainer.epochs=100",
        "trainer.eval_interval=-1",
        "trainer.eval_before_train=false",
        "trainer.ckpt_interval=-1",
        "trainer.resume_mode=none",
        "trainer.logger=jsonl",
        f"trainer.log_path={args.out}",
        "trainer.progress_bar=false",
        *args.override,
    ]
    cfg = load_config(overrides)
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        _emit("READY", {"setup_s": getattr(trainer, "setup_seconds", None)})
        actor_pids: List[int] = []
        for actor in getattr(trainer.policy, "actors", []):  # Ray workers: their CPU time counts too
            import ray

            actor_pids.append(ray.get(actor.__ray_call__.remote(lambda self: os.getpid())))
        for _ in _commands():
            cpu = _cpu_seconds(actor_pids)
            metrics = trainer.train_step()
            cpu = _cpu_seconds(actor_pids) - cpu
            generated = metrics.get("generate/response_length", 0.0) * PROMPTS * SAMPLES
            _emit("STEP", {
                "step_s": metrics["timing/step"],
                "rollout_s": metrics.get("timing/generate", 0.0),
                "train_s": metrics.get("timing/train", 0.0),
                "sync_s": metrics.get("timing/sync", 0.0),
                "prepare_s": metrics.get("timing/prepare", 0.0),
                "generated_tokens": generated,
                "reward": metrics.get("reward/mean"),
                "sync_bytes": metrics.get("weight_sync/bytes"),
                "weight_sync": getattr(trainer, "weight_sync_backend", lambda: None)(),
                "to_first_step_s": metrics.get("timing/to_first_step"),
                "cpu_s": cpu,
            })


# ---------------------------------------------------------------------- TRL's side
def run_trl(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))  # skyrl_gym (the env that scores), importable from the checkout
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import skyrl_gym
    from skyrl_gym.data import load_rows

    rows = load_rows(args.rows)
    dataset = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["reward_spec"]["ground_truth"]} for r in rows])

    def multiply_env_reward(prompts, completions, ground_truth, **kwargs):
        rewards = []
        for completion, truth in zip(completions, ground_truth):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            env = skyrl_gym.make("multiply", env_config={"boxed_wrong_reward": 0.1},
                                 extras={"reward_spec": {"method": "rule", "ground_truth": truth}, "max_turns": 1})
            env.init([])
            rewards.append(float(env.step(text)["reward"]))
            env.close()
        return rewards

    state: Dict[str, Any] = {"rollout": 0.0}

    class Driven(TrainerCallback):
        """Blocks before each step until the driver says ``step``; reports the step when it ends."""

        def __init__(self) -> None:
            self.ready = False
            self.start = 0.0
            self.commands = _commands()

        def on_step_begin(self, args_, state_, control, **kw):
            if not self.ready:
                self.ready = True
                _emit("READY", {"setup_s": time.perf_counter() - state["t0"]})
            if next(self.commands, None) is None:
                sys.stdout.flush()
                os._exit(0)
            state["rollout"] = 0.0
            state["cpu"] = _cpu_seconds()
            self.start = time.perf_counter()

        def on_step_end(self, args_, state_, control, **kw):
            step_s = time.perf_counter() - self.start
            lengths = trainer._metrics["train"].get("completions/mean_length") or [0.0]
            _emit("STEP", {
                "step_s": step_s,
                "rollout_s": state["rollout"],
                "train_s": step_s - state["rollout"],
                "generated_tokens": lengths[-1] * PROMPTS * SAMPLES,
                "reward": (trainer._metrics["train"].get("reward") or [None])[-1],
                "cpu_s": _cpu_seconds() - state["cpu"],
            })

    state["t0"] = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    config = GRPOConfig(
        output_dir=str(Path(args.out) / "trl"), use_cpu=True, report_to="none", max_steps=args.total_steps + 1,
        learning_rate=LR, per_device_train_batch_size=PROMPTS * SAMPLES, num_generations=SAMPLES,
        max_completion_length=NEW_TOKENS, gradient_accumulation_steps=1, beta=0.0, temperature=1.0,
        logging_steps=1, save_strategy="no", weight_decay=0.0, max_grad_norm=1.0, lr_scheduler_type="constant", seed=42,
        dataloader_num_workers=0, disable_tqdm=True,
        gradient_checkpointing=False,  # the bundled trainer's setting here (TRL turns it on by default)
        bf16=False,  # fp32 on both sides
    )
    trainer = GRPOTrainer(model=model, reward_funcs=multiply_env_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[Driven()])
    generate_and_score = trainer._generate_and_score_completions

    def timed_generate_and_score(*a, **kw):  # rollout time: generation plus rewards, as on our side
        t0 = time.perf_counter()
        try:
            return generate_and_score(*a, **kw)
        finally:
            state["rollout"] += time.perf_counter() - t0

    trainer._generate_and_score_completions = timed_generate_and_score
    trainer.train()


# ---------------------------------------------------------------------- the driver
class Side:
    def __init__(self, name: str, python: str, argv: List[str], log: Path, env: Dict[str, str],
                 cwd: Optional[Path] = None):
        self.name = name
        self.log = log.open("w")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).resolve()), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, text=True, bufsize=1, env=env, cwd=str(cwd or ROOT),
        )
        self.ready = self._read("READY")
        self.first_step_after_s = time.perf_counter() - self.started

    def _read(self, kind: str) -> Dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                got, payload = line[len(MARK):].split(" ", 1)
                if got == kind:
                    return json.loads(payload)
            else:
                self.log.write(line)
        self.log.flush()
        raise RuntimeError(f"{self.name} side ended (exit {self.proc.wait()}); see {self.log.name}:\n"
                           + Path(self.log.name).read_text()[-3000:])

    def step(self) -> Dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return self._read("STEP")

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=120)
        except Exception:
            self.proc.kill()
        self.log.close()


def _median(rows: List[Dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


IMPORT_NAME_TO_FOLDER = {"skygym_sandboxes": "sandboxes", "skygym_adapters": "adapters",
                         "skygym_train": "skygym_train", "skygym_contrib": "envs_contrib"}  # as setup.py maps them


def baseline_env(checkout: Path, tmp: Path, env: Dict[str, str]) -> Dict[str, str]:
    """An environment whose imports resolve to another checkout's packages (its folders under their import names)."""
    links = tmp / "baseline-imports"
    links.mkdir(exist_ok=True)
    for name, folder in IMPORT_NAME_TO_FOLDER.items():
        if not (links / name).exists():
            (links / name).symlink_to(checkout / folder)
    path = os.pathsep.join([str(links), str(checkout), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    return dict(env, PYTHONPATH=path)


def drive(args: argparse.Namespace) -> Dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from skygym_adapters.models import resolve_model
    from train_step import write_rows

    model_dir = str(resolve_model(args.model).path)
    tmp = Path(tempfile.mkdtemp(prefix="bench-grpo-vs-trl-"))
    rows = write_rows(tmp)
    total = args.warmup + args.steps
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", WANDB_DISABLED="true",
               RAY_AUTH_MODE="disabled")
    # Both sides with every core, said outright: the trainer's busy-machine choice (fewer torch threads) would
    # otherwise see the other side's work as the machine's.
    env.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    common = ["--model-dir", model_dir, "--rows", str(rows), "--total-steps", str(total), "--out", str(tmp)]
    print(f"model {args.model} ({model_dir}); {PROMPTS} prompts x {SAMPLES} samples, <= {NEW_TOKENS} new tokens; "
          f"{args.warmup} warm-up + {args.steps} measured steps per side, alternated; "
          f"bundled trainer with trainer.use_ray={str(args.ray).lower()} {' '.join(args.override)}", flush=True)
    load_before = _load()
    print(f"load average before: {load_before} ({os.cpu_count()} cores)", flush=True)
    ours_argv = ["--side", "ours", *common, "--ray" if args.ray else "--no-ray"]
    for item in args.override:
        ours_argv += ["--override", item]
    sides: List[Side] = []
    named: List[Any] = []
    try:
        # Set-ups run one at a time, so each side's time to the first step is its own.
        ours = Side("ours", args.ours_python, ours_argv, tmp / "ours.log", env)
        sides.append(ours)
        named.append(("ours", ours))
        print(f"bundled trainer ready: {ours.first_step_after_s:.1f}s from process start to the first step "
              f"(trainer set-up {ours.ready.get('setup_s') or float('nan'):.1f}s)", flush=True)
        if args.baseline:
            checkout = Path(args.baseline).resolve()
            base = Side("base", args.ours_python, [*ours_argv, "--root", str(checkout)], tmp / "base.log",
                        baseline_env(checkout, tmp, env), cwd=checkout)  # Ray workers import from the cwd first
            sides.append(base)
            named.append(("base", base))
            print(f"baseline trainer ({checkout}) ready: {base.first_step_after_s:.1f}s from process start to the "
                  "first step", flush=True)
        trl = Side("trl", args.trl_python, ["--side", "trl", *common], tmp / "trl.log", env)
        sides.append(trl)
        named.append(("trl", trl))
        print(f"TRL ready: {trl.first_step_after_s:.1f}s from process start to the first step", flush=True)
        results: Dict[str, List[Dict[str, Any]]] = {name: [] for name, _ in named}
        for i in range(total):
            order = named[i % len(named):] + named[: i % len(named)]  # each side leads in turn
            for name, side in order:
                row = side.step()
                row["load1"] = os.getloadavg()[0]
                results[name].append(row)
                split = f" (rollout {row['rollout_s']:.2f}, train {row['train_s']:.2f}"
                split += f", sync {row['sync_s']:.2f})" if name != "trl" else ")"
                print(f"step {i + 1} {name:4s}: {row['step_s']:.2f}s{split}, cpu {row.get('cpu_s', 0):.1f}s, "
                      f"{row['generated_tokens']:.0f} tokens, "
                      f"reward {row['reward'] if row['reward'] is None else round(row['reward'], 3)}", flush=True)
    finally:
        for side in sides:
            side.close()
    load_after = _load()
    measured = {k: v[args.warmup:] for k, v in results.items()}
    summary: Dict[str, Any] = {"load_before": load_before, "load_after": load_after, "ray": args.ray,
                               "override": args.override, "baseline": args.baseline,
                               "first_step_s": {name: side.first_step_after_s for name, side in named}}
    for name, rows_ in measured.items():
        summary[name] = {key: _median(rows_, key)
                         for key in ("step_s", "rollout_s", "train_s", "sync_s", "generated_tokens", "cpu_s")}
        summary[name]["s_per_token"] = statistics.median(r["step_s"] / max(r["generated_tokens"], 1) for r in rows_)
    o, t = summary["ours"], summary["trl"]
    summary["step_ratio"] = t["step_s"] / o["step_s"]
    summary["token_ratio"] = t["s_per_token"] / o["s_per_token"]
    summary["sync_fraction"] = o["sync_s"] / o["step_s"]
    summary["cpu_ratio"] = t["cpu_s"] / o["cpu_s"]
    print()
    print("| side | s/step | rollout | train | sync | CPU s/step | generated tokens | ms/token | first step after |")
    print("|---|---|---|---|---|---|---|---|---|")
    labels = {"ours": f"skygym_train (use_ray={str(args.ray).lower()})", "base": f"baseline {args.baseline}",
              "trl": "TRL GRPOTrainer"}
    for name, _ in named:
        r = summary[name]
        sync = f"{r['sync_s']:.2f}" if name != "trl" else "-"
        print(f"| {labels[name]} | {r['step_s']:.2f} | {r['rollout_s']:.2f} | {r['train_s']:.2f} | {sync} | "
              f"{r['cpu_s']:.1f} | {r['generated_tokens']:.0f} | {1000 * r['s_per_token']:.0f} | "
              f"{summary['first_step_s'][name]:.1f}s |")
    print()
    print(f"step ratio (TRL s/step / ours): {summary['step_ratio']:.2f}x; per generated token: "
          f"{summary['token_ratio']:.2f}x; CPU seconds per step: {summary['cpu_ratio']:.2f}x; weight sync "
          f"{100 * summary['sync_fraction']:.1f}% of our step")
    if "base" in summary:
        b = summary["base"]
        summary["base_step_ratio"] = t["step_s"] / b["step_s"]
        print(f"baseline: TRL s/step / baseline {summary['base_step_ratio']:.2f}x; baseline s/step / ours "
              f"{b['step_s'] / o['step_s']:.2f}x; baseline sync {100 * b['sync_s'] / b['step_s']:.1f}% of its step")
    for name in ("ours", "base"):
        if name in results and results[name]:
            print(f"{name}: weight sync {results[name][-1].get('weight_sync')}")
    print(f"load average before {load_before}, after {load_after} (1, 5, 15 min; {os.cpu_count()} cores)")
    print(f"logs: {tmp}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "steps": results}, indent=1))
    return summary


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--rows", help=argparse.SUPPRESS)
    parser.add_argument("--total-steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="smollm2-135m", help="a model name or folder (default: the embedded SmolLM2)")
    parser.add_argument("--steps", type=int, default=4, help="measured steps per side")
    parser.add_argument("--warmup", type=int, default=1, help="steps per side dropped before measuring")
    parser.add_argument("--ray", dest="ray", action="store_true", default=True, help="trainer.use_ray=true (default)")
    parser.add_argument("--no-ray", dest="ray", action="store_false", help="trainer.use_ray=false")
    parser.add_argument("--override", action="append", default=[], help="a trainer key=value for our side (repeatable)")
    parser.add_argument("--baseline", help="another checkout of this repository (e.g. a git worktree of an older "
                        "commit): its trainer runs as a third side, alternated with the other two")
    parser.add_argument("--trl-python", default=os.environ.get("TRL_PYTHON", DEFAULT_TRL_PYTHON))
    parser.add_argument("--ours-python", default=sys.executable)
    parser.add_argument("--json", help="also write the summary and every step to this file")
    args = parser.parse_args(argv)
    if args.side == "ours":
        run_ours(args)
    elif args.side == "trl":
        run_trl(args)
    else:
        if not Path(args.trl_python).exists():
            print(f"TRL's python {args.trl_python} not found: make it with "
                  "`nox -f scripts/noxfile.py -s trl` or pass --trl-python", file=sys.stderr)
            return 2
        drive(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
