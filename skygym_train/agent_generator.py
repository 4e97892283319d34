"""The agent layer's runner as the trainer's generator, by configuration: ``generator.task=<agent YAML>``.

SkyAgent's key and behaviour: ``generator.task`` names an agent YAML (a path, or the name of one shipped with
``skygym_adapters.agents``: ``gsm8k_env``, ``swe_bench``, ...) and the trainer generates with
``AutoAgentRunner.from_task(task, infer_engine=<its engines>, tokenizer=<the policy's tokenizer>)``.

Who decides what, when the trainer config and the agent YAML both speak (``--check`` refuses the conflicts):

* the model and the engines: the trainer's. A YAML naming a chat backend (``openai_server``) runs on the
  trainer's engines instead (``skyrl-train``, token in and token out), with a warning; its ``backend_config`` is
  not read;
* samples per prompt: the trainer's ``generator.n_samples_per_prompt`` (``eval_n_samples_per_prompt``): the
  trainer repeats each prompt and the runner plays one trajectory per copy. The YAML's ``num_trajectories``
  must be left at 1 or agree;
* the turn limit: the YAML's ``generator.max_iterations``; ``generator.max_turns`` must be left at its default
  (1) or agree;
* the context limit: the YAML's ``generator.max_prompt_length``, else the trainer's ``generator.max_input_length``;
* sampling: the trainer's ``generator.sampling_params`` (``eval_sampling_params`` when it evaluates), with the
  YAML's ``generator.sampling_params`` (``val_config.sampling_params`` when it evaluates) over them key by key;
* the env: the YAML's ``env_class`` (else each row's) and ``env_config``. Rollout-loop settings the agent runner
  does not read (``environment.env_config``, ``generator.batched``, chat templates, Ray env workers, ...) are
  refused with a non-default value, naming the YAML key to use instead where there is one.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping

from skygym_adapters.agents.config import AgentConfig, AgentConfigError, builtin_configs, load_agent_config
from skygym_adapters.types import GeneratorInput, GeneratorOutput

logger = logging.getLogger(__name__)

CHAT_BACKENDS = ("openai_server", "openai")
TRAINER_BACKEND = "skyrl-train"
_LENGTH_KEYS = ("max_generate_length", "max_tokens", "max_new_tokens")


def load_task(task: str) -> AgentConfig:
    """The agent YAML named by ``generator.task``; :class:`AgentConfigError` names the bundled ones when it is
    neither a file nor one of them."""
    return load_agent_config(task)


def bundled_tasks() -> List[str]:
    """Names ``generator.task`` takes besides a path: the YAML files shipped with the agent layer."""
    return sorted(builtin_configs())


def agent_task_problems(cfg: Any) -> List[str]:
    """What stops ``generator.task`` from running with this trainer config (empty when it can, or is unset)."""
    g = cfg.generator
    if not g.task:
        return []
    try:
        agent = load_task(g.task)
        _check_names(agent)
    except AgentConfigError as exc:
        return [f"generator.task={g.task}: {exc}"]
    where = f"generator.task={g.task}"
    problems: List[str] = []
    iterations = agent.generator.max_iterations
    if g.max_turns not in (1, iterations):
        problems.append(
            f"generator.max_turns={g.max_turns}: with {where} the agent YAML's generator.max_iterations "
            f"({iterations}) is the turn limit; leave max_turns out or set it to {iterations}"
        )
    for key, ours, theirs in (
        ("n_samples_per_prompt", g.n_samples_per_prompt, agent.generator.num_trajectories),
        ("eval_n_samples_per_prompt", g.eval_n_samples_per_prompt, agent.num_trajectories(val_mode=True)),
    ):
        if theirs not in (1, ours):
            problems.append(
                f"generator.{key}={ours}: {where} asks for {theirs} trajectories per instance; the "
                f"trainer's {key} decides (it repeats each prompt); set num_trajectories to 1 or {ours}"
            )
    problems += _unread_settings(cfg, where)
    return problems


def agent_task_warnings(cfg: Any) -> List[str]:
    """What runs, but not quite as the agent YAML says (printed by ``--check`` and at start)."""
    g = cfg.generator
    if not g.task:
        return []
    try:
        agent = load_task(g.task)
    except AgentConfigError:
        return []  # agent_task_problems reports it
    if agent.generator.infer_backend in CHAT_BACKENDS:
        return [
            f"generator.task={g.task}: its generator.infer_backend={agent.generator.infer_backend} is replaced "
            f"by {TRAINER_BACKEND}: the agents generate with the trainer's engines (backend_config is not read)"
        ]
    return []


def _check_names(agent: AgentConfig) -> None:
    """The runner's own checks of registered names (agent, task, dispatcher, tools, backend), without an engine."""
    from skygym_adapters.agents.backends import BACKEND_REGISTRY
    from skygym_adapters.agents.dispatchers import DISPATCHER_REGISTRY
    from skygym_adapters.agents.runner import resolve_agent
    from skygym_adapters.agents.tasks import resolve_task
    from skygym_adapters.agents.tools import build_tools

    resolve_agent(agent.agent_cls)
    resolve_task(agent.task)
    build_tools(agent.tools)
    if agent.dispatcher.type not in DISPATCHER_REGISTRY:
        raise AgentConfigError(
            f"unknown dispatcher.type {agent.dispatcher.type!r}; choose one of {sorted(DISPATCHER_REGISTRY)}"
        )
    if agent.generator.infer_backend not in BACKEND_REGISTRY:
        raise AgentConfigError(
            f"unknown generator.infer_backend {agent.generator.infer_backend!r}; choose one of "
            f"{sorted(BACKEND_REGISTRY)}"
        )
    from skygym_adapters.engines.base import resolve_sampling

    for key, params in (
        ("generator.sampling_params", agent.generator.sampling_params),
        ("generator.val_config.sampling_params", agent.generator.val_config.sampling_params),
    ):
        try:
            resolve_sampling(dict(params or {}))
        except ValueError as exc:
            raise AgentConfigError(f"{key}: {exc}") from None


