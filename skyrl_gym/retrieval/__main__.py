"""``python -m skyrl_gym.retrieval --corpus FILE.jsonl``: the same as ``skyrl-gym serve-retriever``."""

from __future__ import annotations

import argparse
import sys

from skyrl_gym.cli import serve_retriever


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skyrl_gym.retrieval")
    serve_retriever.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve-retriever", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
