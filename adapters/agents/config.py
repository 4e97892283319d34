"""The agent layer's YAML, parsed once into dataclasses (SkyAgent's keys).

::

    agent_cls: react                  # react (default) or an import path
    task: env                         # env, general_react, or an import path
    env_class: gsm8k                  # task: env only; default: each row's env_class
    tools: [finish, code_interpreter] # for agents whose task has no env of its own
    data: {instance_key: null, instance_id_key: null, data_source_key: data_source}
    generator:
      infer_backend: openai_server    # or skyrl-train (the bundled trainer's token-in/token-out engines)
      backend_config: {base_url: http://127.0.0.1:8000, model: my-model, api_key: null}
      sampling_params: {temperature: 0.0, max_tokens: 512}
      max_iterations: 5
      num_trajectories: 1
      max_prompt_length: 8192
      val_config: {num_trajectories: 1, sampling_params: {...}}
    dispatcher: {type: async_pipeline, max_parallel_agents: 32, max_eval_parallel_agents: 32}

Every key is checked here: an unknown one raises :class:`AgentConfigError` listing the valid keys of its section.
Values that name something in a registry (agents, tasks, backends, dispatchers, tools) are checked when the runner
is built, against what is registered then (users add their own).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

logger = logging.getLogger(__name__)


class AgentConfigError(ValueError):
    """The agent YAML has an unknown key, a value of the wrong type, or names something that is not registered."""


@dataclass
class ValConfig:
    """``generator.val_config``: what changes for ``run(..., val_mode=True)``."""

    num_trajectories: Optional[int] = None  # None: generator.num_trajectories
    sampling_params: Optional[Dict[str, Any]] = None  # None: generator.sampling_params


@dataclass
class GeneratorConfig:
    infer_backend: str = "openai_server"
    backend_config: Dict[str, Any] = field(default_factory=dict)
    sampling_params: Dict[str, Any] = field(default_factory=dict)
    max_iterations: int = 5
    num_trajectories: int = 1
    max_prompt_length: Optional[int] = None
    val_config: ValConfig = field(default_factory=ValConfig)
    # Passed to the chat template as enable_thinking (token backends).
    qwen3_enable_thinking: Optional[bool] = None
    # SkyAgent keys accepted so that its YAML files load; they change nothing here (docs/agents.md says why).
    qwen3_acc_thinking: Optional[bool] = None
    vision_is_active: Optional[bool] = None
    remove_think_tokens: Optional[bool] = None
    use_cot: Optional[bool] = None
    profile_tools: Optional[bool] = None
    debug_log: Optional[bool] = None
    enable_turn_reminder: Optional[bool] = None
    early_step_threshold: Optional[int] = None


@dataclass
class DispatcherValConfig:
    max_parallel_agents: Optional[int] = None
    max_eval_parallel_agents: Optional[int] = None


@dataclass
class DispatcherConfig:
    type: str = "async_pipeline"
    max_parallel_agents: int = 32
    max_eval_parallel_agents: Optional[int] = None  # None: max_parallel_agents
    val_config: DispatcherValConfig = field(default_factory=DispatcherValConfig)
    scheduler: Optional[str] = None  # accepted for SkyAgent's files; only FIFO scheduling exists here

    def limits(self, val_mode: bool) -> "StageLimits":
        parallel = self.max_parallel_agents
        eval_parallel = self.max_eval_parallel_agents or parallel
        if val_mode:
            parallel = self.val_config.max_parallel_agents or parallel
            eval_parallel = self.val_config.max_eval_parallel_agents or eval_parallel
        return StageLimits(parallel, eval_parallel)


@dataclass(frozen=True)
class StageLimits:
    """How many trajectories may be in each stage at once (initialize and generate; evaluate)."""

    max_parallel_agents: int
    max_eval_parallel_agents: int


@dataclass
class DataConfig:
    instance_key: Optional[str] = None  # dotted path to the instance inside a row; None: the whole row
    instance_id_key: Optional[str] = None  # dotted path to an id; None: the row's position in the batch
    data_source_key: Optional[str] = "data_source"


@dataclass
class AgentConfig:
    agent_cls: str = "react"
    task: str = "env"
    tools: List[str] = field(default_factory=list)
    env_class: Optional[str] = None
    env_config: Dict[str, Any] = field(default_factory=dict)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    dispatcher: DispatcherConfig = field(default_factory=DispatcherConfig)
    data: DataConfig = field(default_factory=DataConfig)

    def num_trajectories(self, val_mode: bool) -> int:
        if val_mode and self.generator.val_config.num_trajectories is not None:
            return self.generator.val_config.num_trajectories
        return self.generator.num_trajectories

    def sampling_params(self, val_mode: bool) -> Dict[str, Any]:
        if val_mode and self.generator.val_config.sampling_params is not None:
            return dict(self.generator.val_config.sampling_params)
        return dict(self.generator.sampling_params)


_IGNORED_GENERATOR_KEYS = (
    "qwen3_acc_thinking",
    "vision_is_active",
    "remove_think_tokens",
    "use_cot",
    "profile_tools",
    "debug_log",
    "enable_turn_reminder",
    "early_step_threshold",
)


def _build(cls: Any, data: Any, where: str) -> Any:
    """``cls`` from a mapping, recursing into nested dataclasses; unknown keys and wrong types raise."""
    if data is None:
        return cls()
    if not isinstance(data, Mapping):
        raise AgentConfigError(
            f"{where or 'the agent config'} must be a mapping, got {type(data).__name__}: {data!r:.80}"
        )
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        section = f"under {where!r}" if where else "at the top level"
        raise AgentConfigError(
            f"unknown key(s) {[f'{where}.{k}' if where else k for k in unknown]} in the agent config; "
            f"valid keys {section}: {names}"
        )
    kwargs = {}
    for name in names:
        if name not in data:
            continue
        key = f"{where}.{name}" if where else name
        kwargs[name] = _convert(hints[name], data[name], key)
    return cls(**kwargs)


def _convert(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Union:  # Optional[X]
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)][0]
        return _convert(inner, value, key)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key)
    if origin in (dict, Dict):
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise AgentConfigError(f"{key} must be a mapping, got {type(value).__name__}: {value!r:.80}")
        return dict(value)
    if origin in (list, List):
        if value is None:
            return []
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise AgentConfigError(f"{key} must be a list, got {type(value).__name__}: {value!r:.80}")
        return [str(v) for v in value]
    if hint is bool:
        if not isinstance(value, bool):
            raise AgentConfigError(f"{key} must be true or false, got {value!r:.80}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise AgentConfigError(f"{key} must be an integer, got {value!r:.80}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise AgentConfigError(f"{key} must be a string, got {value!r:.80}")
        return value
    return value


def _check(config: AgentConfig) -> AgentConfig:
    g, d = config.generator, config.dispatcher
    for key, value in (
        ("generator.max_iterations", g.max_iterations),
        ("generator.num_trajectories", g.num_trajectories),
        ("dispatcher.max_parallel_agents", d.max_parallel_agents),
    ):
        if value < 1:
            raise AgentConfigError(f"{key} must be at least 1, got {value}")
    for key, optional in (
        ("generator.max_prompt_length", g.max_prompt_length),
        ("generator.val_config.num_trajectories", g.val_config.num_trajectories),
        ("dispatcher.max_eval_parallel_agents", d.max_eval_parallel_agents),
        ("dispatcher.val_config.max_parallel_agents", d.val_config.max_parallel_agents),
        ("dispatcher.val_config.max_eval_parallel_agents", d.val_config.max_eval_parallel_agents),
    ):
        if optional is not None and optional < 1:
            raise AgentConfigError(f"{key} must be at least 1 (or left out), got {optional}")
    for name in _IGNORED_GENERATOR_KEYS:
        if getattr(g, name) is not None:
            logger.info(
                "agent config: generator.%s is accepted for SkyAgent compatibility but has no effect here",
                name,
            )
    return config


def parse_agent_config(data: Union[Mapping[str, Any], AgentConfig, None]) -> AgentConfig:
    """An :class:`AgentConfig` from a mapping (the YAML's content); raises :class:`AgentConfigError`."""
    if isinstance(data, AgentConfig):
        return _check(data)
    if hasattr(data, "keys") and not isinstance(data, Mapping):  # an OmegaConf DictConfig
        from omegaconf import OmegaConf

        data = OmegaConf.to_container(data, resolve=True)
    return _check(_build(AgentConfig, data or {}, ""))


CONFIG_DIR = Path(__file__).with_name("configs")


def builtin_configs() -> Dict[str, Path]:
    """The YAML files shipped with the agent layer, by name (``AutoAgentRunner.from_task("gsm8k_env", ...)``)."""
    return {path.stem: path for path in sorted(CONFIG_DIR.glob("*.yaml"))}


def load_agent_config(path_or_name: Union[str, os.PathLike]) -> AgentConfig:
    """Read a YAML file (or a shipped config by name) and parse it once."""
    import yaml

    path = Path(path_or_name)
    if not path.exists():
        shipped = builtin_configs()
        if str(path_or_name) not in shipped:
            raise AgentConfigError(
                f"agent config {str(path_or_name)!r} is neither a YAML file nor a shipped config; "
                f"shipped configs: {sorted(shipped)}"
            )
        path = shipped[str(path_or_name)]
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise AgentConfigError(f"{path} is not valid YAML: {exc}") from exc
    try:
        return parse_agent_config(data)
    except AgentConfigError as exc:
        raise AgentConfigError(f"{path}: {exc}") from None


__all__ = [
    "AgentConfig",
    "AgentConfigError",
    "DataConfig",
    "DispatcherConfig",
    "GeneratorConfig",
    "StageLimits",
    "ValConfig",
    "builtin_configs",
    "load_agent_config",
    "parse_agent_config",
]
