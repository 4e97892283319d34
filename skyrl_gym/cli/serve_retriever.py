"""``skyrl-gym serve-retriever``: serve a BM25 (or dense) index over a JSONL corpus for the search envs."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve-retriever",
        help="serve a retrieval index over a JSONL corpus (POST /retrieve)",
        description=(
            "Build (or load) an index over a JSONL corpus (one {\"id\", \"contents\"} object per line, "
            "or {\"title\", \"text\"}) and serve it at POST /retrieve, the API the search envs call. "
            "BM25 needs the 'search' extra; --retriever dense also needs the 'dense' extra (faiss)."
        ),
    )
    parser.add_argument("--corpus", required=True, help="JSONL corpus file")
    parser.add_argument("--index", default=None, help="folder to save the index in and reload it from")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--topk", type=int, default=3, help="results per query when the request gives no topk")
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "dense"])
    parser.add_argument("--threads", type=int, default=1,
                        help="bm25: threads searching one batch of queries (-1: all CPUs; default 1)")
    parser.add_argument("--encoder", default="hf", choices=["hf", "hashing"],
                        help="dense only: 'hf' = mean-pooled local Hugging Face model (--encoder-model), "
                             "'hashing' = hashed bag of words (no model)")
    parser.add_argument("--encoder-model", default=None, help="dense+hf: model folder on disk")
    parser.add_argument("--gguf-file", default=None, help="dense+hf: GGUF weights file inside the model folder")
    parser.add_argument("--query-prefix", default="", help="dense+hf: text put before queries (E5: 'query: ')")
    parser.add_argument("--passage-prefix", default="", help="dense+hf: text put before documents (E5: 'passage: ')")
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run)


def _encoder(args: argparse.Namespace) -> Any:
    from skyrl_gym.retrieval.dense import HashingEncoder, TransformersEncoder

    if args.encoder == "hashing":
        return HashingEncoder()
    if not args.encoder_model:
        raise ValueError("--retriever dense --encoder hf needs --encoder-model PATH (a local model folder)")
    return TransformersEncoder(args.encoder_model, gguf_file=args.gguf_file, query_prefix=args.query_prefix,
                               passage_prefix=args.passage_prefix)


def run(args: argparse.Namespace) -> int:
    needed = ["fastapi", "uvicorn"] + (["bm25s"] if args.retriever == "bm25" else ["faiss", "numpy"])
    for module in needed:
        try:
            __import__(module)
        except ImportError:
            extra = "search" if module in ("fastapi", "uvicorn", "bm25s") else "dense"
            print(f"serve-retriever needs {module}: pip install 'skyrl-gym[{extra}]'", file=sys.stderr)
            return 1
    from skyrl_gym.errors import DataError
    from skyrl_gym.retrieval.build import load_retriever
    from skyrl_gym.retrieval.server import create_app, serve

    try:
        encoder = _encoder(args) if args.retriever == "dense" else None
        retriever, documents = load_retriever(args.corpus, args.index, args.retriever, encoder,
                                              log=lambda message: print(message, flush=True))
    except (OSError, ValueError, DataError) as exc:
        print(f"serve-retriever: {exc}", file=sys.stderr)
        return 1
    if hasattr(retriever, "threads"):
        retriever.threads = args.threads
    app = create_app(retriever, documents, default_topk=args.topk, name=args.retriever)
    serve(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
