"""``skyrl-gym swe``: build, validate and score SWE task instances (needs a Docker engine).

    skyrl-gym swe build --out DIR [--limit N] [--projects toolz,six]     # DIR/instances.jsonl, dataset_card.md
    skyrl-gym swe build ... --issue-writer URL MODEL                     # issues by a model (OpenAI-compatible)
    skyrl-gym swe validate DIR/instances.jsonl [--limit N]                # gold and empty patches
    skyrl-gym swe score --instances F --predictions P                     # {"instance_id", "model_patch"} lines
    skyrl-gym swe projects                                                # what build draws from

The Docker engine is ``--docker-host``, else ``$SKYGYM_DOCKER_HOST``, else docker's own default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

from skyrl_gym.cli._io import UsageError, terminated_as_interrupt
from skyrl_gym.text import counted


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("swe", help="build, validate and score SWE task instances (docker)", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="swe_command", metavar="SWE_COMMAND")

    build = commands.add_parser("build", help="synthesize instances from pinned Python projects")
    build.add_argument("--out", required=True, help="folder for instances.jsonl and build_summary.json")
    build.add_argument("--limit", type=int, default=100, help="how many instances in all (default 100)")
    build.add_argument("--projects", default="", help="comma-separated project names (default: all; see `swe projects`)")
    build.add_argument("--seed", type=int, default=0, help="which bugs are tried first (default 0)")
    build.add_argument("--issue-writer", nargs=2, metavar=("URL", "MODEL"), default=None,
                       help="write the issues with a model behind an OpenAI-compatible endpoint (default: the offline "
                            "template); $SKYGYM_ISSUE_WRITER_API_KEY is sent as its key")
    build.set_defaults(func=_guarded(_build))

    validate = commands.add_parser("validate", help="run the gold and the empty patch on each instance")
    validate.add_argument("instances", help="a JSONL file of SWE-bench rows")
    validate.add_argument("--limit", type=int, default=None, help="only the first N instances")
    validate.add_argument("--report", default=None, help="where to write the JSON report (default: beside the file)")
    validate.set_defaults(func=_guarded(_validate))

    score = commands.add_parser("score", help="the resolved report of predictions from any agent")
    score.add_argument("--instances", required=True, help="a JSONL file of SWE-bench rows (or a hub dataset name)")
    score.add_argument("--predictions", required=True, help='JSONL with {"instance_id", "model_patch"} per line')
    score.add_argument("--report", default=None, help="where to write the JSON report (default: PREDICTIONS.report.json)")
    score.set_defaults(func=_guarded(_score))

    projects = commands.add_parser("projects", help="list the projects `build` synthesizes from")
    projects.set_defaults(func=_guarded(_projects))

    for sub in (build, validate, score):
        sub.add_argument("--docker-host", default=None, help="the Docker engine (default: $SKYGYM_DOCKER_HOST or docker's)")
        sub.add_argument("--workers", type=int, default=2, help="containers at a time (default 2)")
        sub.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Bad input and a missing Docker engine are one line on stderr and exit code 2, not a traceback."""

    def run(args: argparse.Namespace) -> int:
        from skygym_sandboxes.types import SandboxUnavailable

        from skyrl_gym.errors import DataError

        try:  # a terminated run cleans up like an interrupted one: containers are removed on the way out
            with terminated_as_interrupt():
                return command(args)
        except (UsageError, DataError, FileNotFoundError, SandboxUnavailable) as exc:
            print(f"error: skyrl-gym swe {args.swe_command}: {exc}", file=sys.stderr)
            return 2

    return run


def _client(args: argparse.Namespace) -> Any:
    from skygym_sandboxes.containers import docker_client

    if args.docker_host:
        os.environ["SKYGYM_DOCKER_HOST"] = args.docker_host
    return docker_client(args.docker_host)


