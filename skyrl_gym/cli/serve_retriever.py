"""``skyrl-gym serve-retriever``: serve a BM25 index over a JSONL corpus for the search envs."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve-retriever",
        help="serve a BM25 retrieval index over a JSONL corpus (POST /retrieve)",
        description=(
            "Build (or load) a BM25 index over a JSONL corpus (one {\"id\", \"contents\"} object per line, "
            "or {\"title\", \"text\"}) and serve it at POST /retrieve, the API the search envs call. "
            "Needs the 'search' extra."
        ),
    )
    parser.add_argument("--corpus", required=True, help="JSONL corpus file")
    parser.add_argument("--index", default=None, help="folder to save the index in and reload it from")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--topk", type=int, default=3, help="results per query when the request gives no topk")
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        from skyrl_gym.retrieval.build import load_bm25
        from skyrl_gym.retrieval.server import create_app, serve
        import bm25s  # noqa: F401
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        print(f"serve-retriever needs the search extra ({exc.name} is missing): pip install 'skyrl-gym[search]'",
              file=sys.stderr)
        return 1
    from skyrl_gym.errors import DataError

    try:
        retriever, documents = load_bm25(args.corpus, args.index, log=lambda m: print(m, flush=True))
    except (OSError, DataError) as exc:
        print(f"serve-retriever: {exc}", file=sys.stderr)
        return 1
    serve(create_app(retriever, documents, default_topk=args.topk), host=args.host, port=args.port, log_level=args.log_level)
    return 0
