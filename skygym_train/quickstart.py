"""The quickstart: GRPO on the embedded SmolLM2-135M-Instruct, learning to box single-digit products.

    python -m skygym_train.quickstart                # or: skyrl-gym quickstart
    python -m skygym_train.quickstart --steps 20 trainer.policy.optimizer_config.lr=2e-5

Each question comes after two worked examples (``3 * 4`` -> ``\\boxed{12}``), so the model starts at a held-out
greedy reward of about 0.35 instead of 0.0; with 1.0 for a correct boxed product and 0.1 for a boxed wrong one,
40 steps take it to 0.86-0.92 (train reward about 0.25 -> 0.97) on this project's 2-core CPU, in about 3 minutes
when the machine is quiet (the runs are listed in docs/training.md). It evaluates greedily on held-out rows before and after
training, writes a bfloat16 Hugging Face export (and a training checkpoint with ``--checkpoint``), and plots reward
per step. On a machine with a GPU the same command trains there. Any trainer key can be overridden as ``key=value``.
Run again into the same ``--out``, it first moves the earlier run's outputs to ``earlier_runs/<time>/`` there.
Ctrl-C stops it once the step in progress is done, with the steps done plotted and summed up (exit status 130).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from skyrl_gym.text import counted


def quickstart_overrides(out_dir: Path, steps: int, model: str, save_checkpoint: bool = False) -> Dict[str, Any]:
    """The recipe (what worked on a 2-core CPU), as trainer config keys. The outputs stay small by default: a
    bfloat16 Hugging Face export, and a training checkpoint (weights plus optimizer state, several times the
    model's size) only with ``save_checkpoint``."""
    return {
        "data.train_data": [str(out_dir / "data" / "train.jsonl")],
        "data.val_data": [str(out_dir / "data" / "validation.jsonl")],
        "environment.env_class": "multiply",
        # 1.0 for a correct boxed product, 0.1 for a boxed wrong number: a gentle slope towards the format
        "environment.env_config": {"boxed_wrong_reward": 0.1},
        "trainer.policy.model.path": model,
        "trainer.use_ray": False,
        "trainer.strategy": "fsdp2",
        "trainer.algorithm.advantage_estimator": "grpo",
        "trainer.algorithm.policy_loss_type": "regular",
        "trainer.algorithm.use_kl_loss": False,
        "trainer.algorithm.zero_variance_filter": True,
        "trainer.policy.optimizer_config.lr": 1e-5,
        "trainer.policy.optimizer_config.weight_decay": 0.0,
        "trainer.policy.optimizer_config.max_grad_norm": 1.0,
        "trainer.gradient_checkpointing": False,
        "trainer.train_batch_size": 8,
        "trainer.policy_mini_batch_size": 8,
        # a step's 32 rows in one pass: on a CPU a pass costs about the same at 100 tokens as at 400 (the weights
        # are read either way), so four passes of 8 rows took 7 s a step and one takes 4 (other batch sizes or
        # sample counts given on the command line: _one_pass_per_step)
        "trainer.micro_train_batch_size_per_gpu": 32,
        "trainer.micro_forward_batch_size_per_gpu": 32,
        "trainer.eval_batch_size": 32,
        "trainer.eval_before_train": True,
        # one evaluation after the last step, whether or not one ran before (trainer.eval_before_train=false)
        "trainer.eval_interval": steps,
        "trainer.epochs": 100,
        "trainer.max_training_steps": steps,
        "trainer.ckpt_interval": steps if save_checkpoint else -1,
        "trainer.max_ckpts_to_keep": 1,  # a resumed run's checkpoint replaces the one it went on from (1.7 GB each)
        "trainer.ckpt_path": str(out_dir / "ckpts"),
        "trainer.export_path": str(out_dir / "export"),
        "trainer.export_dtype": "bfloat16",
        "trainer.hf_save_interval": steps,
        "trainer.resume_mode": "none",
        "trainer.logger": "console,jsonl",
        "trainer.log_path": str(out_dir / "logs"),
        "trainer.run_name": "quickstart",
        "trainer.project_name": "skyrl-gym-quickstart",
        "trainer.plot_path": str(out_dir / "reward_per_step.png"),
        "generator.backend": "hf",
        "generator.n_samples_per_prompt": 4,
        "generator.max_turns": 1,
        "generator.sampling_params.temperature": 1.0,
        "generator.sampling_params.max_generate_length": 16,
        "generator.eval_sampling_params": {"temperature": 0.0, "max_generate_length": 16, "top_p": 1.0},
    }


# Two worked examples before each question: the base model knows single-digit products but rarely boxes them
# (greedy reward 0.0 on the held-out rows with the instruction alone, 0.35 with these examples), so training spends
# its steps on accuracy rather than on discovering the format.
FEW_SHOT = ((3, 4), (7, 6))


def _with_examples(row: Dict[str, Any]) -> Dict[str, Any]:
    system, question = row["prompt"][:-1], row["prompt"][-1]
    examples: List[Dict[str, str]] = []
    for a, b in FEW_SHOT:
        examples += [{"role": "user", "content": f"{a} * {b}"}, {"role": "assistant", "content": f"\\boxed{{{a * b}}}"}]
    return {**row, "prompt": [*system, *examples, question]}


def write_multiply_rows(data_dir: Path, num_train: int = 512, num_val: int = 32, seed: int = 0,
                        boxed_wrong_reward: Optional[float] = None) -> None:
    """Single-digit products, one turn each, after two worked examples; no validation question (and no example)
    appears in the training rows, and no example appears among the validation questions. Each row carries
    ``boxed_wrong_reward`` when given, so ``skyrl-gym eval`` or ``step`` on the rows scores as training
    did."""
    from skyrl_gym.data import write_jsonl
    from skyrl_gym.datasets import build_rows

    data_dir.mkdir(parents=True, exist_ok=True)
    examples = {f"{a} * {b}" for a, b in FEW_SHOT} | {f"{b} * {a}" for a, b in FEW_SHOT}
    candidates = build_rows("multiply", split="validation", size=num_val * 2, seed=seed, num_digits=1, max_turns=1)
    val = [row for row in candidates if row["prompt"][-1]["content"] not in examples][:num_val]
    # there are only 100 single-digit products: keep every validation question out of training
    held_out = {row["prompt"][-1]["content"] for row in val} | examples
    candidates = build_rows("multiply", split="train", size=num_train * 3, seed=seed, num_digits=1, max_turns=1)
    train = [row for row in candidates if row["prompt"][-1]["content"] not in held_out][:num_train]
    credit = {} if boxed_wrong_reward is None else {"boxed_wrong_reward": boxed_wrong_reward}
    write_jsonl([{**_with_examples(row), **credit} for row in train], data_dir / "train.jsonl")
    write_jsonl([{**_with_examples(row), **credit} for row in val], data_dir / "validation.jsonl")


EARLIER_RUNS = "earlier_runs"
"""The folder of ``--out`` that a re-run moves an earlier run's outputs into, one subfolder per run, named by
the time that run last wrote."""


def output_paths(cfg: Any, out_dir: Path, keep_resumable: bool = False) -> List[Path]:
    """What a run writes under ``out_dir`` besides its data rows (which every run writes the same): the logs,
    the export, the checkpoints, the plot and ``summary.json``, where the config puts them inside ``out_dir``, and
    the trajectories of the evaluation the summary names (``data/eval_trajectories.jsonl``).
    With ``keep_resumable`` the checkpoints and logs are left out: a resumed run goes on from them and adds to
    them."""
    t = cfg.trainer
    paths = [t.export_path, t.plot_path, str(out_dir / "summary.json")]
    if not keep_resumable:
        paths += [t.ckpt_path, str(Path(t.log_path) / t.run_name)]  # the trainer logs into log_path/run_name
    own = [out_dir / "data", out_dir / EARLIER_RUNS]
    resolved = dict.fromkeys(Path(p).expanduser().resolve() for p in paths if p)
    # never the folder itself, nor one that holds the data rows or the earlier runs
    inside = [p for p in resolved if out_dir in p.parents and not any(o == p or p in o.parents for o in own)]
    # a path inside another goes with it
    outermost = [p for p in inside if not any(q in p.parents for q in inside)]
    # what `skyrl-gym eval` (the command the summary prints) wrote beside the rows measured this run's export
    from skygym_adapters.cli.eval_cmd import DEFAULT_OUTPUT  # where `skyrl-gym eval --data data/...` writes

    return outermost + [out_dir.resolve() / "data" / DEFAULT_OUTPUT]


def move_earlier_run_aside(paths: Sequence[Path], out_dir: Path) -> Optional[Path]:
    """Move whichever of ``paths`` (inside ``out_dir``) exist into ``out_dir/earlier_runs/<time>/``, at the
    same paths relative to ``out_dir``; nothing is deleted. ``<time>`` is when that run last wrote (local
    time), with ``-2``, ``-3`` ... when a folder of that name is there already. Returns the folder, or None
    when none existed."""
    present = [p for p in paths if p.exists() or p.is_symlink()]
    if not present:
        return None
    keep = out_dir / EARLIER_RUNS
    if keep.is_symlink() or (keep.exists() and not keep.is_dir()):
        from skygym_train.config.errors import ConfigError

        raise ConfigError(f"{keep} is not a folder: the quickstart moves an earlier run's outputs there before "
                          "training again into the same --out; move it away, or give another --out")
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(max(_last_written(p) for p in present)))
    target, n = out_dir / EARLIER_RUNS / stamp, 2
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            target.mkdir()
            break
        except FileExistsError:
            target, n = out_dir / EARLIER_RUNS / f"{stamp}-{n}", n + 1
    moved = {}
    for path in present:
        destination = target / path.relative_to(out_dir)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(destination))  # a rename on one file system
        moved[str(path)] = str(destination)
    _point_summary_at(target / "summary.json", moved)
    return target


