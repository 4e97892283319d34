"""The ``sandboxes`` command: ``serve`` (the HTTP service), ``run`` (one program), ``build-image``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import List, Optional

from skygym_sandboxes.http_bodies import CLIENT_TIMEOUT_S
from skygym_sandboxes.listening import check_can_listen, port_number


def _limits_from(args: argparse.Namespace):

    try:
        return _make_limits(args)
    except ValueError as exc:
        raise SystemExit(f"skygym-sandboxes: {exc}") from None


def _make_limits(args: argparse.Namespace):
    from skygym_sandboxes.types import Limits

    return Limits(
        wall_s=args.wall_s,
        cpu_s=args.cpu_s or args.wall_s,
        memory_mb=args.memory_mb,
        processes=args.processes,
        output_bytes=args.output_bytes,
    )


def _add_limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="local", choices=["local", "docker", "remote"])
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="backend option, e.g. --option pool_size=4 --option isolation='\"bwrap\"'",
    )
    ceiling = " (serve: the most a request may ask for)"
    parser.add_argument("--wall-s", type=float, default=10.0, help="seconds of real time per run" + ceiling)
    parser.add_argument(
        "--cpu-s", type=float, default=None, help="CPU seconds per run (default: --wall-s)" + ceiling
    )
    parser.add_argument("--memory-mb", type=int, default=1024, help="memory per run" + ceiling)
    parser.add_argument("--processes", type=int, default=64, help="processes and threads per run" + ceiling)
    parser.add_argument(
        "--output-bytes", type=int, default=1_000_000, help="stdout and stderr, each" + ceiling
    )


def _backend_options(args: argparse.Namespace) -> dict:
    options = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--option needs KEY=VALUE, got {item!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def _serve(args: argparse.Namespace) -> int:
    from skygym_sandboxes.factory import get_sandbox
    from skygym_sandboxes.service import serve

    from skygym_sandboxes.service import TOKEN_ENV, is_loopback

    from skygym_sandboxes.origins import server_token

    token = server_token(args.token, TOKEN_ENV)
    if not token and not is_loopback(args.host):
        print(
            f"skygym-sandboxes serve: refusing to serve on {args.host} without a bearer token (anyone who "
            f"can reach it could run code). Set {TOKEN_ENV} or pass --token, or bind 127.0.0.1.",
            file=sys.stderr,
        )
        return 2
    max_concurrency = args.max_concurrency or os.cpu_count() or 1
    options = _backend_options(args)
    if options.get("isolation") == "none" and not args.allow_no_isolation:
        print(
            "skygym-sandboxes serve: refusing to serve with isolation=none: every client's code would run on "
            "this host with only rlimits around it. Pass --allow-no-isolation if every client is trusted.",
            file=sys.stderr,
        )
        return 2
    if args.max_body_bytes is not None and args.max_body_bytes < 1024:
        print("skygym-sandboxes serve: --max-body-bytes must be at least 1024", file=sys.stderr)
        return 2
    if not args.client_timeout > 0:
        print("skygym-sandboxes serve: --client-timeout must be above 0", file=sys.stderr)
        return 2
    try:
        check_can_listen(args.host, args.port)
    except ValueError as exc:
        print(f"skygym-sandboxes serve: {exc}", file=sys.stderr)
        return 2
    if args.backend == "local":
        options.setdefault("pool_size", max_concurrency)
    sandbox = get_sandbox(args.backend, limits=_limits_from(args), **options)
    print(
        f"sandboxes: serving {sandbox.name} on http://{args.host}:{args.port} "
        f"(at most {max_concurrency} programs at once, {args.max_queue} waiting; "
        f"{'bearer token required' if token else 'no token'})",
        file=sys.stderr,
        flush=True,
    )
    accounting = getattr(sandbox, "memory_accounting", None)
    if accounting:
        print(f"sandboxes: memory limited {accounting}", file=sys.stderr, flush=True)
    serve(
        sandbox,
        host=args.host,
        port=args.port,
        max_concurrency=max_concurrency,
        log_level=args.log_level,
        token=token,
        max_queue=args.max_queue,
        client_timeout_s=args.client_timeout,
        **({"max_body_bytes": args.max_body_bytes} if args.max_body_bytes is not None else {}),
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from skygym_sandboxes.factory import get_sandbox
    from skygym_sandboxes.types import RunRequest

    code = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    stdin = Path(args.stdin).read_text(encoding="utf-8") if args.stdin else ""
    with get_sandbox(args.backend, limits=_limits_from(args), **_backend_options(args)) as sandbox:
        result = sandbox.run(RunRequest(code=code, stdin=stdin))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        print(
            f"[{result.status}] exit={result.exit_code} wall={result.wall_time_s:.3f}s {result.message}".rstrip(),
            file=sys.stderr,
        )
    return 0 if result.ok else 1


def _build_image(args: argparse.Namespace) -> int:
    from skygym_sandboxes.images.build_image import build_image

    print(build_image(tag=args.tag, suite=args.suite, rebuild=args.rebuild))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skygym-sandboxes", description="Run untrusted code safely.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="SandboxFusion-compatible HTTP service (/run_code, /health)")
    _add_limit_options(serve)
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default loopback; any other needs a token)"
    )
    serve.add_argument("--port", type=port_number, default=8080)
    serve.add_argument(
        "--max-concurrency", type=int, default=None, help="programs run at once (default: the CPU count)"
    )
    serve.add_argument("--max-queue", type=int, default=64, help="requests that may wait; past it: HTTP 429")
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest request body; larger ones (chunked too) get HTTP 413 (default 64 MiB)",
    )
    serve.add_argument(
        "--client-timeout",
        type=float,
        default=CLIENT_TIMEOUT_S,
        help="seconds a client has to send a request's head, and again its body; slower ones are cut off "
        f"(default {CLIENT_TIMEOUT_S:g})",
    )
    serve.add_argument(
        "--allow-no-isolation",
        action="store_true",
        help="allow --option isolation=none (the local backend WITHOUT namespaces: only for trusted code)",
    )
    serve.add_argument(
        "--token",
        default=None,
        help="bearer token every request must carry (default: $SKYGYM_SANDBOX_TOKEN); required off loopback",
    )
    serve.add_argument("--log-level", default="warning")
    serve.set_defaults(func=_serve)

    run = commands.add_parser("run", help="run one Python file (or - for stdin) in a sandbox")
    _add_limit_options(run)
    run.add_argument("file")
    run.add_argument("--stdin", default=None, help="a file fed to the program's stdin")
    run.add_argument("--json", action="store_true", help="print the whole result as JSON")
    run.set_defaults(func=_run)

    image = commands.add_parser(
        "build-image", help="build the docker backend's image (debootstrap + docker import)"
    )
    image.add_argument("--tag", default=None)
    image.add_argument("--suite", default="bookworm")
    image.add_argument("--rebuild", action="store_true")
    image.set_defaults(func=_build_image)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
