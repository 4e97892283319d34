"""``skyrl-gym score``: score responses through the envs their rows name, with a progress bar.

    skyrl-gym score --rows test.jsonl --response-field extra_info.answer     # reference solutions
    skyrl-gym score --rows rows.parquet --responses completions.jsonl          # {"response": ...} per line

Each row is scored by a fresh env (``env_class``, or ``--env``) with one step. Prints a table per env
(rows, mean reward, share of reward 1.0, errors, episodes/s) and optionally writes one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import Any, Dict, List, Mapping, Optional, Tuple


def _dig(row: Mapping[str, Any], dotted: str) -> Any:
    """``row``'s field at the ``dotted`` path; a ``KeyError`` saying which part is missing and what is there."""
    value: Any = row
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(value, Mapping) or part not in value:
            where = ".".join(parts[:depth]) or "the row"
            there = (f"{where} has {', '.join(sorted(map(str, value))) or 'no fields'}" if isinstance(value, Mapping)
                     else f"{where} is a {type(value).__name__}, not an object")
            raise KeyError(f"no field {dotted!r} ({there})")
        value = value[part]
    return value


MAX_ERRORS_SHOWN = 5  # rows that raised, named on stderr after the table


def score_rows(
    rows: List[Mapping[str, Any]],
    responses: List[str],
    env_id: Optional[str] = None,
    env_config: Optional[Dict[str, Any]] = None,
    progress: bool = True,
) -> List[Dict[str, Any]]:
    """One result dict per row: env, reward, done, metadata, or the error that row raised; and its seconds."""
    from skyrl_gym.data import row_extras, row_place
    from skyrl_gym.episode import score_response

    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        tqdm = None
    iterator = zip(rows, responses)
    if progress and tqdm is not None:
        iterator = tqdm(iterator, total=len(rows), desc="scoring", unit="row")
    results = []
    for index, (row, response) in enumerate(iterator):
        env_class = env_id or row.get("env_class")
        result: Dict[str, Any] = {"index": index, "env": env_class}
        started = time.perf_counter()
        try:
            if not env_class:
                raise ValueError(f"{row_place(index)} has no env_class; pass --env")
            episode = score_response(env_class, row.get("prompt") or [], response, env_config or {}, row_extras(row))
            if episode.exception is not None:
                raise episode.exception
            step = episode.steps[0]
            result.update(reward=step.reward, done=step.done, metadata=step.metadata)
        except Exception as exc:  # one bad row is reported, the rest are still scored
            result.update(reward=None, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=3))
        result["seconds"] = time.perf_counter() - started
        results.append(result)
    return results


