"""``skyrl-gym check ID [--rows FILE]``: run the env checker and print its report (exit 1 on breaches, 3 when
every row was skipped).

Without ``--rows`` the rows come from the env's dataset builder, else from the golden cases it ships
(:func:`skyrl_gym.checker.default_rows`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from skyrl_gym.checker import STEP_TIMEOUT_S
from skyrl_gym.cli._io import UsageError, env_config_arg, error, parse_json_arg, seconds_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="drive an env through dataset rows and adversarial actions; report contract breaches",
        description="Build the env for every row, play the row's reference answer and adversarial actions "
        "(empty, ~10 MB, unicode, unclosed tags) twice each, and report every breach of the env contract. "
        "Exit code 0: no errors; 1: errors found; 2: bad arguments; 3: nothing was checked (every row was skipped: "
        "this machine cannot run the env, as for `swe` without Docker). This checks the env's contract; to check "
        "that its reward cannot be hacked, run `skyrl-gym audit ID` (docs/audit.md).",
    )
    parser.add_argument("env_id", metavar="ID")
    parser.add_argument("--rows", metavar="FILE", help="dataset rows (JSONL, JSON or Parquet); default: rows from the "
                        "env's dataset builder (test split, seed 0), else the golden cases shipped with the env")
    parser.add_argument("--env-config", metavar="JSON", help="env_config as JSON, or @file.json")
    parser.add_argument("--builder-args", metavar="JSON", help="without --rows: keyword arguments of the env's dataset "
                        "builder as a JSON object, or @file.json (e.g. '{\"num_digits\": 2}' for multiply)")
    parser.add_argument("--max-rows", type=int, help="check at most this many rows (without --rows: how many to build, "
                        "default 2)")
    parser.add_argument("--step-timeout", type=float, default=STEP_TIMEOUT_S, metavar="SECONDS",
                        help=f"report a make/init/step/close slower than this as hanging (default {STEP_TIMEOUT_S:g})")
    parser.add_argument("--huge-chars", type=int, default=10_000_000, help="size of the huge action (default 10 MB)")
    parser.add_argument("--no-adversarial", action="store_true", help="play only the rows' reference answers")
    parser.add_argument("--no-determinism", action="store_true", help="play each action once, not twice")
    parser.add_argument("--no-split-check", action="store_true",
                        help="without --rows: do not build train rows to see whether test rows repeat them (a "
                        "generator of slow rows takes seconds more)")
    parser.add_argument("--gymnasium", action="store_true",
                        help="also run Gymnasium's check_env on the env through the bridge (needs gymnasium)")
    parser.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from skyrl_gym.checker import BrokenBuilder, NoRowsFor, check_env, default_rows, split_findings
    from skyrl_gym.errors import UnregisteredEnv

    try:
        step_timeout_s = seconds_arg(args.step_timeout, "--step-timeout", zero="no limit")
        if args.max_rows is not None and args.max_rows < 1:
            raise UsageError(f"--max-rows must be at least 1, got {args.max_rows}")
        env_config = env_config_arg(args.env_config, [args.env_id], default={})
        builder_args = parse_json_arg(args.builder_args, "--builder-args", default={})
        if not isinstance(builder_args, dict):
            raise UsageError("--builder-args must be a JSON object of keyword arguments, e.g. '{\"num_digits\": 2}'")
        rows, built = args.rows, False
        if rows is None:
            rows, source, built = default_rows(args.env_id, size=args.max_rows or 2, builder_kwargs=builder_args)
            print(f"checking {source}")
        elif builder_args:
            raise UsageError("--builder-args goes with building rows; with --rows FILE the rows are read as they are")
        elif not Path(rows).expanduser().exists():  # a bad argument (exit 2), not a breach of the contract
            raise UsageError(f"--rows: file not found: {rows}")
        report = check_env(
            args.env_id,
            rows,
            env_config=env_config,
            max_rows=args.max_rows,
            step_timeout_s=step_timeout_s,
            huge_action_chars=args.huge_chars,
            adversarial=not args.no_adversarial,
            check_determinism=not args.no_determinism,
            gymnasium=args.gymnasium,
            own_rows=args.rows is None,
        )
        if built and not args.no_split_check and not report.all_skipped:
            report.findings.extend(split_findings(args.env_id, builder_args))
    except (UsageError, UnregisteredEnv, NoRowsFor) as exc:
        error(str(exc))
        return 2
    except BrokenBuilder as exc:  # a breach of the contract (exit 1), not a bad argument
        error(str(exc))
        return 1
    print(report)
    if report.all_skipped:
        print("nothing was checked: this machine cannot run the env (above); run the check again where it can")
    elif report.ok:
        print("the contract is checked, not the reward's values (a reference answer that earns some reward passes "
              f"here): whether right answers earn the full reward and known hacks nothing, skyrl-gym audit {args.env_id}")
    if not report.ok:
        return 1
    return 3 if report.all_skipped else 0  # as `audit` does: a script must not read a skipped check as a pass
