"""The ``skyrl-gym`` command line.

Each subcommand lives in its own module with ``register(subparsers)``, which adds a parser and sets
``func``. The core's own modules are listed here; commands that need a higher layer (``eval`` and
``conform`` from ``skygym_adapters``, ``train`` and ``quickstart`` from ``skygym_train``) are contributed by
the package that owns them through the ``skyrl_gym.cli`` entry-point group, so the core never imports
upward. Keep a module's top level light (import heavy packages inside the command function) so that
``skyrl-gym --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from importlib.metadata import entry_points
from typing import Any, Iterator, List, Optional

# Entry-point group through which other packages contribute subcommand modules (each with ``register``).
ENTRY_POINT_GROUP = "skyrl_gym.cli"

# Subcommand modules, in the order `--help` shows them. A module whose optional dependencies are
# missing is still listed; its command reports what to install when run.
SUBCOMMAND_MODULES = [
    "skyrl_gym.cli.registry_cmds",  # list, info
    "skyrl_gym.cli.check_cmd",  # check
    "skyrl_gym.cli.audit_cmd",  # audit, fingerprint
    "skyrl_gym.cli.step_cmd",  # step
    "skyrl_gym.cli.score_cmd",  # score
    "skyrl_gym.cli.serve_retriever",  # serve-retriever
    "skyrl_gym.cli.serve_env",  # serve-env
    "skyrl_gym.cli.doctor_cmd",  # doctor
    "skyrl_gym.cli.init_cmd",  # init
    "skyrl_gym.cli.swe_cmd",  # swe build / validate / score
]


def _subcommand_modules() -> Iterator[Any]:
    """The core's modules, then those contributed through entry points (sorted by name)."""
    for module_name in SUBCOMMAND_MODULES:
        yield importlib.import_module(module_name)
    for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        try:
            yield entry_point.load()
        except Exception as exc:  # a broken plugin must not take the whole CLI down
            print(f"warning: skyrl-gym command plugin {entry_point.name!r} ({entry_point.value}) failed to load: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)


def _version_line() -> str:
    """``skyrl-gym X.Y.Z (PATH)``: the folder tells an editable checkout from an installed wheel."""
    from pathlib import Path

    import skyrl_gym

    return f"skyrl-gym {skyrl_gym.__version__} ({Path(skyrl_gym.__file__).resolve().parent})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skyrl-gym", description="Environments for RL on language models: list, inspect, check, drive, train."
    )
    parser.add_argument("--version", action="version", version=_version_line(),
                        help="print the version and where the package is installed, and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _subcommand_modules():
        module.register(subparsers)
    for choice in subparsers._choices_actions:  # `skyrl-gym X --help` opens with the line `skyrl-gym --help` gives X
        command = subparsers.choices[choice.dest]
        if command.description is None and choice.help:
            command.description = choice.help[0].upper() + choice.help[1:].rstrip(".") + "."
    _plain_markup(parser)
    return parser


_ROLE = re.compile(r":[a-z]+:`~?([^`<]+?)(?:\s*<[^>]*>)?`")


def _plain_markup(parser: argparse.ArgumentParser) -> None:
    """Descriptions taken from module docstrings showed reST to the user (``` ``skyrl-gym score`` ```,
    ``:mod:`skyrl_gym.remote` ``): each becomes one pair of backticks, in every command's help."""

    def plain(text: Optional[str]) -> Optional[str]:
        return _ROLE.sub(r"`\1`", text).replace("``", "`") if text else text

    parser.description, parser.epilog = plain(parser.description), plain(parser.epilog)
    for action in parser._actions:
        action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for sub in {id(p): p for p in action.choices.values()}.values():
                _plain_markup(sub)


def main(argv: Optional[List[str]] = None) -> int:
    from skyrl_gym.errors import DataError, UnregisteredEnv

    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and isinstance(getattr(args, "overrides", None), list) and all(
        "=" in item and not item.startswith("-") for item in unknown
    ):  # `train a=b --check c=d`: overrides given after an option are overrides too
        args.overrides += unknown
        unknown = []
    if unknown:  # said by the innermost subcommand's parser (`swe build`), with its usage, not the top-level one's
        said_by = parser
        while True:
            subcommands = next((a for a in said_by._actions if isinstance(a, argparse._SubParsersAction)), None)
            chosen = subcommands.choices.get(getattr(args, subcommands.dest, None)) if subcommands else None
            if chosen is None:
                break
            said_by = chosen
        dashed = [item for item in unknown if item.startswith("--") and "=" in item and "." in item.split("=")[0]]
        hint = ""
        if dashed and isinstance(getattr(args, "overrides", None), list):  # `train --trainer.epochs=2`
            hint = f" (config overrides take no dashes: {' '.join(item.lstrip('-') for item in dashed)})"
        said_by.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        from skyrl_gym.cli._io import Terminated

        print("interrupted", file=sys.stderr)
        return exc.exit_status if isinstance(exc, Terminated) else 130
    except BrokenPipeError:  # `skyrl-gym doctor | head -1`: the reader has all it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is still buffered goes nowhere
        return 141  # as a program killed by SIGPIPE
    except ImportError as exc:  # a missing extra, or a package's own "needs the X package" raised from it
        from skyrl_gym.extras import explain_import_error

        message = explain_import_error(exc)
        if message is None:
            raise
        print(f"error: `skyrl-gym {args.command}` {message}", file=sys.stderr)
        return 2
    except (UnregisteredEnv, DataError, FileNotFoundError) as exc:
        # the user's input, named by the message (an unknown env id with its close matches, a row and its
        # field, a file that is not there): one line, as bad arguments, wherever in a command it is found
        print(f"error: {exc}", file=sys.stderr)
        return 2
