"""The ``skyrl-gym`` command line.

Each subcommand lives in its own module with ``register(subparsers)``, which adds a parser and sets
``func``. Modules are imported only when listed here; keep their top level light (import heavy
packages inside the command function) so that ``skyrl-gym --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

# Subcommand modules, in the order `--help` shows them. A module whose optional dependencies are
# missing is still listed; its command reports what to install when run.
SUBCOMMAND_MODULES = [
    "skyrl_gym.cli.registry_cmds",  # list, info
    "skyrl_gym.cli.check_cmd",  # check
    "skyrl_gym.cli.step_cmd",  # step
    "skyrl_gym.cli.score_cmd",  # score
    "skyrl_gym.cli.eval_cmd",  # eval (rollouts with a model)
    "skyrl_gym.cli.serve_retriever",  # serve-retriever
    "skyrl_gym.cli.conform_cmd",  # conform
    "skyrl_gym.cli.train_cmd",  # train, quickstart
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skyrl-gym", description="Environments for RL on language models: list, inspect, check, drive, train."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name.rpartition(".")[0] and exc.name != module_name:
                raise
            continue  # a package that is not installed (e.g. adapters in a bare env-hub install)
        module.register(subparsers)
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
        print("interrupted", file=sys.stderr)
        return 130
