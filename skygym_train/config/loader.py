"""Load the trainer configuration: YAML defaults, an optional user YAML, then dotted overrides.

Every key is checked against the dataclasses before anything else happens, so a typo such as
``trainer.algoritm.advantage_estimator=rloo`` fails at once with ``did you mean 'algorithm'?`` instead
of being silently ignored, and a value of the wrong type names its key.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union

import yaml
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

# What transformers' TrainingArguments and TRL's configs call keys of this config: names people type here out of
# habit. An unknown key of one of these names is answered with this config's key (check_key's hint).
OTHER_TRAINERS_NAMES = {
    "learning_rate": "lr",
    "lr_scheduler_type": "scheduler",
    "warmup_steps": "num_warmup_steps",
    "num_train_epochs": "epochs",
    "max_steps": "max_training_steps",
    "per_device_train_batch_size": "micro_train_batch_size_per_gpu",
    "num_generations": "n_samples_per_prompt",
    "max_completion_length": "max_generate_length",
    "model_name_or_path": "path",
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
            raise ConfigError(f"{dotted_key}: unknown key '{part}' in {where}{_hint(schema_cfg, node, parts, depth)}")
        node = node._get_node(part)


def _hint(schema_cfg: DictConfig, node: DictConfig, parts: List[str], depth: int) -> str:
    """The keys an unknown ``parts[depth]`` likely meant: this config's name for another trainer's, else close
    spellings in its section, else keys of the same name elsewhere."""
    part, keys = parts[depth], [str(k) for k in node.keys()]
    ours = OTHER_TRAINERS_NAMES.get(part)
    if ours is not None:
        why = f" ({part} is transformers'/TRL's name)"
        if ours in keys:
            return f"; did you mean {ours!r}?{why}"
        found = [p for p in _all_leaf_paths(schema_cfg) if p.rsplit(".", 1)[-1] == ours]
        return f"; did you mean {' or '.join(found[:3])}?{why}" if found else ""
    close = difflib.get_close_matches(part, keys, n=3, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(repr(c) for c in close)}?"
    leaf_matches = [p for p in _all_leaf_paths(schema_cfg) if p.rsplit(".", 1)[-1] == parts[-1]]
    return f"; did you mean {' or '.join(leaf_matches[:3])}?" if leaf_matches else ""


def _check_all_keys(schema_cfg: DictConfig, data: Dict[str, Any], refused: Dict[str, str], prefix: str = "") -> None:
    """Each key of ``data`` (nested) that the schema does not have, or a section given a value, goes into
    ``refused`` (dotted key -> problem) and out of ``data``, so that the rest can still be read."""
    for key, value in list(data.items()):
        path = f"{prefix}{key}"
        try:
            check_key(schema_cfg, path)
        except ConfigError as exc:
            refused[path] = exc.problems[0]
            del data[key]
            continue
        sub = OmegaConf.select(schema_cfg, path)
        if isinstance(sub, DictConfig) and not _is_open_dict_field(sub):
            if not isinstance(value, Mapping):
                keys = [str(k) for k in sub.keys()]
                refused[path] = (f"{path}={value}: '{path}' is a section, not a value; set its keys, e.g. "
                                 f"{path}.{keys[0]}=... (its keys: {', '.join(keys)})")
                del data[key]
                continue
            _check_all_keys(schema_cfg, value, refused, path + ".")  # type: ignore[arg-type]
        elif isinstance(sub, ListConfig) and isinstance(value, Mapping):  # else OmegaConf: a bare TypeError
            refused[path] = f"{path}={value}: expected a list, e.g. {path}=\"['...']\""
            del data[key]


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
        leaf = str(key).rsplit(".", 1)[-1]
        return (f"{key}={value}: expected a list, e.g. {key}=\"['{shown}']\" "
                f"(quoted, so the shell keeps the brackets; in a config file, {leaf}: [{shown}])")
    expected = next((text for kind, text in _EXPECTED.items() if isinstance(node, kind)), None)
    if expected is None and _is_open_dict_field(node):
        expected = f"a mapping: set its entries as {key}.NAME=VALUE"
    if expected is None:
        return f"{key}: {message}"
    return f"{key}={value}: expected {expected}"


def _parse_overrides(overrides: Iterable[str], problems: List[str]) -> List[str]:
    """``key=value`` items with their keys spelt as the schema spells them; an item that is not ``key=value``
    goes into ``problems``."""
    cleaned = []
    for item in overrides:
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            problems.append(f"{item!r}: overrides are written key=value (e.g. trainer.epochs=2)")
            continue
        key, value = item.split("=", 1)
        key = key.lstrip("+").strip()  # Hydra's "+key=value" spelling is accepted for familiarity
        key = KEY_ALIASES.get(key, key)
        cleaned.append(f"{key}={value}")
    return cleaned


def _leaves(schema_cfg: DictConfig, data: Mapping[str, Any], prefix: Sequence[str] = ()) -> Iterable[Tuple[List[str], Any]]:
    """``(key parts, value)`` for each value of a (key-checked) layer the schema takes as one: a key of a section
    holds a value; an open mapping (``env_config``) is one value."""
    for key, value in data.items():
        parts = [*prefix, str(key)]
        node = OmegaConf.select(schema_cfg, ".".join(parts))
        if isinstance(value, Mapping) and isinstance(node, DictConfig) and not _is_open_dict_field(node):
            yield from _leaves(schema_cfg, value, parts)
        else:
            yield parts, value


def _merge_each_value(base: DictConfig, layers: Sequence[Dict[str, Any]], refused: Dict[str, str]) -> DictConfig:
    """The layers merged over ``base``, a layer that holds a value the schema cannot take one value at a time: such
    a value goes into ``refused`` and its default stays (only when merging them all at once failed). Merged in place
    into one copy: a merge that makes a new config copies the whole tree, and one per value of the defaults made a
    bad value's error take 5 s."""
    merged = copy.deepcopy(base)
    for layer in layers:
        try:
            merged.merge_with(layer)
        except OmegaConfBaseException:  # what it merged before the bad value is merged again, to the same values
            for parts, value in _leaves(base, layer):
                nested: Any = value
                for part in reversed(parts):
                    nested = {part: nested}
                try:
                    merged.merge_with(OmegaConf.create(nested))
                except OmegaConfBaseException as exc:
                    refused[".".join(parts)] = _value_problem(base, exc)
    return merged