def summarize(results: List[Dict[str, Any]], seconds: float) -> List[Dict[str, Any]]:
    """A line per env. A row that raised counts as reward 0, as an episode error does in training: leaving it out
    showed 100% solved beside 2 errors."""
    by_env: Dict[str, List[Dict[str, Any]]] = {}
    for result in results:
        by_env.setdefault(str(result["env"]), []).append(result)
    table = []
    for env_id, items in sorted(by_env.items()):
        rewards = [r["reward"] if r.get("reward") is not None else 0.0 for r in items]
        table.append(
            {
                "env": env_id,
                "rows": len(items),
                "mean_reward": sum(rewards) / len(rewards) if rewards else float("nan"),
                "solved": sum(1 for r in rewards if r >= 1.0) / len(rewards) if rewards else float("nan"),
                "errors": sum(1 for r in items if "error" in r),
                # each env's rows over the time they took (all envs' rows over the whole run gave every env one rate)
                "episodes_per_s": _rate(len(items), sum(r.get("seconds", 0.0) for r in items) or seconds),
            }
        )
    return table


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def print_table(table: List[Dict[str, Any]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover
        for line in table:
            print(line)
        return
    view = Table(title="skyrl-gym score")
    for column in ("env", "rows", "mean reward", "reward = 1.0", "errors", "episodes/s"):
        view.add_column(column, justify="left" if column == "env" else "right")
    for line in table:
        view.add_row(
            line["env"], str(line["rows"]), f"{line['mean_reward']:.4f}", f"{line['solved']:.1%}",
            str(line["errors"]), f"{line['episodes_per_s']:,.0f}",
        )
    Console().print(view)


def run(args: argparse.Namespace) -> int:
    from skyrl_gym.cli._io import UsageError, env_config_arg, output_problem, unknown_env_problem
    from skyrl_gym.text import counted
    from skyrl_gym.data import load_rows, read_records, row_place

    rows = load_rows(args.rows, limit=args.limit)
    problem = unknown_env_problem(args.env, rows)
    if problem:  # refused up front, not found once per row as a table of errors
        print(f"error: {problem}", file=sys.stderr)
        return 2
    problem = output_problem(args.output) if args.output else None
    if problem:  # before the rows are scored, not after
        print(f"error: --output: {problem}", file=sys.stderr)
        return 2
    try:
        env_config = env_config_arg(args.env_config, [args.env] if args.env else [r.get("env_class") for r in rows],
                                    default={})
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.responses:
        records = list(read_records(args.responses))
        responses = [r["response"] if isinstance(r, Mapping) else str(r) for r in records][: len(rows)]
        if len(responses) != len(rows):
            print(f"error: {args.responses} has {len(responses)} responses for {len(rows)} rows (--limit "
                  f"{len(responses)} scores the first {len(responses)} rows)", file=sys.stderr)
            return 2
    else:
        from skyrl_gym.checker import reference_action

        responses = []
        for index, row in enumerate(rows):
            if args.response_field:
                try:
                    responses.append(str(_dig(row, args.response_field)))
                    continue
                except KeyError as exc:
                    missing = exc.args[0]
            else:  # the row's reference answer, as `check` plays it
                reference = reference_action(row)
                if reference is not None:
                    responses.append(reference)
                    continue
                missing = ("no reference answer (reference_action, or extra_info's reference_action, answer or "
                           "solution)")
            print(f"error: {row_place(index, args.rows)}: {missing}; use --response-field or --responses",
                  file=sys.stderr)
            return 2
    if args.perturb:
        changed = [_wrong_answer(text) for text in responses]
        responses = [text for text, _ in changed]
        unread = sum(1 for _, found in changed if not found)
        if changed and unread == len(changed):  # scores of the answers as they were: not what --perturb means
            print(f"error: --perturb changes a final '#### N' or \\boxed{{}} answer, and none of the "
                  f"{counted(len(changed), 'response')} has one (it checks the math envs' answers: gsm8k, math, "
                  "multiply; for another env give wrong answers with --responses)", file=sys.stderr)
            return 2
        if unread:
            print(f"warning: --perturb: {unread} of {counted(len(changed), 'response')} had no final '#### N' or "
                  "\\boxed{} answer to change; ' #### -1' was added to them, which their env may not read",
                  file=sys.stderr)
    start = time.perf_counter()
    results = score_rows(rows, responses, env_id=args.env, env_config=env_config, progress=not args.quiet)
    table = summarize(results, time.perf_counter() - start)
    print_table(table)
    errors = [r for r in results if "error" in r]
    for result in errors[:MAX_ERRORS_SHOWN]:  # which rows, and why, without --output
        print(f"error: {row_place(result['index'], args.rows)}: {result['error'][:300]}", file=sys.stderr)
    if len(errors) > MAX_ERRORS_SHOWN:
        print(f"... and {len(errors) - MAX_ERRORS_SHOWN} more rows that raised (--output FILE keeps every error)",
              file=sys.stderr)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            for result in results:
                handle.write(json.dumps(result, default=str) + "\n")
        print(f"wrote {counted(len(results), 'result')} to {args.output}")
    return 1 if any("error" in r for r in results) else 0


def _wrong_answer(text: str) -> Tuple[str, bool]:
    """The same text with its final answer made wrong, and whether it had one: the number after its last ``#### ``
    plus one, else its last ``\\boxed{X}`` as ``\\boxed{(X)+1}``; else ``#### -1`` added (False)."""
    from skyrl_gym.rewards.boxed import last_boxed_only_string, remove_boxed

    head, marker, tail = text.rpartition("#### ")
    if marker:
        number = tail.strip().replace(",", "")
        try:
            return f"{head}{marker}{int(float(number)) + 1}", True
        except ValueError:
            pass
    box = last_boxed_only_string(text)
    if box is not None:
        at = text.rfind(box)
        return f"{text[:at]}\\boxed{{({remove_boxed(box).strip()})+1}}{text[at + len(box):]}", True
    return text + " #### -1", False


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("score", help="score responses through the envs of their rows", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", required=True, help="dataset rows (.jsonl, .json or .parquet)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--responses", help='file with one {"response": ...} per row')
    source.add_argument("--response-field", default=None,
                        help="dotted field of the row holding the response (default: the row's reference answer, "
                             "as check plays it: reference_action, else extra_info's reference_action, answer or "
                             "solution)")
    parser.add_argument("--perturb", action="store_true", help="make each response's final answer wrong ('#### N' plus one, or \\boxed{(X)+1}): expect reward 0")
    parser.add_argument("--env", help="env id for every row (default: each row's env_class)")
    parser.add_argument("--env-config", metavar="JSON", help="env_config as JSON, or @file.json")
    parser.add_argument("--limit", type=int, help="score only the first N rows")
    parser.add_argument("--output", help="write one JSON result per row here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)
