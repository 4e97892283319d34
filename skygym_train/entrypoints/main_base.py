"""``python -m skygym_train.entrypoints.main_base key=value ...``: run a training job from the config.

Every key of ``skygym_train/config/ppo_base_config.yaml`` can be overridden with SkyRL's dotted names, e.g.

    python -m skygym_train.entrypoints.main_base \\
        data.train_data="['~/data/gsm8k/train.parquet']" data.val_data="['~/data/gsm8k/validation.parquet']" \\
        trainer.policy.model.path=Qwen/Qwen2.5-1.5B-Instruct trainer.algorithm.advantage_estimator=grpo \\
        environment.env_class=gsm8k trainer.logger=console

``--config-file my.yaml`` adds a YAML layer under the overrides; ``--print-config`` shows the result and
exits (alone: every default); ``--check`` validates only (the config, the machine, the model paths and every
dataset row, as the trainer checks them when it starts). Bad configurations stop here, before any model loads.

SkyRL-train's tutorial surface is here under our name: :class:`BasePPOExp` (subclass it for a custom
generator, trainer or dataset), ``config_dir`` (the folder of ``ppo_base_config.yaml``), :func:`validate_cfg`
and :func:`hydra_main`, which is ``hydra.main`` when Hydra is installed and otherwise reads the same
``key=value`` overrides with this package's loader.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Type

config_dir = str(Path(__file__).resolve().parent.parent / "config")
"""The folder holding ``ppo_base_config.yaml`` (for ``hydra.main(config_path=config_dir, ...)``)."""


# What `--help` shows after the options: the keys every run needs, one that runs on a CPU, where the rest are.
EPILOG = "\n".join([
    "every run needs data.train_data (a list of JSONL/Parquet files of rows) and trainer.policy.model.path",
    "(a folder, a hub id or smollm2-135m); every other key has a default (--print-config shows them all).",
    "",
    "example, on a CPU: rows of the multiply env, then a short run (drop --check to train). Two steps check the",
    "set-up; they learn nothing: the small model rarely answers these rows cold (the run says so at its end).",
    "skyrl-gym quickstart gives it worked examples in each prompt and 40 steps.",
    "",
    "  python -c \"from skyrl_gym.data import write_jsonl; from skyrl_gym.datasets import build_rows; \\",
    "      write_jsonl(build_rows('multiply', split='train', size=64, seed=0, num_digits=1, max_turns=1), \\",
    "                  'train.jsonl')\"",
    "  skyrl-gym train --check \"data.train_data=['train.jsonl']\" trainer.policy.model.path=smollm2-135m \\",
    "      trainer.use_ray=false trainer.train_batch_size=8 trainer.policy_mini_batch_size=8 \\",
    "      generator.sampling_params.max_generate_length=32 trainer.max_training_steps=2 \\",
    "      trainer.ckpt_path=ckpts/multiply trainer.ckpt_interval=-1",
    "",
    "(trainer.ckpt_interval=-1: no training checkpoint, the weights with the optimizer's state, 1.7 GB here)",
    "",
    "every key: docs/configuration.md; an env of your own to a trained model: docs/new-environment.md",
])


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the epilog's lines as written
    parser.epilog = EPILOG
    parser.add_argument("--config-file", default=None, help="a YAML file of config values (under the overrides)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    parser.add_argument("overrides", nargs="*", help="config overrides, dotted.key=value")
    return parser


def prefer_passive_openmp() -> None:
    """Let idle OpenMP threads sleep instead of spin (unless ``OMP_WAIT_POLICY`` is set). Takes effect only before
    torch loads, here and in the Ray workers started from this process.

    Decoding runs hundreds of small parallel sections per token; on CPU cores shared with other processes, threads
    spinning between them held the cores the work needed (a decode step of the embedded model at batch 8 took
    1.8 s spinning, 0.21 s passive, on two busy cores)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def quiet_library_bars() -> None:
    """Hugging Face's own bars (loading and writing weights) on a terminal only, unless
    ``HF_HUB_DISABLE_PROGRESS_BARS`` says otherwise: in a log piped to a file they were lines at every model load
    and export, here and in the Ray workers started from this process, between the trainer's own."""
    if sys.stderr.isatty() or "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ:
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read by huggingface_hub and transformers when they load
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def run(args: argparse.Namespace, trainer_cls: Optional[Type[Any]] = None, config_cls: Optional[Type[Any]] = None) -> int:
    prefer_passive_openmp()
    quiet_library_bars()
    from skygym_train.config.loader import ConfigError, read_config, to_yaml
    from skygym_train.config.schema import SkyRLTrainConfig

    # --print-config alone shows the config as the keys given make it (the defaults, with none): only keys and
    # values that cannot be read stop it, not what a run needs
    only_print = args.print_config and not args.check
    try:
        # One run names every mistake: keys, values, settings, model paths, env ids (with --check, the rows too).
        row_warnings: List[str] = []  # what --check says of the rows besides their problems
        cfg, problems = read_config(args.overrides, config_file=args.config_file,
                                    schema=config_cls or SkyRLTrainConfig, validate=not only_print,
                                    more_checks=functools.partial(dataset_problems, read_rows=args.check,
                                                                  warnings=row_warnings))
        if problems:
            raise ConfigError(problems)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(to_yaml(cfg))
        return 0
    if args.check:  # a run's trainer says them when it starts (once: they were printed here too, and twice)
        from skygym_train.config.validation import config_warnings

        for warning in config_warnings(cfg) + row_warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if cfg.trainer.use_ray and os.environ.get("RAY_ADDRESS"):  # a cluster to run on: its nodes too
            from skygym_train.trainer import ray_cluster_check

            found = ray_cluster_check(cfg)
            for warning in found.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            if found.errors:
                print(f"error: {ConfigError(found.errors)}", file=sys.stderr)
                return 2
            print(f"Ray nodes checked: {', '.join(found.nodes)}", file=sys.stderr)
        print("configuration is valid", file=sys.stderr)
        return 0
    if trainer_cls is None:
        from skygym_train.trainer import PPOTrainer

        trainer_cls = PPOTrainer
    from skygym_adapters.models import ModelResolutionError

    from skygym_train.trainer import TrainingInterrupted, TrajectoriesFailed

    from skyrl_gym.cli._io import Terminated, terminated_as_interrupt

    try:  # SIGTERM and SIGHUP end the run as a second Ctrl-C does: the trainer closes, its temporary folders go
        with terminated_as_interrupt(), warnings.catch_warnings(), trainer_cls(cfg) as trainer:
            warnings.showwarning = cli_warnings(warnings.showwarning)
            result = trainer.fit()
    except TrainingInterrupted as exc:  # the first Ctrl-C: the trainer stopped between two steps
        print(str(exc), file=sys.stderr)
        return 130
    except Terminated as exc:
        print(terminated_line(exc), file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:  # before training started, or a second Ctrl-C
        print(STOPPED_AT_ONCE, file=sys.stderr)
        return 130
    except (ConfigError, ModelResolutionError) as exc:  # a hub id that cannot be fetched is known only now
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TrajectoriesFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(finished_line(result, cfg.trainer.ckpt_interval), file=sys.stderr)
    return 0


def cli_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """The CLI's ``warnings.showwarning``: a resumed run is one ``warning:`` line (none when nothing was left
    to train: the run's last line says so), without the source line of Python's format; other warnings go to
    ``show``."""
    from skygym_train.trainer import ResumedWarning

    def showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                    line: Any = None) -> None:
        if not isinstance(message, ResumedWarning):
            show(message, category, filename, lineno, file, line)
        elif not message.nothing_left:
            print(f"warning: {message}", file=sys.stderr)

    return showwarning