def _unread_settings(cfg: Any, where: str) -> List[str]:
    """Rollout-loop settings with a non-default value: the agent runner would not read them."""
    g, env = cfg.generator, cfg.environment
    unread = [
        ("generator.batched", g.batched, False, "agents play multi-turn episodes"),
        (
            "generator.use_conversation_multi_turn",
            g.use_conversation_multi_turn,
            True,
            "agents keep the chat conversation",
        ),
        (
            "generator.zero_reward_on_non_stop",
            g.zero_reward_on_non_stop,
            False,
            "agents mask unfinished trajectories instead (finish reasons, docs/agents.md)",
        ),
        (
            "generator.chat_template_kwargs",
            dict(g.chat_template_kwargs),
            {},
            "use the YAML's generator.qwen3_enable_thinking",
        ),
        (
            "generator.chat_template.name_or_path",
            g.chat_template.name_or_path,
            None,
            "agents use the tokenizer's template",
        ),
        ("environment.env_config", dict(env.env_config), {}, "put it in the YAML's env_config"),
        (
            "environment.ray_env_workers.num_workers",
            env.ray_env_workers.num_workers,
            0,
            "agents step their envs in this process",
        ),
    ]
    return [
        f"{key}={_show(value)}: not read with {where} ({why}); leave it at {_show(default)}"
        for key, value, default, why in unread
        if value != default
    ]


def _show(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def merged_sampling(trainer: Mapping[str, Any], agent: Mapping[str, Any]) -> Dict[str, Any]:
    """The trainer's sampling parameters with the agent YAML's over them, key by key (``max_tokens`` and
    ``max_generate_length`` are one setting: the YAML's replaces the trainer's)."""
    out = dict(trainer)
    if any(key in agent for key in _LENGTH_KEYS):
        for key in _LENGTH_KEYS:
            out.pop(key, None)
    out.update(agent)
    return out


class AgentGenerator:
    """The trainer's generator interface over an :class:`~skygym_adapters.agents.AgentRunner`."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        metadata = input_batch.get("batch_metadata") or {}
        phase = metadata.get("training_phase") if isinstance(metadata, Mapping) else None
        ours = self.runner.cfg.sampling_params(val_mode=phase == "eval")
        sampling = merged_sampling(input_batch.get("sampling_params") or {}, ours)
        return await self.runner.generate({**input_batch, "sampling_params": sampling})

    async def aclose(self) -> None:
        """The runner's backend sessions and env threads (the engines are the trainer's)."""
        await self.runner.aclose()


def build_agent_generator(cfg: Any, engine: Any, tokenizer: Any) -> AgentGenerator:
    """``AutoAgentRunner.from_task(generator.task, infer_engine=engine, tokenizer=tokenizer)`` on the trainer's
    engines, with the rules of this module's docstring."""
    from skygym_adapters.agents import AgentRunner

    g = cfg.generator
    agent = load_task(g.task)
    if agent.generator.infer_backend in CHAT_BACKENDS:
        agent.generator.infer_backend, agent.generator.backend_config = TRAINER_BACKEND, {}
    if agent.generator.max_prompt_length is None and g.max_input_length:
        agent.generator.max_prompt_length = int(g.max_input_length)
    logger.info(
        "generator.task=%s: the agent runner (%s on task %s, %d iterations) is the generator",
        g.task,
        agent.agent_cls,
        agent.task,
        agent.generator.max_iterations,
    )
    return AgentGenerator(AgentRunner(agent, infer_engine=engine, tokenizer=tokenizer))


__all__ = [
    "AgentGenerator",
    "agent_task_problems",
    "agent_task_warnings",
    "build_agent_generator",
    "bundled_tasks",
    "load_task",
    "merged_sampling",
]