def _projects(args: argparse.Namespace) -> int:
    from skyrl_gym.envs.swe.synth.projects import PROJECTS

    for project in PROJECTS.values():
        print(f"{project.name:12} {project.requirement:22} {project.repo}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from skyrl_gym.envs.swe.synth.builder import build
    from skyrl_gym.envs.swe.synth.projects import select_projects

    try:
        projects = select_projects(args.projects)
    except ValueError as exc:
        raise UsageError(f"--projects: {exc}") from None
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    writer = None
    if args.issue_writer:
        from skyrl_gym.envs.swe.synth.issue import IssueWriter

        url, model = args.issue_writer
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--issue-writer: the URL must start with http:// or https://, got {url!r}")
        writer = IssueWriter(url, model, api_key=os.environ.get("SKYGYM_ISSUE_WRITER_API_KEY") or None)
    _client(args)
    started = time.monotonic()
    try:
        instances, summaries = build(Path(args.out), projects, limit=args.limit, seed=args.seed,
                                     base_url=args.docker_host, progress=not args.no_progress, workers=args.workers,
                                     writer=writer)
    finally:
        if writer is not None:
            writer.close()
    # "tested": bugs whose tests were run; the discarded count those too, and those passed over before any test
    print(f"{'project':12} {'kept':>5} {'tested':>6} {'seconds':>8}  discarded (tested or passed over)")
    for summary in summaries:
        reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(summary.discarded.items())) or "-"
        if summary.error:
            reasons = f"FAILED: {summary.error.splitlines()[0]}"
        print(f"{summary.project:12} {summary.kept:>5} {summary.tried:>6} {summary.seconds:>8.1f}  {reasons}")
    print(f"{counted(len(instances), 'instance')} from {counted(sum(1 for s in summaries if s.kept), 'project')} in "
          f"{time.monotonic() - started:.0f} s -> {Path(args.out) / 'instances.jsonl'} (card: {Path(args.out) / 'dataset_card.md'})")
    return 0 if instances else 1


def _evaluate(args: argparse.Namespace, instances: Sequence[Any], patches: Sequence[str], desc: str) -> List[Any]:
    from tqdm.auto import tqdm

    from skyrl_gym.envs.swe.grading import evaluate_many

    client = _client(args)
    with tqdm(total=len(instances), desc=desc, unit="instance", disable=args.no_progress) as bar:
        return evaluate_many(instances, patches, client=client, workers=args.workers, on_done=lambda report: bar.update(1))


def _check_report_path(path: Path) -> None:
    """Refuses a report path that cannot be written before the containers run, not after."""
    from skyrl_gym.cli._io import output_problem

    problem = output_problem(path)
    if problem:
        raise UsageError(f"--report: {problem}")


def _validate(args: argparse.Namespace) -> int:
    from skyrl_gym.envs.swe.instances import load_instances

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    instances = load_instances(args.instances, limit=args.limit)
    if not instances:
        raise UsageError(f"{args.instances} holds no instances")
    report_path = Path(args.report) if args.report else Path(args.instances).with_name("validation.json")
    _check_report_path(report_path)
    gold = _evaluate(args, instances, [instance.patch for instance in instances], "gold patches")
    empty = _evaluate(args, instances, ["" for _ in instances], "empty patches")
    total = len(instances)
    gold_resolved = sum(report.resolved for report in gold)
    empty_resolved = sum(report.resolved for report in empty)
    setup_failed = {report.instance_id: report.error for report in [*gold, *empty] if report.instance_error}
    print(f"gold resolved {gold_resolved}/{total}")
    print(f"empty resolved {empty_resolved}/{total}")
    if setup_failed:
        print(f"set-up failed {len(setup_failed)}/{total} (neither patch could be judged)")
    for instance_id, error in setup_failed.items():
        print(f"  set-up failed for {instance_id}: {error.removeprefix('set-up failed: '):.300}")
    for report in gold:
        if not report.resolved and report.instance_id not in setup_failed:
            print(f"  gold does not resolve {report.instance_id}: {(report.error or report.fail_to_pass['failure'])!s:.300}")
    for report in empty:
        if report.resolved:
            print(f"  the empty patch resolves {report.instance_id}: its FAIL_TO_PASS tests pass without a fix")
    report_path.write_text(json.dumps({
        "instances": total, "gold_resolved": gold_resolved, "empty_resolved": empty_resolved, "setup_failed": setup_failed,
        "gold": [report.to_dict() for report in gold], "empty": [report.to_dict() for report in empty],
    }, indent=2) + "\n")
    print(f"report: {report_path}")
    return 0 if gold_resolved == total and empty_resolved == 0 else 1