# Ctrl-C outside the training steps (loading, the last evaluation, the export) or a second one: no step to finish
STOPPED_AT_ONCE = ("interrupted: stopped at once (Ctrl-C again, or outside the training steps); "
                   "nothing more written")


def terminated_line(exc: Any) -> str:
    """What a run ended by SIGTERM or SIGHUP says (:class:`~skyrl_gym.cli._io.Terminated`)."""
    return f"terminated (signal {exc.signum}): stopped at once; nothing more written"


def finished_line(result: Mapping[str, Any], ckpt_interval: Any = None) -> str:
    """The run's last line: where it ended, what it wrote (the checkpoint, or that none was saved with the
    ``trainer.ckpt_interval`` that said so, and the Hugging Face export when there is one; when there is neither,
    that the weights were not kept and how to keep them), and, for a run
    that resumed (the default ``trainer.ckpt_path`` is shared by every run that does not set its own), from
    where and how many steps it trained."""
    checkpoint = result.get("checkpoint")
    why = "" if ckpt_interval is None else f" (trainer.ckpt_interval={ckpt_interval})"
    saved = f"checkpoint: {checkpoint}" if checkpoint else f"no checkpoint saved{why}"
    line = f"finished at step {result['global_step']}; {saved}"
    if result.get("export"):
        line += f"; Hugging Face export: {result['export']}"
    elif not checkpoint:  # a first run with the defaults trained a model and wrote none of it
        line += (" and no Hugging Face export: the trained weights were not kept (trainer.hf_save_interval=N exports "
                 "them every N steps and at the end, trainer.ckpt_interval=N checkpoints them)")
    resumed, trained = result.get("resumed_from"), result.get("steps_trained")
    if resumed and trained == 0:
        return (f"{line}\nnothing was trained: this run resumed from {resumed}, already at its last step "
                "(trainer.resume_mode=none starts afresh; a trainer.ckpt_path of its own keeps a run apart)")
    if resumed:
        return f"{line} (resumed from {resumed}, then trained {trained} step(s))"
    return line