def _point_summary_at(summary: Path, moved: Dict[str, str]) -> None:
    """An earlier run's ``summary.json`` names its export, plot and checkpoint (and the command that evaluates the
    export) where they were: after the move, where they are."""
    if not summary.is_file():
        return
    try:
        data = json.loads(summary.read_text())
    except (OSError, ValueError):  # not one the quickstart wrote: left as it is
        return
    olds = "|".join(re.escape(old) for old in sorted(moved, key=len, reverse=True))
    pattern = re.compile(rf"(?:{olds})(?=/|\s|$)")  # whole path components only

    def repoint(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(lambda m: moved[m.group(0)], value)
        if isinstance(value, dict):
            return {key: repoint(item) for key, item in value.items()}
        if isinstance(value, list):
            return [repoint(item) for item in value]
        return value

    summary.write_text(json.dumps(repoint(data), indent=2))


def _last_written(path: Path) -> float:
    """The newest modification time of the files at ``path`` (the folder's own when it holds none)."""
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_mtime
    return max((f.lstat().st_mtime for f in path.rglob("*") if not f.is_dir() or f.is_symlink()),
               default=path.stat().st_mtime)


def _size_mb(paths: Sequence[Path]) -> float:
    files = [f for p in paths if p.exists() for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()]
    return sum(f.stat().st_size for f in files) / 1e6


def _resumes(cfg: Any) -> bool:
    """Whether the trainer will go on from a checkpoint: then the checkpoints and the logs it adds to stay."""
    from skygym_train.checkpoint import resume_folder

    t = cfg.trainer
    try:
        return resume_folder(t.resume_mode, t.resume_path, t.ckpt_path) is not None
    except FileNotFoundError:  # a pointer to a missing step: the trainer says so when it tries
        return True


def quickstart_recipe(out_dir: Path, steps: int, model: str, extra_overrides: Sequence[str] = (),
                      save_checkpoint: bool = False) -> Any:
    """The run's config before it is checked (an OmegaConf ``DictConfig``): the recipe's keys, the user's
    ``key=value`` overrides over them, and the micro-batch sizes following the user's batch sizes
    (``_one_pass_per_step``)."""
    from omegaconf import OmegaConf

    user = OmegaConf.from_dotlist(list(extra_overrides))
    merged = OmegaConf.merge(OmegaConf.create(_nest(quickstart_overrides(out_dir, steps, model, save_checkpoint))),
                             user)
    _one_pass_per_step(merged, user)
    return merged


def run_quickstart(
    out_dir: Path,
    steps: int = 40,
    model: str = "smollm2-135m",
    extra_overrides: Sequence[str] = (),
    save_checkpoint: bool = False,
) -> Dict[str, Any]:
    from omegaconf import OmegaConf

    from skygym_train.config.loader import load_config
    from skygym_train.trainer import PPOTrainer, TrainingInterrupted, check_before_starting

    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    started = time.perf_counter()
    out_dir = out_dir.expanduser().resolve()
    merged = quickstart_recipe(out_dir, steps, model, extra_overrides, save_checkpoint)
    # the rows carry the partial credit they are trained with (a row's value wins over env_config)
    credit = OmegaConf.select(merged, "environment.env_config.boxed_wrong_reward")
    new_folders = [p for p in (out_dir, out_dir / "data") if not p.exists()]
    write_multiply_rows(out_dir / "data", boxed_wrong_reward=credit)
    try:
        cfg = load_config(OmegaConf.to_container(merged))  # type: ignore[arg-type]
        check_before_starting(cfg)  # a bad env id or model path moves nothing aside
    except BaseException:  # nor leaves rows behind in a folder the run made
        for folder in reversed(new_folders):
            shutil.rmtree(folder, ignore_errors=True)
        raise
    # a re-run into the same folder leaves only its own outputs there: the earlier run's are moved aside
    outputs = output_paths(cfg, out_dir, keep_resumable=_resumes(cfg))
    earlier = move_earlier_run_aside(outputs, out_dir)
    if earlier is not None:  # what moved, by its path in the folder ("data/eval_trajectories.jsonl", not "data")
        moved = ", ".join(sorted(str(path.relative_to(out_dir.resolve())) for path in outputs
                                 if (earlier / path.relative_to(out_dir.resolve())).exists()))
        print(f"quickstart: moved the earlier run's outputs ({moved}) to {earlier}", file=sys.stderr,
              flush=True)
    print(f"quickstart: GRPO on {model}, {counted(steps, 'step')} of {counted(cfg.trainer.train_batch_size, 'prompt')}"
          f" x {counted(cfg.generator.n_samples_per_prompt, 'sample')}; outputs in {out_dir}", file=sys.stderr,
          flush=True)
    print("quickstart: loading the model and the trainer ...", file=sys.stderr, flush=True)
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        device = "GPU" if trainer.policy is not None and _on_gpu() else "CPU"
        print(f"quickstart: model loaded on {device} in {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
        try:
            result = trainer.fit()
        except TrainingInterrupted as exc:  # Ctrl-C: the steps done are summed up and plotted, no export
            result = exc.result
    result["minutes"] = (time.perf_counter() - started) / 60
    result["output_mb"] = _size_mb([out_dir / "data", *output_paths(cfg, out_dir)])
    summary = _summary(result)
    if summary["export"]:
        summary["eval_command"] = _eval_command(cfg, summary["export"])
        summary["eval_command_note"] = _eval_command_note(cfg)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(_report(summary), flush=True)
    return summary


ONE_PASS_MAX_ROWS = 64
"""The most rows the recipe puts through the model in one pass when a step's rows follow the user's sizes."""


def _one_pass_per_step(merged: Any, user: Any) -> None:
    """The recipe trains a step's rows in one pass (``micro_*_batch_size_per_gpu`` = mini-batch x samples). When
    the user changes how many rows that is and leaves the micro-batch sizes alone, they follow: up to
    ``ONE_PASS_MAX_ROWS`` rows in one pass, more in as few equal passes as split them."""
    from omegaconf import OmegaConf

    from skygym_train.config.validation import largest_divisor_at_most

    mini = OmegaConf.select(merged, "trainer.policy_mini_batch_size")
    samples = OmegaConf.select(merged, "generator.n_samples_per_prompt")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (mini, samples)):
        return  # a value the config check refuses, naming it
    rows = largest_divisor_at_most(mini * samples, ONE_PASS_MAX_ROWS)
    for key in ("trainer.micro_train_batch_size_per_gpu", "trainer.micro_forward_batch_size_per_gpu"):
        if OmegaConf.select(user, key) is None:
            OmegaConf.update(merged, key, rows)


def _eval_command(cfg: Any, export: str) -> str:
    """The ``skyrl-gym eval`` command that measures the export as the run's last evaluation did: the rows
    carry the reward's settings; the sampling is the run's evaluation sampling, in the dtype its engine
    decoded in (greedy answers differ between float32 and bfloat16)."""
    from skygym_train.generation import hf_engine_dtype

    sampling = cfg.generator.eval_sampling_params or cfg.generator.sampling_params
    dtype = f" --dtype {hf_engine_dtype(cfg)}" if cfg.generator.backend == "hf" else ""
    return (f"skyrl-gym eval --data {cfg.data.val_data[0]} --model {export} "
            f"--temperature {sampling.temperature:g} --max-tokens {sampling.max_generate_length}{dtype}")


def _eval_command_note(cfg: Any) -> Optional[str]:
    """Why the command's figure can differ from the run's, or None where it is the same: the export's weights are
    the run's rounded to ``trainer.export_dtype``; the command loads them in the dtype the run's engine decoded
    in, which gives the engine's weights again only where that is the export's dtype or the export is float32
    (an engine decoding in float32 on a CPU without bfloat16 arithmetic does not get a bfloat16 export's weights
    back). One greedy answer of 32 that flips moves the mean by 0.03."""
    from skygym_train.generation import hf_engine_dtype

    if cfg.generator.backend != "hf":
        return None
    engine, export = hf_engine_dtype(cfg), str(cfg.trainer.export_dtype)
    if engine == export or export == "float32":
        return None
    return (f"its weights are {export}, the run evaluated {engine} ones: expect a greedy answer or two to differ; "
            f"trainer.export_dtype={engine} exports what the run evaluated")


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _nest(flat: Dict[str, Any]) -> Dict[str, Any]:
    from skygym_train.config.loader import _nest as nest

    return nest(flat)


def _summary(result: Dict[str, Any]) -> Dict[str, Any]:
    history: List[Dict[str, float]] = result.get("history", [])
    rewards = [h["reward/mean"] for h in history if "reward/mean" in h]
    window = max(1, min(5, len(rewards) // 4 or 1))
    return {
        "steps": result.get("global_step"),
        "interrupted": bool(result.get("interrupted")),
        "steps_planned": result.get("total_steps"),
        "minutes": round(result["minutes"], 2),
        "output_mb": round(result.get("output_mb", 0.0), 1),
        "train_reward_first_steps": round(sum(rewards[:window]) / window, 4) if rewards else None,
        "train_reward_last_steps": round(sum(rewards[-window:]) / window, 4) if rewards else None,
        "train_reward_window": window,  # how many steps each of those two means takes
        "eval_before": result.get("eval_before"),
        "eval_after": result.get("eval_after"),
        "checkpoint": result.get("checkpoint"),
        "export": result.get("export"),
        "plot": result.get("plot"),
        "reward_per_step": [round(r, 4) for r in rewards],
        "untrained_last_steps": _untrained_end(history),
    }


def _report(summary: Dict[str, Any]) -> str:
    before, after = (_eval_reward(summary.get(key)) for key in ("eval_before", "eval_after"))
    if summary["interrupted"]:
        head = (f"== quickstart interrupted at step {summary['steps']} of {summary['steps_planned']} "
                f"(Ctrl-C), after {summary['minutes']:.1f} min")
        evaluated = f"{before} before training; not evaluated after (interrupted)"
        export = "none (interrupted: run the quickstart again to train all the steps and export the model)"
        checkpoint = summary["checkpoint"] or "none"
    else:
        head = "== quickstart finished in {:.1f} min ({})".format(summary["minutes"], counted(summary["steps"], "step"))
        evaluated, export = f"{before} -> {after}", summary["export"]
        checkpoint = summary["checkpoint"] or "none (pass --checkpoint to keep one for resuming)"
    lines = [
        "",
        head,
        "   train reward (mean of the first / last " + counted(summary.get("train_reward_window", 1), "step")
        + "): " + (
            f"{summary['train_reward_first_steps']:.3f} -> {summary['train_reward_last_steps']:.3f}"
            if summary["train_reward_first_steps"] is not None else "(no step trained)"),
        *_learned_line(summary.get("untrained_last_steps")),
        f"   held-out eval reward (greedy): {evaluated}",
        f"   checkpoint: {checkpoint}",
        f"   Hugging Face export: {export}",
        f"   reward plot: {summary['plot']}",
        f"   this run's outputs: {summary['output_mb']:.0f} MB",
    ]
    if summary.get("eval_command"):
        note = f" ({summary['eval_command_note']})" if summary.get("eval_command_note") else ""
        lines.append(f"   the held-out evaluation again, on the export{note}: {summary['eval_command']}")
    return "\n".join(lines)


def _untrained_end(history: Sequence[Dict[str, float]]) -> Optional[Dict[str, Any]]:
    """The run's last steps that trained nothing (every advantage 0: each question's samples got one reward),
    when there are at least as many as make the trainer say so, with the share of their questions that every
    sample answered right; None otherwise."""
    from skygym_train.trainer import NO_SIGNAL_STEPS

    steps = [h for h in history if "reward/mean" in h]
    trained = [h.get("policy/trained_group_fraction", 1) > 0 for h in steps]
    untrained = next((i for i, t in enumerate(reversed(trained)) if t), len(steps))
    if untrained < NO_SIGNAL_STEPS:
        return None
    last = steps[-untrained:]
    solved = sum(h.get("reward/solve_all_fraction", 0.0) for h in last) / untrained
    return {"steps": [int(last[0]["step"]), int(last[-1]["step"])],
            "solved_by_every_sample": round(solved, 4)}


def _learned_line(untrained: Optional[Dict[str, Any]]) -> List[str]:
    """A line for the last steps when they trained nothing because nearly every answer was right: the
    trainer's note that they trained nothing is then what a run that learned its task ends with, not a
    fault."""
    if not untrained or untrained["solved_by_every_sample"] < 0.5:
        return []
    first, last = untrained["steps"]
    return [f"   steps {first}-{last} trained nothing, as expected once the model has learned the task: each "
            f"question's answers agreed, {100 * untrained['solved_by_every_sample']:.0f}% of questions right "
            "in every answer (GRPO learns from the differences between a question's answers)"]


def _eval_reward(metrics: Optional[Dict[str, Any]]) -> Any:
    """An evaluation's reward for the report, or ``(not run)`` where there was none."""
    reward = (metrics or {}).get("eval/reward")
    return "(not run)" if reward is None else f"{reward:.3f}" if isinstance(reward, float) else reward


def _steps(text: str) -> int:
    """``--steps``: a whole number from 1 (0 was refused as ``trainer.hf_save_interval=0``, a key the user
    never set)."""
    try:
        steps = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of steps, got {text!r}") from None
    if steps < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {steps}")
    return steps


def build_arg_parser(parser: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m skygym_train.quickstart", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="outputs/quickstart", help="folder for data, logs, checkpoint, plot (default outputs/quickstart)")
    parser.add_argument("--steps", type=_steps, default=40, help="training steps (default 40)")
    parser.add_argument("--model", default="smollm2-135m", help="model name or folder (default: the embedded SmolLM2)")
    parser.add_argument("--checkpoint", action="store_true",
                        help="also keep a training checkpoint (weights + optimizer state, ~1.7 GB) to resume from")
    parser.add_argument("overrides", nargs="*", help="trainer config overrides, key=value")
    return parser


def run_from_args(args: argparse.Namespace) -> int:
    """Run the quickstart from parsed arguments (``python -m skygym_train.quickstart`` and ``skyrl-gym
    quickstart``); a bad override is one ``error:`` line and exit status 2, as for ``skyrl-gym train``."""
    from skygym_adapters.models import ModelResolutionError

    from skygym_train.config.loader import ConfigError
    from skygym_train.entrypoints.main_base import STOPPED_AT_ONCE, cli_warnings, quiet_library_bars, terminated_line
    from skyrl_gym.cli._io import Terminated, terminated_as_interrupt

    quiet_library_bars()
    try:  # a resumed run: one `warning:` line, as `skyrl-gym train` says it; SIGTERM ends it as `train` does
        with terminated_as_interrupt(), warnings.catch_warnings():
            warnings.showwarning = cli_warnings(warnings.showwarning)
            summary = run_quickstart(Path(args.out), args.steps, args.model, args.overrides,
                                     save_checkpoint=args.checkpoint)
    except (ConfigError, ModelResolutionError) as exc:  # a hub id that cannot be fetched: known when loading
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Terminated as exc:
        print(terminated_line(exc), file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:  # while loading, or a second Ctrl-C (the first stops between steps)
        print(STOPPED_AT_ONCE, file=sys.stderr)
        return 130
    return 130 if summary["interrupted"] else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_from_args(build_arg_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