# A config file's ``${oc.env:NAME}`` reads an environment variable into a value. A recipe from someone else could read
# a secret (HF_TOKEN, WANDB_API_KEY, ...) into a value the run sends out or writes down (a search_url, a run name),
# so a file may read only these, and the variables the person running it lists in SKYRL_GYM_CONFIG_ENV
# (comma-separated); and it may call no other resolver (``oc.decode`` and ``oc.create`` resolve a string assembled
# from other values: ``${oc.decode:"\${${x}nv:HF_TOKEN}"}`` with x "oc.e" read HF_TOKEN). Overrides on the command
# line are that person's own and may read any.
CONFIG_FILE_ENV = ("HOME", "USER", "LOGNAME", "PWD", "TMPDIR")
CONFIG_ENV_VARIABLE = "SKYRL_GYM_CONFIG_ENV"
_RESOLVER_CALL = re.compile(r"\$\{\s*([^\s:{}$]+)\s*:")
_LITERAL_ENV_READ = re.compile(r"\$\{\s*oc\.env\s*:\s*([A-Za-z_][A-Za-z0-9_]*)\s*[,}]")


def _refuse_environment_reads(data: Dict[str, Any], path: Path, refused: Dict[str, str], prefix: str = "") -> None:
    """Each key of the config file's raw (unresolved) ``data`` whose value reads an environment variable other than
    ``CONFIG_FILE_ENV`` and those listed in ``SKYRL_GYM_CONFIG_ENV`` (or one whose name is not written out), or
    calls another resolver, goes into ``refused`` and out of ``data``: it is never resolved."""
    allowed = set(CONFIG_FILE_ENV) | {n.strip() for n in os.environ.get(CONFIG_ENV_VARIABLE, "").split(",")}
    for key, value in list(data.items()):
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _refuse_environment_reads(value, path, refused, dotted + ".")  # type: ignore[arg-type]
            continue
        text = "\n".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        calls = _RESOLVER_CALL.findall(text)
        names = _LITERAL_ENV_READ.findall(text)
        unknown = [name for name in dict.fromkeys(names) if name not in allowed]
        other = next((call for call in calls if call != "oc.env"), None)
        remedy = ""
        if other is not None:
            why = f"calls the resolver {other}"
        elif len(names) < len(calls):
            why = "reads an environment variable whose name is not written out"
        elif unknown:
            why = f"reads the environment variable {unknown[0]}"
            remedy = f": {CONFIG_ENV_VARIABLE}={unknown[0]} allows this one"
        else:
            continue
        refused[dotted] = (f"{dotted}: config file {path} {why} ({value!r}); a config file may read only "
                           f"{', '.join(CONFIG_FILE_ENV)} and the variables listed in {CONFIG_ENV_VARIABLE} where it "
                           "runs, with ${oc.env:NAME} and no other resolver (a recipe could put a secret in a URL or "
                           f"a run name){remedy}")
        del data[key]


