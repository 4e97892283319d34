"""``skyrl-gym eval``: roll out a dataset with a model and print how it did.

    skyrl-gym eval --env gsm8k --data rows.parquet --engine hf --model smollm2-135m -n 4
    skyrl-gym eval --data rows.jsonl --engine remote --base-url http://127.0.0.1:8000 --model DIR_OR_NAME

Runs ``-n`` samples per row through the rows' envs (``--env`` overrides ``env_class``), with a progress bar;
prints mean reward, pass@1 and pass@k, mean turns, response length, stop reasons, errors and env metrics;
and writes every trajectory (token ids, loss masks, rewards, conversation) as JSONL to ``--output`` (default:
``eval_trajectories.jsonl`` in the folder of ``--data``). Exits 1 when any episode errored (``--allow-errors``
exits 0 anyway), and 1 with one ``error:`` line when the engine fails (a server that is down or answers
something that is not a completion).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

ENGINES = ("hf", "vllm", "remote", "sglang")
DEFAULT_OUTPUT = "eval_trajectories.jsonl"  # beside the rows, not in whatever folder the command runs from


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="roll out a dataset with a model (hf, vllm, remote, sglang) and report rewards and pass@k",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", required=True, help="dataset rows (JSONL, JSON or Parquet)")
    parser.add_argument("--env", default=None, help="env id for every row (default: each row's env_class)")
    parser.add_argument("--engine", choices=ENGINES, default="hf", help="inference engine (default hf)")
    parser.add_argument("--model", default="smollm2-135m",
                        help="model name, folder or hub id (for remote/sglang: the tokenizer to use; default "
                             "smollm2-135m, the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--base-url", default=None, help="server URL for --engine remote/sglang")
    parser.add_argument("--served-model", default=None, metavar="NAME",
                        help="the model name the --engine remote server expects (default: the first it lists at "
                             "/v1/models)")
    parser.add_argument("--api", choices=("completions", "chat"), default="completions",
                        help="OpenAI API of --engine remote (completions keeps token ids in and out)")
    parser.add_argument("-n", "--samples", type=int, default=1, help="samples per prompt (pass@k uses k = n; default 1)")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N rows")
    parser.add_argument("--max-tokens", type=int, default=256, help="new tokens per turn (default 256)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature (default 1.0, sampled; 0 answers greedily)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling's top-p (default 1.0)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    parser.add_argument("--max-turns", type=int, default=1,
                        help="cap on an episode's turns (default 1, as the trainer's generator.max_turns): "
                             "the row's or env's own max_turns applies under it; raise it for multi-turn "
                             "envs")
    parser.add_argument("--max-input-length", type=int, default=None, help="end a trajectory past this many tokens")
    parser.add_argument("--env-config", default=None, metavar="JSON",
                        help="env_config for the env(s) as JSON, or @file.json")
    parser.add_argument("--device", default=None, help="cpu or cuda (hf engine)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                        help="weights' dtype (hf engine; default float32 on CPU, bfloat16 on a GPU); "
                             "greedy answers can differ between dtypes: give the one a training run's "
                             "engine used")
    parser.add_argument("--check-drift", action="store_true", help="verify re-templating reproduces every trajectory")
    parser.add_argument("--output", default=None,
                        help=f"where to write trajectories (JSONL; default: {DEFAULT_OUTPUT} in the folder of "
                             "--data)")
    parser.add_argument("--summary-json", default=None, help="also write the summary as JSON here")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--allow-errors", action="store_true",
                        help="exit 0 even when episodes errored (they are counted in the summary either way)")
    parser.set_defaults(func=run)


def _turn_cap_warnings(rows: List[Dict[str, Any]], env: Optional[str], env_config: Dict[str, Any],
                       cap: int) -> List[str]:
    """One line per env whose episodes ``--max-turns`` ends before the turns its env and rows allow (a
    multi-turn env was evaluated on one turn, silently). Each env is built for one row of it: its first."""
    from skyrl_gym.episode import check_env_row, turn_cap_warning

    first: Dict[str, Dict[str, Any]] = {}
    for row in rows:
        first.setdefault(str(env or row.get("env_class")), row)
    lines = []
    for env_class, row in sorted(first.items()):
        _, limit = check_env_row({**row, "env_class": env_class}, env_config or None)
        line = turn_cap_warning(env_class, limit, cap, "--max-turns")
        if line:
            lines.append(line)
    return lines


def _keep() -> None:
    """Nothing to put back (an engine that chose no thread count)."""


def _build_engine(args: argparse.Namespace) -> Tuple[Any, Callable[[], None]]:
    """The engine ``--engine`` names, and the call that puts back what building it changed in this process."""
    from skygym_adapters.engines import make_engine

    if args.engine in ("remote", "sglang") and not args.base_url:
        raise SystemExit(f"error: --engine {args.engine} needs --base-url")
    if args.engine == "hf":
        from skygym_adapters.cli import local_hf_engine

        return local_hf_engine(args.model, args.device, args.dtype)
    if args.engine == "vllm":
        return make_engine("vllm", model=args.model), _keep
    if args.engine == "remote":
        return make_engine("remote", base_url=args.base_url, tokenizer=args.model, api=args.api,
                           model=args.served_model, name_hint="--served-model NAME"), _keep
    return make_engine("sglang", base_url=args.base_url, tokenizer=args.model), _keep


def _print_summary(summary: Dict[str, Any]) -> None:
    rows: List[tuple] = []
    for key, value in summary.items():
        if key in ("env_metrics", "stop_reasons"):
            continue
        rows.append((key, f"{value:.4g}" if isinstance(value, float) else str(value)))
    for reason, count in sorted(summary.get("stop_reasons", {}).items()):
        rows.append((f"stop reason: {reason}", str(count)))
    for key, value in sorted(summary.get("env_metrics", {}).items()):
        rows.append((f"env: {key}", f"{value:.4g}" if isinstance(value, float) else str(value)))
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency
        for name, value in rows:
            print(f"{name:32} {value}")
        return
    table = Table(title="skyrl-gym eval")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def run(args: argparse.Namespace) -> int:
    from skyrl_gym.episode import run_sync

    from skyrl_gym.cli._io import UsageError, env_config_arg, unknown_env_problem

    from skygym_adapters.cli import read_rows, report_errors

    if args.samples < 1:
        print("error: -n must be at least 1", file=sys.stderr)
        return 2
    rows = read_rows(args.data, args.limit)
    if rows is None:
        return 2

    from skygym_adapters.evaluation import evaluate, replacing_note, write_trajectories
    from skyrl_gym.cli._io import output_problem
    from skygym_adapters.rollout import RolloutConfig

    sampling: Dict[str, Any] = {"max_generate_length": args.max_tokens, "temperature": args.temperature,
                                "top_p": args.top_p, "logprobs": True}
    if args.seed is not None:
        sampling["seed"] = args.seed
    if args.stop:
        sampling["stop"] = args.stop
    env_classes = {args.env} if args.env else {str(row.get("env_class")) for row in rows}
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(args.data)), DEFAULT_OUTPUT)
    for flag, path in (("--output", output), ("--summary-json", args.summary_json)):
        problem = output_problem(path) if path else None
        if problem:  # refused before the model loads, not after every episode ran
            print(f"error: {flag}: {problem}", file=sys.stderr)
            return 2
    problem = unknown_env_problem(args.env, rows)
    if problem:  # before the model loads: a misspelt id would otherwise be found once per trajectory
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        env_config: Dict[str, Any] = env_config_arg(args.env_config, sorted(env_classes), default={})
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from skyrl_gym.errors import EnvConfigError

    try:
        cap_warnings = _turn_cap_warnings(rows, args.env, env_config, args.max_turns)
    except EnvConfigError as exc:  # before the model loads: every trajectory would fail on it
        print(f"error: --env-config: {exc}", file=sys.stderr)
        return 2
    for line in cap_warnings:
        print(f"warning: {line}", file=sys.stderr)
    config = RolloutConfig(
        sampling_params=sampling,  # type: ignore[arg-type]
        max_turns=args.max_turns,
        max_input_length=args.max_input_length,
        check_drift=args.check_drift,
        env_configs={env: env_config for env in env_classes} if env_config else {},
    )
    from skygym_adapters.engines import EngineError
    from skygym_adapters.models import ModelResolutionError

    try:
        engine, restore_threads = _build_engine(args)
    except ModelResolutionError as exc:  # a model path that does not exist, a hub id that cannot be fetched
        print(f"error: --model: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:  # the engine's package is missing (vLLM, SGLang's client)
        print(f"error: --engine {args.engine}: {exc}", file=sys.stderr)
        return 2
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        restore_threads()
        print("error: the engine has no tokenizer; pass --model", file=sys.stderr)
        return 2

    finished: Dict[int, Any] = {}  # what Ctrl-C leaves: the trajectories done by then, by their place in the run

    async def main() -> Any:
        try:
            check_reachable = getattr(engine, "check_reachable", None)
            if check_reachable is not None:  # a server that is not there: said once, before the progress bar
                await check_reachable()
            return await evaluate(rows, engine, tokenizer, args.samples, config, env_class=args.env,
                                  progress=not args.no_progress, on_trajectory=finished.__setitem__)
        finally:
            aclose = getattr(engine, "aclose", None)
            if callable(aclose):  # an HTTP engine's session, closed on the loop it belongs to
                await aclose()

    try:
        result = run_sync(main())
    except EngineError as exc:  # a server that does not answer, or answers something that is not a reply
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        done = [finished[i] for i in sorted(finished)]
        kept = ""
        if done:
            try:
                kept = f"; the {len(done)} finished are in {write_trajectories(done, output)} (no summary)"
            except OSError as exc:
                kept = f"; the {len(done)} finished could not be written to {output}: {exc}"
        print(f"interrupted: {len(done)} of {len(rows) * args.samples} trajectories had finished{kept}",
              file=sys.stderr)
        return 130
    finally:
        close = getattr(engine, "close", None)
        if callable(close):
            close()
        restore_threads()
    _print_summary(result.summary)
    replacing = replacing_note(output)
    try:
        path = write_trajectories(result.trajectories, output)
    except OSError as exc:  # a read-only folder of rows, a path that is a folder
        print(f"error: cannot write the trajectories to {output}: {exc}; pass --output FILE", file=sys.stderr)
        return 1
    print(f"wrote {len(result.trajectories)} trajectories to {path}{replacing}")
    if args.summary_json:
        with open(args.summary_json, "w", encoding="utf-8") as handle:
            json.dump(result.summary, handle, indent=2)
    return report_errors([t.error for t in result.trajectories], args.allow_errors)
