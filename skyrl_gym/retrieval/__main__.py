"""``python -m skyrl_gym.retrieval --corpus FILE.jsonl``: the same as ``skyrl-gym serve-retriever``."""

from __future__ import annotations

import argparse

from skyrl_gym.retrieval import command


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skyrl_gym.retrieval", description=command.DESCRIPTION)
    command.add_arguments(parser)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
