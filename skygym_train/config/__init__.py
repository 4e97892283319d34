"""Trainer configuration: dataclasses (``schema``), YAML defaults, loading and validation."""

from skygym_train.config.loader import ConfigError, load_config, make_config, to_dict, to_yaml
from skygym_train.config.schema import AlgorithmConfig, GeneratorConfig, SkyRLTrainConfig, TrainerConfig
from skygym_train.config.validation import validate_config

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "GeneratorConfig",
    "SkyRLTrainConfig",
    "TrainerConfig",
    "load_config",
    "make_config",
    "to_dict",
    "to_yaml",
    "validate_config",
]