def _names_a_refused_key(problem: str, refused: Iterable[str]) -> bool:
    """Whether a later check's problem is about a key whose value was refused (its default stood in: the problem
    would be about a value the user did not give)."""
    return any(re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", problem) for key in refused)


def load_config(
    overrides: Union[Sequence[str], Mapping[str, Any], None] = None,
    *,
    config_file: Optional[Union[str, Path]] = None,
    schema: Type[C] = SkyRLTrainConfig,  # type: ignore[assignment]
    validate: bool = True,
) -> C:
    """Build a typed config from the YAML defaults, ``config_file`` and ``overrides``.

    ``overrides`` is a list of ``dotted.key=value`` strings (the command line) or a nested/dotted dict. Raises
    ``ConfigError`` naming every problem (:func:`read_config`'s).
    """
    cfg, problems = read_config(overrides, config_file=config_file, schema=schema, validate=validate)
    if problems:
        raise ConfigError(problems)
    return cfg


def read_config(
    overrides: Union[Sequence[str], Mapping[str, Any], None] = None,
    *,
    config_file: Optional[Union[str, Path]] = None,
    schema: Type[C] = SkyRLTrainConfig,  # type: ignore[assignment]
    validate: bool = True,
    more_checks: Optional[Callable[[Any], List[str]]] = None,
) -> Tuple[C, List[str]]:
    """The config as far as it can be read, and every problem at once: unknown keys, values of the wrong type
    (each key's default stands in for a refused value) and, with ``validate``, the validation's problems and
    those of ``more_checks(cfg)`` (the rows, the machine), less those about a key whose value was refused. Raises
    ``ConfigError`` only when no config can be built (a config file that does not exist)."""
    base = OmegaConf.structured(schema)
    problems: List[str] = []
    layers: List[DictConfig] = []
    if DEFAULTS_YAML.exists():
        layers.append(OmegaConf.load(DEFAULTS_YAML))
    file_layer = None
    if config_file is not None:
        path = Path(config_file)
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist")
        file_layer = len(layers)
        try:
            loaded = OmegaConf.load(path)
        except (yaml.YAMLError, OmegaConfBaseException, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {' '.join(str(exc).split())[:400]}") from None
        if not isinstance(loaded, DictConfig):
            raise ConfigError(f"config file {path} must hold a mapping of keys (section: values), not a list")
        layers.append(loaded)
    refused: Dict[str, str] = {}
    if overrides:
        if isinstance(overrides, Mapping):
            layers.append(OmegaConf.create(_nest(overrides)))
        else:
            dotlist = []
            for item in _parse_overrides(overrides, problems):
                key = item.split("=", 1)[0]
                try:
                    check_key(base, key)
                    dotlist.append(OmegaConf.from_dotlist([item]))
                except ConfigError as exc:
                    refused[key] = exc.problems[0]
                except OmegaConfBaseException as exc:  # a value the override grammar cannot read
                    refused[key] = f"{item}: {str(exc).splitlines()[0]}"
            layers.append(OmegaConf.merge(*dotlist) if dotlist else OmegaConf.create({}))
    data = [OmegaConf.to_container(layer, resolve=False) for layer in layers]
    for layer in data:
        _check_all_keys(base, layer, refused)  # type: ignore[arg-type]
    if file_layer is not None:
        _refuse_environment_reads(data[file_layer], Path(config_file), refused)  # type: ignore[arg-type]
    try:
        merged = OmegaConf.merge(base, *data)
    except OmegaConfBaseException:  # find every value that cannot be taken, not just the first
        merged = _merge_each_value(base, data, refused)  # type: ignore[arg-type]
    try:
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(problems + list(refused.values()) + [_value_problem(base, exc)]) from None
    _apply_deprecated_spellings(cfg)
    problems += refused.values()
    if validate:
        from skygym_train.config.validation import validate_config

        later: List[str] = []
        try:
            validate_config(cfg)  # type: ignore[arg-type]
        except ConfigError as exc:
            later += exc.problems
        later += more_checks(cfg) if more_checks is not None else []
        problems += [p for p in later if not _names_a_refused_key(p, refused)]
    return cfg, problems  # type: ignore[return-value]


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
