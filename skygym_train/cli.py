"""``skyrl-gym train key=value ...`` and ``skyrl-gym quickstart``: the bundled trainer (``train`` extra)."""

from __future__ import annotations

import argparse
from typing import Any

# A missing torch/transformers/ray surfaces as ModuleNotFoundError, which `skyrl-gym` turns into one line naming
# the extra and its install command (skyrl_gym.extras).


def _train(args: argparse.Namespace) -> int:
    from skygym_train.entrypoints.main_base import run

    return run(args)


def _quickstart(args: argparse.Namespace) -> int:
    from skygym_train.quickstart import run_from_args

    return run_from_args(args)


def register(subparsers: Any) -> None:
    from skygym_train.entrypoints.main_base import add_arguments  # stdlib only at import time

    train = subparsers.add_parser(
        "train",
        help="train a model with the bundled Ray/FSDP2 trainer (SkyRL config keys: key=value ...)",
        description="Run the bundled trainer; overrides use SkyRL-train's dotted key names.",
    )
    add_arguments(train).set_defaults(func=_train)

    quick = subparsers.add_parser(
        "quickstart",
        help="GRPO on the embedded SmolLM2-135M (multiplication, a few minutes on CPU), with eval and a plot",
        description="Train the embedded SmolLM2-135M-Instruct with GRPO on single-digit multiplication.",
    )
    from skygym_train.quickstart import build_arg_parser  # stdlib only at import time

    build_arg_parser(quick).set_defaults(func=_quickstart)
