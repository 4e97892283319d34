"""``skyrl-gym agent eval CONFIG.yaml --data ROWS.jsonl --output OUT.jsonl [--limit N]``: evaluate an agent.

Runs the agent YAML's task on the rows (``generator.num_trajectories`` per row; ``val_config`` applies), with a
progress bar; prints a summary table (mean reward, pass@k when there are several trajectories per row, finish
reasons, errors) and writes one JSON line per trajectory (``instance_id``, ``trajectory_id``, ``reward``,
``finish_reason``, ``messages``, ``error``, ``eval_error``). ``--base-url``, ``--model`` and ``--api-key`` override
``generator.backend_config`` of an ``openai_server`` backend. ``--local-model MODEL`` needs no server: the agent
runs on MODEL (a folder, a hub id or smollm2-135m, the embedded model) on the HF engine in this process, as the
token backend (``infer_backend: skyrl-train``), e.g. on a CPU. Exits 1, naming the first error, when a
trajectory errored (a server that stops answering, an env that cannot be built); ``--allow-errors`` exits 0
anyway. Nothing answering at ``base_url`` is an error before the first trajectory. Ctrl-C stops it within a
decode step or an env call and writes the trajectories that had finished.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List

DEFAULT_OUTPUT = "agent_trajectories.jsonl"  # beside the rows, as `skyrl-gym eval` writes its own
# what each line of the output keeps of a trajectory's result
RESULT_KEYS = ("instance_id", "trajectory_id", "reward", "finish_reason", "messages", "error", "eval_error",
               "num_turns", "replies_cut", "results")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run agents (SkyAgent's YAML) on dataset rows",
        description="Agents on the hub: see docs/agents.md.",
    )
    commands = parser.add_subparsers(dest="agent_command", metavar="SUBCOMMAND")
    ev = commands.add_parser(
        "eval",
        help="evaluate an agent on rows and write its trajectories",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ev.add_argument("config", help="the agent YAML (or the name of a shipped config)")
    ev.add_argument("--data", required=True, help="dataset rows (JSONL, JSON or Parquet)")
    ev.add_argument("--output", default=None, help=f"one JSON line per trajectory (default: {DEFAULT_OUTPUT} in the "
                    "folder of --data, not the current folder)")
    ev.add_argument("--limit", type=int, default=None, help="use only the first N rows")
    ev.add_argument("--base-url", default=None, help="override generator.backend_config.base_url")
    ev.add_argument("--model", default=None, help="override generator.backend_config.model")
    ev.add_argument("--api-key", default=None, help="override generator.backend_config.api_key")
    ev.add_argument("--local-model", default=None, metavar="MODEL",
                    help="no server: run MODEL (folder, hub id or smollm2-135m) on the HF engine in this process, "
                         "as the token backend (infer_backend: skyrl-train)")
    ev.add_argument("--device", default=None, help="cpu or cuda (--local-model; default: a GPU where there is one)")
    ev.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                    help="--local-model's weights (default float32 on CPU, bfloat16 on a GPU)")
    ev.add_argument("--max-iterations", type=int, default=None, metavar="N",
                    help="override generator.max_iterations (an agent's turns; the shipped swe_bench config's 30 take "
                         "minutes a trajectory on a CPU)")
    ev.add_argument("--max-tokens", type=int, default=None, metavar="N",
                    help="override the sampling parameters' max_tokens (per model call)")
    ev.add_argument("--summary-json", default=None, help="also write the summary as JSON here")
    ev.add_argument("--no-progress", action="store_true")
    ev.add_argument("--allow-errors", action="store_true",
                    help="exit 0 even when trajectories errored (they are counted in the summary either way)")
    ev.set_defaults(func=run_eval)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _print_summary(summary: Dict[str, Any]) -> None:
    rows: List[tuple] = []
    for key, value in summary.items():
        if key == "finish_reasons":
            continue
        rows.append((key, f"{value:.4f}" if isinstance(value, float) else str(value)))
    for reason, count in sorted(summary.get("finish_reasons", {}).items()):
        rows.append((f"finish reason: {reason}", str(count)))
    from rich.console import Console
    from rich.table import Table

    table = Table(title="skyrl-gym agent eval")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    Console(width=100).print(table)


def _unknown_env_class(config: Any, rows: List[Dict[str, Any]]) -> str:
    """What is wrong with the env ids a ``task: env`` config would play (its ``env_class``, else each row's), in one
    line naming where the id came from; ``""`` when they are registered (or the task builds its own env)."""
    from skyrl_gym.data import row_place
    from skyrl_gym.registration import unregistered_ids

    if config.task != "env":
        return ""
    if config.env_class:
        sources = {str(config.env_class): "the agent config's env_class"}
    elif not config.data.instance_key:  # rows nested under a key are read by the task
        sources = {}
        for index, row in enumerate(rows):
            if row.get("env_class"):
                sources.setdefault(str(row["env_class"]), f"{row_place(index)}'s env_class")
    else:
        return ""
    name, why = next(iter(unregistered_ids(sources).items()), ("", ""))
    return f"{sources[name]} {name!r}: {why}" if name else ""


def _write_results(results: List[Dict[str, Any]], output: str) -> None:
    """One JSON line per trajectory result; a SWE trajectory's patch also as ``model_patch`` (SWE-bench's name: the
    file is a predictions file)."""
    with open(output, "w", encoding="utf-8") as handle:
        for result in results:
            line = {key: result.get(key) for key in RESULT_KEYS}
            task_result = result.get("results")
            if isinstance(task_result, dict) and isinstance(task_result.get("git_patch"), str):
                line["model_patch"] = task_result["git_patch"]
            handle.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")


def run_eval(args: argparse.Namespace) -> int:
    from skyrl_gym.episode import run_sync

    from skygym_adapters.cli import read_rows, report_errors

    from skygym_adapters.agents import AgentConfigError, AgentRunner, load_agent_config
    from skygym_adapters.engines.base import EngineError

    overrides = {
        k: v for k, v in (("base_url", args.base_url), ("model", args.model), ("api_key", args.api_key)) if v is not None
    }
    if args.local_model is not None and overrides:
        given = ", ".join(f"--{key.replace('_', '-')}" for key in overrides)
        print(f"error: {given}: a server's settings; --local-model runs the model in this process, without one",
              file=sys.stderr)
        return 2
    if args.local_model is None and (args.device or args.dtype):
        print("error: --device and --dtype are --local-model's; a server chooses its own", file=sys.stderr)
        return 2
    for flag, value in (("--max-iterations", args.max_iterations), ("--max-tokens", args.max_tokens)):
        if value is not None and value < 1:
            print(f"error: {flag} must be at least 1, got {value}", file=sys.stderr)
            return 2
    try:
        config = load_agent_config(args.config)
        if args.max_iterations is not None:
            config.generator.max_iterations = args.max_iterations
        if args.max_tokens is not None:
            config.generator.sampling_params["max_tokens"] = args.max_tokens
            if config.generator.val_config.sampling_params is not None:  # what an eval (val_mode) samples with
                config.generator.val_config.sampling_params["max_tokens"] = args.max_tokens
        if args.local_model is not None:  # tokens in and out through the engine below, not a server
            config.generator.infer_backend = "skyrl-train"
            config.generator.backend_config.clear()
        config.generator.backend_config.update(overrides)
        runner = None if args.local_model is not None else AgentRunner(config, infer_engine=None, tokenizer=None)
    except AgentConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = read_rows(args.data, args.limit)
    if rows is None:
        return 2
    from skygym_adapters.evaluation import replacing_note
    from skyrl_gym.cli._io import output_problem

    output = args.output or os.path.join(os.path.dirname(os.path.abspath(args.data)), DEFAULT_OUTPUT)
    for flag, path in (("--output", output), ("--summary-json", args.summary_json)):
        problem = output_problem(path) if path else None
        if problem:  # before the model loads and the trajectories run, not after
            print(f"error: {flag}: {problem}", file=sys.stderr)
            return 2
    problem = _unknown_env_class(config, rows)
    if problem:  # before the model loads: each trajectory would fail on it, one by one
        print(f"error: {problem}", file=sys.stderr)
        return 2
    engine, restore_threads = None, (lambda: None)
    if args.local_model is not None:
        from skygym_adapters.cli import local_hf_engine
        from skygym_adapters.models import ModelResolutionError

        try:
            engine, restore_threads = local_hf_engine(args.local_model, args.device, args.dtype)
        except ModelResolutionError as exc:
            print(f"error: --local-model: {exc}", file=sys.stderr)
            return 2
        try:
            runner = AgentRunner(config, infer_engine=engine, tokenizer=engine.tokenizer)
        except AgentConfigError as exc:
            engine.close()
            restore_threads()
            print(f"error: {exc}", file=sys.stderr)
            return 2
    bar = None
    if not args.no_progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows) * config.num_trajectories(True), desc="agent eval", unit="traj")
    finished: Dict[Any, Dict[str, Any]] = {}  # what Ctrl-C leaves: the results done by then
    turns = {"done": 0, "shown_at": 0.0}

    def done(trajectory: Any) -> None:
        if trajectory.result is not None:
            finished[(trajectory.cfg.instance_id, trajectory.cfg.trajectory_id)] = trajectory.result
        if bar is not None:
            bar.set_postfix(turns=turns["done"], refresh=False)  # shown by the update
            bar.update(1)

    def turn() -> None:  # a trajectory of many turns (SWE) takes minutes: the bar shows the turns as they end
        turns["done"] += 1
        now = time.monotonic()
        if bar is not None and now - turns["shown_at"] >= 0.5:
            turns["shown_at"] = now
            bar.set_postfix(turns=turns["done"])

    async def main() -> Dict[str, Any]:
        try:
            check_reachable = getattr(runner.backend, "check_reachable", None)
            if check_reachable is not None:  # a server that is not there: once, not once per trajectory
                await check_reachable()
            return await runner.run(rows, val_mode=True, on_trajectory_done=done, on_turn=turn)
        finally:
            await runner.aclose()

    try:
        out = run_sync(main())
    except AgentConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:  # nothing answers at the server's address
        if bar is not None:
            bar.close()
        print(f"error: {exc} (or run the model in this process: --local-model MODEL)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()  # before the message: it would land inside the bar's line
        kept = list(finished.values())  # in the order they finished
        note = ""
        if kept:
            try:
                _write_results(kept, output)
                note = f"; the {len(kept)} finished are in {output} (no summary)"
            except OSError as exc:
                note = f"; the {len(kept)} finished could not be written to {output}: {exc}"
        print(f"interrupted: {len(kept)} of {len(rows) * config.num_trajectories(True)} trajectories had "
              f"finished{note}", file=sys.stderr)
        return 130
    finally:
        if bar is not None:
            bar.close()
        if engine is not None:
            engine.close()
        restore_threads()
    _print_summary(out["summary"])
    replacing = replacing_note(output)
    try:
        _write_results(out["results"], output)
    except OSError as exc:  # the folder went away or the disk filled during the run
        print(f"error: cannot write the trajectories to {output}: {exc}; pass --output FILE", file=sys.stderr)
        return 1
    print(f"wrote {len(out['results'])} trajectories to {output}{replacing}")
    if args.summary_json:
        with open(args.summary_json, "w", encoding="utf-8") as handle:
            json.dump(out["summary"], handle, indent=2)
    return report_errors([result.get("error") for result in out["results"]], args.allow_errors)