def dataset_problems(cfg: Any, read_rows: bool = True, warnings: Optional[List[str]] = None) -> List[str]:
    """What is checked before anything starts (``trainer.before_starting_problems``: env ids, model paths, the
    engine's package); with ``read_rows``, the dataset files that exist are read and every row is checked as the
    trainer checks them when it starts (``trainer.rows_problems``: malformed rows, env ids, rows their env refuses,
    a batch larger than the rows; a missing file is the validation's problem). ``warnings``, when given, gets what
    the trainer would warn of the rows (``trainer.default_env_class_warnings``)."""
    from skygym_train.dataset import read_dataset
    from skygym_train.trainer import before_starting_problems, default_env_class_warnings, rows_problems

    problems = before_starting_problems(cfg)
    if not read_rows:
        return problems
    train, val = ([f for f in files if "://" in f or Path(f).expanduser().exists()]
                  for files in (cfg.data.train_data, cfg.data.val_data or []))
    env_class = cfg.environment.env_class
    train_rows, val_rows = read_dataset(train, env_class), read_dataset(val, env_class)
    if warnings is not None:
        warnings += default_env_class_warnings(cfg, train_rows, val_rows)
    return problems + rows_problems(cfg, train_rows, val_rows,
                                    count_train=bool(train) and len(train) == len(cfg.data.train_data))


