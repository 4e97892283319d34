"""``skyrl-gym audit ID``: play an env's verifier against golden positives and the hack library (exit 1 on a
false positive, a false negative or an env error); ``skyrl-gym fingerprint ID``: print the hash of what
decides its reward.

Without ``--rows`` the rows come from the env's audit profile, else its dataset builder, else its golden
cases."""

from __future__ import annotations

import argparse
import sys

from skyrl_gym.checker import STEP_TIMEOUT_S
from skyrl_gym.cli._io import UsageError, env_config_arg, error, output_problem, seconds_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="play an env's verifier against golden answers and known reward hacks; "
        "report false positives/negatives",
        description="For every row, play known-wrong answers (the bar), the row's reference answer (it "
        "must earn the full reward: else a false negative) and every hack that fits the env's action format "
        "(each must earn no more than the wrong answers: else a false positive). Prints a table per case. "
        "Exit code 0: no false positive, false negative or error; 1: some; 2: bad arguments; 3: an audit "
        "could not run here (e.g. swe without a Docker engine), or not wholly (--budget-s left cases not run). "
        "See docs/audit.md.",
    )
    parser.add_argument("env_id", metavar="ID", nargs="+", help="one or more env ids")
    parser.add_argument(
        "--rows",
        metavar="FILE",
        help="dataset rows (JSONL, JSON or Parquet); default: the env's "
        "audit profile's rows, else its dataset builder's (test split), else its golden cases",
    )
    parser.add_argument("--env-config", metavar="JSON", help="env_config as JSON, or @file.json")
    parser.add_argument("--max-rows", type=int, default=2, help="audit at most this many rows (default 2)")
    parser.add_argument(
        "--budget-s",
        type=float,
        metavar="N",
        help="start no case after N seconds (per env); the rest are reported as not run",
    )
    parser.add_argument(
        "--step-timeout",
        type=float,
        default=STEP_TIMEOUT_S,
        metavar="SECONDS",
        help=f"an env call slower than this is an error (default {STEP_TIMEOUT_S:g}; 0: none)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="cases played at once, each on a fresh env (default 4: skyrl_gym.audit.DEFAULT_WORKERS)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (there is none unless stderr is a terminal)")
    parser.add_argument("--hack", action="append", metavar="NAME", help="play only this hack (repeatable)")
    parser.add_argument("--json", metavar="FILE", help="also write the reports as JSON here")
    parser.add_argument("--failures-only", action="store_true", help="print only the cases that failed")
    parser.set_defaults(func=run_audit)

    fingerprint = subparsers.add_parser(
        "fingerprint",
        help="print the hash of what decides an env's reward (verifier code, reward settings, data builder)",
        description="Print the env's reward fingerprint: a hash of the env's verifier code within its "
        "package, its registered kwargs, its dataset builder and the versions of what that code imports. "
        "Trajectories, checkpoints and model cards record it; a changed fingerprint means the reward may "
        "mean something else.",
    )
    fingerprint.add_argument("env_id", metavar="ID", nargs="+")
    fingerprint.add_argument("--explain", action="store_true", help="also list what went into the hash")
    fingerprint.set_defaults(func=run_fingerprint)


def run_audit(args: argparse.Namespace) -> int:
    from skyrl_gym.audit import ERROR as AUDIT_ERROR
    from skyrl_gym.audit import DEFAULT_WORKERS, AuditReport, CaseResult, ProfileError, UnknownHack, audit_env, write_json
    from skyrl_gym.checker import BrokenBuilder, NoRowsFor
    from skyrl_gym.data import row_place
    from skyrl_gym.errors import DataError, UnregisteredEnv
    from skyrl_gym.registration import fingerprint_or_none

    reports = []
    try:
        env_config = env_config_arg(args.env_config, args.env_id)
        if args.max_rows < 1:
            raise UsageError("--max-rows must be at least 1")
        if args.workers is not None and args.workers < 1:
            raise UsageError("--workers must be at least 1")
        seconds_arg(args.budget_s, "--budget-s")
        step_timeout_s = seconds_arg(args.step_timeout, "--step-timeout", zero="no limit")
        problem = output_problem(args.json) if args.json else None
        if problem:  # before the cases are played, not after
            raise UsageError(f"--json: {problem}")
        for env_id in args.env_id:
            try:
                report = audit_env(
                    env_id,
                    args.rows,
                    env_config=env_config,
                    max_rows=args.max_rows,
                    budget_s=args.budget_s,
                    step_timeout_s=step_timeout_s,
                    hacks=args.hack,
                    workers=DEFAULT_WORKERS if args.workers is None else args.workers,
                    progress=not args.no_progress and sys.stderr.isatty(),
                )
            except UnknownHack as exc:
                if len(args.env_id) == 1:
                    raise
                # `audit gsm8k math --hack "unclosed box"`: math has it, gsm8k not; the others are still audited
                report = AuditReport(env_id=env_id, skipped=str(exc))
            except BrokenBuilder as exc:
                if len(args.env_id) == 1:
                    raise
                report = AuditReport(env_id=env_id)  # a failed audit of this env; the others are still audited
                report.cases.append(CaseResult(0, "builder", "the env's dataset builder", "builder", "valid, "
                                               "repeatable rows", None, AUDIT_ERROR, str(exc)))
            report.fingerprint = fingerprint_or_none(report.env_id)
            reports.append(report)
            if args.failures_only:
                print(report.summary())
                for warning in report.warnings:
                    print(f"  WARNING: {warning}")
                for case in report.failures:
                    print(
                        f"  {row_place(case.row_index)} {case.kind}: {case.name}: {case.verdict} "
                        f"(expected {case.expected}, got {case.got}) {case.reason}"
                    )
                    if case.reply:
                        print(f"       reply: {case.reply[:160]!r}")
            else:
                print(report.table())
            if report.rows_source:
                print(f"  rows: {report.rows_source}")
    except BrokenBuilder as exc:  # the env's bug: a failed audit, not a bad argument
        error(str(exc))
        return 1
    except (UsageError, UnregisteredEnv, NoRowsFor, DataError, OSError, UnknownHack, ProfileError) as exc:
        error(str(exc))
        return 2
    if args.json:
        write_json(reports, args.json)
        print(f"wrote {args.json}")
    if not all(report.ok for report in reports):
        return 1
    return 3 if any(report.skipped or report.incomplete for report in reports) else 0


def run_fingerprint(args: argparse.Namespace) -> int:
    from skyrl_gym.errors import UnregisteredEnv
    from skyrl_gym.registration import spec

    try:
        for env_id in args.env_id:
            env_spec = spec(env_id)
            print(f"{env_spec.id}\t{env_spec.fingerprint}" if len(args.env_id) > 1 else env_spec.fingerprint)
            if args.explain:
                from skyrl_gym.fingerprint import fingerprint_parts

                for part in fingerprint_parts(env_spec):
                    print(f"  {part}")
    except UnregisteredEnv as exc:
        error(str(exc))
        return 2
    return 0
