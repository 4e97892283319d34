"""``skyrl-gym conform``: replay scripted episodes through every installed adapter and compare.

    skyrl-gym conform gsm8k_multi_turn                       # the env's built-in cases
    skyrl-gym conform my_env                                 # else builder rows, with their reference answers
    skyrl-gym conform gsm8k --rows rows.jsonl --actions actions.jsonl
    skyrl-gym conform math --adapters rollout,openai --model ./my-model

``--actions`` is a JSONL file with one line per row: a JSON list of assistant texts (or one string).
Prints an adapter x check table (ran, rewards, turns, masks) and exits 1 when an adapter disagrees
with the env. See :mod:`skygym_adapters.conformance`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, List

from skyrl_gym.errors import DataError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "conform",
        help="check that every installed adapter (rollout, veRL, TRL, Gymnasium, OpenAI) agrees with an env",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("env", help="env id, e.g. gsm8k_multi_turn")
    parser.add_argument("--rows", help="dataset rows (JSONL/JSON/Parquet); default: the env's built-in "
                        "cases, else rows from its dataset builder (or its golden cases) played with their "
                        "reference answers")
    parser.add_argument("--actions", help="JSONL: per row, a JSON list of assistant texts (needed with --rows)")
    parser.add_argument("--adapters", help="comma-separated adapter names to run (default: all installed)")
    parser.add_argument("--model", help="model folder or name whose tokenizer the token adapters use (default: embedded SmolLM2)")
    parser.add_argument("--env-config", metavar="JSON", help="env_config for the env as JSON, or @file.json")
    parser.add_argument("--limit", type=int, help="use only the first N rows")
    parser.set_defaults(func=run)


def _read_actions(path: str) -> List[Any]:
    actions = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: line {number} is not JSON ({exc.msg})")
        if isinstance(value, dict):
            value = value.get("actions")
        actions.append(value)
    return actions


def run(args: argparse.Namespace) -> int:
    from skygym_adapters.conformance import BadCases, Context, cases_from_rows, format_table, run_conformance
    from skygym_adapters.conformance import builtin_case_set, has_builtin_cases, reference_cases

    from skyrl_gym.cli._io import UsageError, env_config_arg

    try:
        env_config = env_config_arg(args.env_config, [args.env])
    except UsageError as exc:
        raise DataError(str(exc)) from None
    if args.rows:
        if not args.actions:
            raise DataError("--rows needs --actions (one JSON list of assistant texts per row)")
        from skyrl_gym.data import load_rows

        rows = load_rows(args.rows, limit=args.limit)
        actions = _read_actions(args.actions)[: len(rows)]
        for row in rows:
            row.setdefault("env_class", args.env)
        try:
            cases = cases_from_rows(rows, actions, env_config)
        except ValueError as exc:  # fewer action lines than rows, say
            raise DataError(f"{exc} (--actions {args.actions}: one JSON line per row of --rows {args.rows})") from None
    context = Context()
    if args.model:
        model_path = Path(args.model)
        if model_path.exists():
            context.model_dir = model_path
        else:
            from skygym_adapters.models import resolve_model

            context.model_dir = resolve_model(args.model).path
    only = [name.strip() for name in args.adapters.split(",")] if args.adapters else None
    if not args.rows and not has_builtin_cases(args.env):  # as `check` does: builder rows, else golden cases
        try:
            cases, source = reference_cases(args.env, size=args.limit or 2)
        except LookupError as exc:
            raise SystemExit(str(exc))
        print(f"conforming with {source}")
    if args.rows or not has_builtin_cases(args.env):
        try:
            report = run_conformance(args.env, cases, context=context, only=only)
        except BadCases as exc:  # two rows of one prompt, a row of another env
            raise DataError(str(exc)) from None
    else:  # the env's built-in cases, with the database / retrieval server / sandbox they need
        try:
            case_set = builtin_case_set(args.env)
            cases = case_set.__enter__()
        except LookupError as exc:
            raise SystemExit(str(exc))
        try:
            report = run_conformance(args.env, cases[: args.limit] if args.limit else cases, context=context, only=only)
        finally:
            case_set.__exit__(None, None, None)
    print(format_table(report))
    if not report.ok:
        return 1
    return 0 if report.ran() else 3  # as check and audit: nothing checked is not a pass
