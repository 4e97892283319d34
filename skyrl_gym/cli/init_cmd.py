"""``skyrl-gym init NAME``: scaffold a pip-installable env package (see :mod:`skyrl_gym.scaffold`)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from skyrl_gym.cli._io import error


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "init",
        help="scaffold a pip-installable env package (entry points, env, dataset builder, README, tests)",
        description="Write a package for a new env NAME that passes `skyrl-gym check NAME` once installed "
        "(pip install -e DIR). Exit code 0: written; 2: bad name or folder.",
    )
    parser.add_argument("name", metavar="NAME", help="the env id, also the package name: lower_case_with_underscores")
    parser.add_argument("--dir", metavar="DIR", help="where to write it (default ./skyrl-gym-NAME, with _ written as -)")
    parser.set_defaults(func=run_init)


def run_init(args: argparse.Namespace) -> int:
    from skyrl_gym.scaffold import ScaffoldError, scaffold

    try:
        root = scaffold(args.name, Path(args.dir) if args.dir else None)
    except ScaffoldError as exc:
        error(str(exc))
        return 2
    # quoted: an unquoted `[dev]` is a glob that zsh refuses ("no matches found") and bash may expand
    print(f"wrote {root}\nnext:\n  pip install -e {shlex.quote(f'{root}[dev]')}\n"
          f"  skyrl-gym check {args.name}\n  skyrl-gym audit {args.name}\n  skyrl-gym conform {args.name}\n"
          f"  python -m pytest {shlex.quote(str(root / 'tests'))}")
    return 0
