"""``python -m skygym_train.entrypoints.main_base key=value ...``: run a training job from the config.

Every key of ``skygym_train/config/ppo_base_config.yaml`` can be overridden with SkyRL's dotted names, e.g.

    python -m skygym_train.entrypoints.main_base \\
        data.train_data="['~/data/gsm8k/train.parquet']" data.val_data="['~/data/gsm8k/validation.parquet']" \\
        trainer.policy.model.path=Qwen/Qwen2.5-1.5B-Instruct trainer.algorithm.advantage_estimator=grpo \\
        environment.env_class=gsm8k trainer.logger=console

``--config-file my.yaml`` adds a YAML layer under the overrides; ``--print-config`` shows the result and
exits; ``--check`` validates only. Bad configurations stop here, before any model loads.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional, Sequence, Type


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--config-file", default=None, help="a YAML file of config values (under the overrides)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    parser.add_argument("overrides", nargs="*", help="config overrides, dotted.key=value")
    return parser


def run(args: argparse.Namespace, trainer_cls: Optional[Type[Any]] = None, config_cls: Optional[Type[Any]] = None) -> int:
    from skygym_train.config.loader import ConfigError, load_config, to_yaml
    from skygym_train.config.schema import SkyRLTrainConfig

    try:
        cfg = load_config(args.overrides, config_file=args.config_file, schema=config_cls or SkyRLTrainConfig)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(to_yaml(cfg))
        return 0
    if args.check:
        print("configuration is valid", file=sys.stderr)
        return 0
    if trainer_cls is None:
        from skygym_train.trainer import PPOTrainer

        trainer_cls = PPOTrainer
    with trainer_cls(cfg) as trainer:
        result = trainer.fit()
    print(f"finished at step {result['global_step']}; checkpoint: {result.get('checkpoint')}", file=sys.stderr)
    return 0


def main(argv: Optional[Sequence[str]] = None, trainer_cls: Optional[Type[Any]] = None, config_cls: Optional[Type[Any]] = None) -> int:
    parser = add_arguments(argparse.ArgumentParser(prog="python -m skygym_train.entrypoints.main_base", description=__doc__.split("\n")[0]))
    return run(parser.parse_args(list(sys.argv[1:] if argv is None else argv)), trainer_cls, config_cls)


if __name__ == "__main__":
    raise SystemExit(main())
