"""The retrieval service's command line, shared by ``skyrl-gym serve-retriever`` and
``python -m skyrl_gym.retrieval``: the options (each retriever kind adds its own) and ``run``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from skygym_sandboxes.listening import check_can_listen, port_number
from skyrl_gym.retrieval.kinds import join_missing, missing_modules, plugin_errors, retriever_kinds
from skyrl_gym.retrieval.server import CLIENT_TIMEOUT_S, MAX_BODY_BYTES, TOKEN_ENV

DESCRIPTION = (
    "Build (or load) an index over a JSONL corpus (one {\"id\", \"contents\"} object per line, "
    "or {\"title\", \"text\"}) and serve it at POST /retrieve, the API the search envs call. "
    "The server needs the 'search' extra; --retriever dense also needs the 'dense' extra (faiss)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    kinds = retriever_kinds()
    warn_broken_plugins()
    parser.add_argument("--corpus", required=True, help="JSONL corpus file")
    parser.add_argument("--index", default=None, help="folder to save the index in and reload it from")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=port_number, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--topk", type=int, default=3, help="results per query when the request gives no topk")
    parser.add_argument("--token", default=None,
                        help=f"bearer token every request must carry (default: ${TOKEN_ENV}); "
                             "required off loopback")
    parser.add_argument("--client-timeout", type=float, default=CLIENT_TIMEOUT_S,
                        help="seconds a client has to send a request's head, and again its body "
                             f"(default {CLIENT_TIMEOUT_S:g})")
    parser.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES,
                        help=f"largest request body; larger ones get 413 (default {MAX_BODY_BYTES})")
    parser.add_argument("--retriever", default="bm25", choices=sorted(kinds),
                        help="index kind: " + "; ".join(f"{name}: {kind.help}" for name, kind in sorted(kinds.items())))
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    for name, kind in sorted(kinds.items()):
        kind.add_arguments(parser.add_argument_group(f"--retriever {name}"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    kind = retriever_kinds()[args.retriever]
    problems = missing_modules({"fastapi": "pip install 'skyrl-gym[search]'",
                                "uvicorn": "pip install 'skyrl-gym[search]'"}) + kind.missing()
    if problems:
        print(f"error: serve-retriever --retriever {args.retriever} needs: {join_missing(problems)}",
              file=sys.stderr)
        return 2  # as every command whose extra is missing (docs/cli.md)
    from skyrl_gym.errors import DataError
    from skyrl_gym.retrieval.build import load_retriever
    from skyrl_gym.retrieval.server import check_bind, create_app, serve

    from skygym_sandboxes.origins import server_token

    token = server_token(args.token, TOKEN_ENV)
    try:
        if args.max_body_bytes < 1024:
            raise ValueError(f"--max-body-bytes must be at least 1024, got {args.max_body_bytes}")
        if not args.client_timeout > 0:
            raise ValueError(f"--client-timeout must be above 0, got {args.client_timeout}")
        check_bind(args.host, token)  # before the index is built, which may take long
        check_can_listen(args.host, args.port)
    except ValueError as exc:
        print(f"serve-retriever: {exc}", file=sys.stderr)
        return 2
    try:
        retriever, documents = load_retriever(args.corpus, args.index, args.retriever, vars(args),
                                              log=lambda message: print(message, flush=True))
    except (OSError, ValueError, DataError) as exc:  # the user's corpus or index folder: one line, as bad input
        what = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.filename else exc
        print(f"error: serve-retriever: {what}", file=sys.stderr)
        return 2
    app = create_app(retriever, documents, default_topk=args.topk, name=args.retriever, token=token,
                     max_body_bytes=args.max_body_bytes, client_timeout_s=args.client_timeout)
    serve(app, host=args.host, port=args.port, log_level=args.log_level, token=token,
          client_timeout_s=args.client_timeout)
    return 0


def warn_broken_plugins(stream: Any = sys.stderr) -> None:
    for name, error in sorted(plugin_errors.items()):
        print(f"warning: retriever plugin {name!r} failed to load: {error}", file=stream)
