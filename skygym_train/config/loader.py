"""Load the trainer configuration: YAML defaults, an optional user YAML, then dotted overrides.

Every key is checked against the dataclasses before anything else happens, so a typo such as
``trainer.algoritm.advantage_estimator=rloo`` fails at once with ``did you mean 'algorithm'?`` instead
of being silently ignored, and a value of the wrong type names its key.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Type, TypeVar, Union

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.nodes import BooleanNode, FloatNode, IntegerNode, StringNode
from omegaconf.errors import OmegaConfBaseException

from skygym_train.config.errors import ConfigError
from skygym_train.config.schema import AlgorithmConfig, SkyRLTrainConfig, TrainerConfig

DEFAULTS_YAML = Path(__file__).with_name("ppo_base_config.yaml")

C = TypeVar("C")

# Newer SkyRL releases nest the engine keys under generator.inference_engine; both spellings work.
KEY_ALIASES = {
    "generator.inference_engine.backend": "generator.backend",
    "generator.inference_engine.num_engines": "generator.num_inference_engines",
    "generator.inference_engine.tensor_parallel_size": "generator.inference_engine_tensor_parallel_size",
    "generator.inference_engine.weight_sync_backend": "generator.weight_sync_backend",
    "generator.inference_engine.run_engines_locally": "generator.run_engines_locally",
    "generator.inference_engine.gpu_memory_utilization": "generator.gpu_memory_utilization",
    "generator.inference_engine.model_dtype": "generator.model_dtype",
}


def _is_open_dict_field(node: Any) -> bool:
    """Dict[str, Any] fields (env_config, chat_template_kwargs) accept arbitrary keys."""
    return isinstance(node, DictConfig) and node._metadata.object_type in (None, dict)


def _all_leaf_paths(node: DictConfig, prefix: str = "") -> List[str]:
    paths: List[str] = []
    for key in node.keys():
        child = node._get_node(key)
        path = f"{prefix}{key}"
        if isinstance(child, DictConfig) and not _is_open_dict_field(child):
            paths.extend(_all_leaf_paths(child, path + "."))
        else:
            paths.append(path)
    return paths


def check_key(schema_cfg: DictConfig, dotted_key: str) -> None:
    """Raise ConfigError if ``dotted_key`` is not a key of the schema, suggesting the closest ones."""
    node: Any = schema_cfg
    parts = dotted_key.split(".")
    for depth, part in enumerate(parts):
        if _is_open_dict_field(node) and depth > 0:
            return
        if not isinstance(node, DictConfig):
            parent = ".".join(parts[:depth])
            raise ConfigError(f"{dotted_key}: '{parent}' is a value, not a section, so it has no key '{part}'")
        if part not in node:
            where = ".".join(parts[:depth]) or "the top level"
            close = difflib.get_close_matches(part, [str(k) for k in node.keys()], n=3, cutoff=0.6)
            hint = ""
            if close:
                hint = f"; did you mean {' or '.join(repr(c) for c in close)}?"
            else:
                leaf_matches = [p for p in _all_leaf_paths(schema_cfg) if p.rsplit(".", 1)[-1] == parts[-1]]
                if leaf_matches:
                    hint = f"; did you mean {' or '.join(leaf_matches[:3])}?"
            raise ConfigError(f"{dotted_key}: unknown key '{part}' in {where}{hint}")
        node = node._get_node(part)


def _check_all_keys(schema_cfg: DictConfig, data: Mapping[str, Any], prefix: str = "") -> None:
    for key, value in data.items():
        path = f"{prefix}{key}"
        check_key(schema_cfg, path)
        sub = OmegaConf.select(schema_cfg, path)
        if isinstance(sub, DictConfig) and not _is_open_dict_field(sub):
            if not isinstance(value, Mapping):
                keys = [str(k) for k in sub.keys()]
                raise ConfigError(f"{path}={value}: '{path}' is a section, not a value; set its keys, e.g. "
                                  f"{path}.{keys[0]}=... (its keys: {', '.join(keys)})")
            _check_all_keys(schema_cfg, value, path + ".")
        elif isinstance(sub, ListConfig) and isinstance(value, Mapping):  # else OmegaConf: a bare TypeError
            raise ConfigError(f"{path}={value}: expected a list, e.g. {path}=\"['...']\"")


# What a schema node of each kind takes, for an error about a value of the wrong type.
_EXPECTED = {
    IntegerNode: "an integer", FloatNode: "a number", BooleanNode: "true or false", StringNode: "a string",
}


def _value_problem(schema_cfg: DictConfig, exc: OmegaConfBaseException) -> str:
    """One line for a value OmegaConf could not take: the key, the value, and what the key takes (a list's
    override spelled out, the mistake a shell's quoting invites: ``data.train_data=rows.jsonl``)."""
    key = getattr(exc, "full_key", None)
    message = str(getattr(exc, "msg", None) or exc).splitlines()[0]
    if not key:
        return f"?: {message}"
    node: Any = schema_cfg
    try:
        for part in str(key).split("."):
            node = node._get_node(part)
    except (AttributeError, KeyError, OmegaConfBaseException):
        node = None
    value = getattr(exc, "value", None)
    if isinstance(node, ListConfig):
        shown = str(value) if not str(value).startswith(("[", "{")) else "..."
        return (f"{key}={value}: expected a list, e.g. {key}=\"['{shown}']\" "
                "(quoted, so the shell keeps the brackets)")
    expected = next((text for kind, text in _EXPECTED.items() if isinstance(node, kind)), None)
    if expected is None and _is_open_dict_field(node):
        expected = f"a mapping: set its entries as {key}.NAME=VALUE"
    if expected is None:
        return f"{key}: {message}"
    return f"{key}={value}: expected {expected}"


def _parse_overrides(overrides: Iterable[str]) -> List[str]:
    cleaned = []
    for item in overrides:
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise ConfigError(f"{item!r}: overrides are written key=value (e.g. trainer.epochs=2)")
        key, value = item.split("=", 1)
        key = key.lstrip("+").strip()  # Hydra's "+key=value" spelling is accepted for familiarity
        key = KEY_ALIASES.get(key, key)
        cleaned.append(f"{key}={value}")
    return cleaned


def load_config(
    overrides: Union[Sequence[str], Mapping[str, Any], None] = None,
    *,
    config_file: Optional[Union[str, Path]] = None,
    schema: Type[C] = SkyRLTrainConfig,  # type: ignore[assignment]
    validate: bool = True,
) -> C:
    """Build a typed config from the YAML defaults, ``config_file`` and ``overrides``.

    ``overrides`` is a list of ``dotted.key=value`` strings (the command line) or a nested/dotted dict.
    """
    base = OmegaConf.structured(schema)
    layers: List[DictConfig] = []
    if DEFAULTS_YAML.exists():
        layers.append(OmegaConf.load(DEFAULTS_YAML))
    if config_file is not None:
        path = Path(config_file)
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist")
        layers.append(OmegaConf.load(path))
    if overrides:
        if isinstance(overrides, Mapping):
            layers.append(OmegaConf.create(_nest(overrides)))
        else:
            dotlist = _parse_overrides(overrides)
            for item in dotlist:
                check_key(base, item.split("=", 1)[0])
            layers.append(OmegaConf.from_dotlist(dotlist))
    for layer in layers:
        _check_all_keys(base, OmegaConf.to_container(layer, resolve=False))  # type: ignore[arg-type]
    try:
        merged = OmegaConf.merge(base, *layers)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(_value_problem(base, exc)) from None
    _apply_deprecated_spellings(cfg)
    if validate:
        from skygym_train.config.validation import validate_config

        validate_config(cfg)  # type: ignore[arg-type]
    return cfg  # type: ignore[return-value]


def _apply_deprecated_spellings(cfg: Any) -> None:
    """SkyRL-train's deprecated KL flags name an estimator: honour them when kl_estimator_type is left at k3."""
    algo = getattr(getattr(cfg, "trainer", None), "algorithm", None)
    if algo is None:
        return
    if getattr(algo, "use_abs_kl", False) and algo.kl_estimator_type == "k3" and not algo.use_kl_estimator_k3:
        algo.kl_estimator_type = "abs"


def _nest(flat: Mapping[str, Any]) -> Dict[str, Any]:
    """{"trainer.epochs": 2, "data": {...}} -> nested dicts, merging shared prefixes."""
    out: Dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = str(key).split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if isinstance(value, Mapping) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(_nest(value))
        else:
            node[parts[-1]] = _nest(value) if isinstance(value, Mapping) else value
    return out


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: Any) -> Dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def make_config(
    algorithm_cls: Optional[Type[AlgorithmConfig]] = None, trainer_cls: Optional[Type[TrainerConfig]] = None
) -> Type[SkyRLTrainConfig]:
    """A config class whose ``trainer.algorithm`` section is ``algorithm_cls`` (a user subclass).

    This is how a plug-in adds its own keys, e.g. DAPO's ``trainer.algorithm.overlong_buffer_len``.
    """
    algo = algorithm_cls or AlgorithmConfig
    trainer_base = trainer_cls or TrainerConfig
    trainer = dataclasses.make_dataclass(
        f"{trainer_base.__name__}With{algo.__name__}",
        [("algorithm", algo, dataclasses.field(default_factory=algo))],
        bases=(trainer_base,),
    )
    return dataclasses.make_dataclass(  # type: ignore[return-value]
        f"SkyRLTrainConfigWith{algo.__name__}",
        [("trainer", trainer, dataclasses.field(default_factory=trainer))],
        bases=(SkyRLTrainConfig,),
    )