# ---------------------------------------------------------------------- SkyRL-train's tutorial surface
def _typed(cfg: Any, validate: bool = True) -> Any:
    """A typed config from a typed config, a DictConfig (Hydra's) or a nested mapping, keys and values checked."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    from skygym_train.config.loader import load_config
    from skygym_train.config.validation import validate_config

    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        if validate:
            validate_config(cfg)
        return cfg
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(cfg, Mapping):
        raise TypeError(f"expected a config (dataclass, DictConfig or mapping), got {type(cfg).__name__}")
    return load_config(dict(cfg), validate=validate)


def validate_cfg(cfg: Any) -> Any:
    """Check a configuration as SkyRL-train's ``validate_cfg`` does; raises ``ConfigError`` listing every problem.

    Takes the typed config, Hydra's ``DictConfig`` or a mapping; returns the typed config.
    """
    return _typed(cfg)


class BasePPOExp:
    """One training run from a config, with SkyRL-train's hooks to override.

    Subclass and override ``get_train_dataset`` / ``get_eval_dataset`` (lists of dataset rows),
    ``get_tokenizer``, ``get_generator(cfg, tokenizer, inference_engine_client)`` or ``get_trainer``; or set
    ``trainer_cls`` to a :class:`~skygym_train.trainer.PPOTrainer` subclass. ``run()`` trains and returns the
    trainer's result.
    """

    trainer_cls: Optional[Type[Any]] = None

    def __init__(self, cfg: Any):
        self.cfg = _typed(cfg)

    def get_tokenizer(self) -> Any:
        from skygym_train.trainer import policy_tokenizer

        return policy_tokenizer(self.cfg)

    def get_train_dataset(self) -> List[Dict[str, Any]]:
        from skygym_train.dataset import load_dataset_rows

        return load_dataset_rows(self.cfg.data.train_data, self.cfg.environment.env_class)

    def get_eval_dataset(self) -> List[Dict[str, Any]]:
        from skygym_train.dataset import load_dataset_rows

        if not self.cfg.data.val_data:
            return []
        return load_dataset_rows(self.cfg.data.val_data, self.cfg.environment.env_class)

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
        from skygym_train.generation import build_generator

        return build_generator(cfg, inference_engine_client, tokenizer)

    def get_trainer(self, cfg: Any, tokenizer: Any, train_dataset: List[Dict[str, Any]],
                    eval_dataset: List[Dict[str, Any]], generator_factory: Callable[[Any, Any, Any], Any]) -> Any:
        from skygym_train.trainer import PPOTrainer

        trainer_cls = self.trainer_cls or PPOTrainer
        return trainer_cls(cfg, tokenizer=tokenizer, train_rows=train_dataset, val_rows=eval_dataset,
                           generator_factory=generator_factory)

    def _setup_trainer(self) -> Any:
        tokenizer = self.get_tokenizer()
        return self.get_trainer(self.cfg, tokenizer, self.get_train_dataset(), self.get_eval_dataset(),
                                self.get_generator)

    def run(self) -> Dict[str, Any]:
        with self._setup_trainer() as trainer:
            return trainer.fit()


def hydra_main(config_path: Optional[str] = None, config_name: Optional[str] = "ppo_base_config",
               version_base: Any = None) -> Callable[[Callable[[Any], Any]], Callable[[], Any]]:
    """``hydra.main`` when Hydra is installed; otherwise a stand-in with the same arguments.

    The stand-in reads ``key=value`` (and ``+key=value``) overrides from the command line with this package's
    loader (unknown keys are refused with close matches), over ``config_name``.yaml in ``config_path`` when
    that is not this package's own ``ppo_base_config``, and calls the function with the typed config. Hydra's
    own flags (``--multirun``, ``--cfg``, sweeps) are not offered by the stand-in.
    """
    try:
        import hydra
    except ImportError:
        hydra = None
    if hydra is not None:
        return hydra.main(config_path=config_path, config_name=config_name, version_base=version_base)

    def decorate(func: Callable[[Any], Any]) -> Callable[[], Any]:
        @functools.wraps(func)
        def wrapper(argv: Optional[Sequence[str]] = None) -> Any:
            from skygym_train.config.loader import ConfigError, load_config

            own = config_name in (None, "ppo_base_config") and (
                config_path is None or Path(config_path).resolve() == Path(config_dir))
            config_file = None if own else Path(config_path or ".") / f"{config_name}.yaml"
            overrides = list(sys.argv[1:] if argv is None else argv)
            try:
                return func(load_config(overrides, config_file=config_file, validate=False))
            except ConfigError as exc:  # as the command line reports it: every problem, exit status 2
                print(f"error: {exc}", file=sys.stderr)
                raise SystemExit(2) from None

        return wrapper

    return decorate


def main(argv: Optional[Sequence[str]] = None, trainer_cls: Optional[Type[Any]] = None, config_cls: Optional[Type[Any]] = None) -> int:
    parser = add_arguments(argparse.ArgumentParser(prog="python -m skygym_train.entrypoints.main_base", description=__doc__.split("\n")[0]))
    # intermixed: `main_base a=b --check c=d` takes c=d as an override too
    args = parser.parse_intermixed_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return run(args, trainer_cls, config_cls)
    except ImportError as exc:  # without the train extra: one line naming it, as `skyrl-gym train` says it
        from skyrl_gym.extras import explain_import_error

        message = explain_import_error(exc)
        if message is None:
            raise
        print(f"error: {parser.prog} {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