def _read_predictions(path: str) -> Dict[str, str]:
    from skyrl_gym.envs.swe.instances import read_jsonl

    predictions: Dict[str, str] = {}
    for number, row in enumerate(read_jsonl(path), 1):
        if not isinstance(row, dict) or "instance_id" not in row:
            raise UsageError(f"{path}: line {number} has no \"instance_id\"")
        if not isinstance(row["instance_id"], str):
            raise UsageError(
                f"{path}: line {number}'s \"instance_id\" is {row['instance_id']!r}, not an instance's id (a string): "
                "`skyrl-gym agent eval` writes the row's position there unless its config has "
                "data.instance_id_key: instance_id")
        patch = row.get("model_patch")
        if patch is None:
            patch = ""
        if not isinstance(patch, str):
            raise UsageError(f"{path}: line {number} ({row['instance_id']}): \"model_patch\" must be a string")
        if row["instance_id"] in predictions:
            raise UsageError(f"{path}: line {number} repeats the instance {row['instance_id']!r}")
        predictions[row["instance_id"]] = patch
    return predictions


def _score(args: argparse.Namespace) -> int:
    from skyrl_gym.envs.swe.instances import load_instances

    try:
        predictions = _read_predictions(args.predictions)
    except FileNotFoundError as exc:
        raise UsageError(f"--predictions: {exc}") from None
    instances = {instance.instance_id: instance for instance in load_instances(args.instances)}
    unknown = sorted(set(predictions) - set(instances))
    if unknown:
        raise UsageError(f"--predictions names instances that {args.instances} does not hold: {', '.join(unknown[:5])}")
    chosen = [instances[instance_id] for instance_id in predictions]
    report_path = Path(args.report) if args.report else Path(args.predictions + ".report.json")
    _check_report_path(report_path)
    reports = _evaluate(args, chosen, [predictions[instance.instance_id] for instance in chosen], "scoring")
    resolved = [report.instance_id for report in reports if report.resolved]
    summary = {
        "total_instances": len(instances),
        "submitted_instances": len(predictions),
        "empty_patch_instances": sum(1 for patch in predictions.values() if not patch.strip()),
        "patch_not_applied": sum(1 for report in reports if not report.patch_applied and not report.instance_error
                                 and predictions[report.instance_id].strip()),
        "setup_failed_ids": [report.instance_id for report in reports if report.instance_error],
        "resolved_instances": len(resolved),
        "resolved_ids": resolved,
        "unresolved_ids": [report.instance_id for report in reports if not report.resolved],
        # patches whose forgery the planted tests caught, and those the hidden tests alone took for resolved
        "forgery_caught_ids": [report.instance_id for report in reports
                               if report.forgery_resolved_hidden_tests is not None],
        "forgery_would_have_resolved_ids": [report.instance_id for report in reports
                                            if report.forgery_resolved_hidden_tests],
        "reports": [report.to_dict() for report in reports],
    }
    report_path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"resolved {len(resolved)}/{len(predictions)} submitted ({len(instances)} instances); report: {report_path}")
    if summary["forgery_caught_ids"]:
        print(f"forged test results caught by the planted tests: {len(summary['forgery_caught_ids'])} "
              f"({len(summary['forgery_would_have_resolved_ids'])} of them resolved on the hidden tests alone)")
    # A patch that does not apply, or an instance that could not be set up, is a failure of the run: one line each.
    failed = [report for report in reports if report.instance_error or (not report.patch_applied and report.error
                                                                         and predictions[report.instance_id].strip())]
    for report in failed:
        print(f"error: {report.instance_id}: {report.error.splitlines()[0]}", file=sys.stderr)
    return 1 if failed else 0


__all__ = ["register"]
