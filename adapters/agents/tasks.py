"""Tasks: where an agent's work comes from, what it runs in, and how it is scored.

A task has four async hooks, SkyAgent's: ``initialize_runtime`` (start what the agent acts in: here always an
env, built before the agent starts, so a dispatcher can overlap one trajectory's start-up with another's
generation), ``get_instruction`` (the first messages), ``complete_runtime`` (collect the result when the agent
stops) and ``evaluate_result`` (the reward).

* :class:`EnvTask` (``task: env``): ANY registered ``skyrl_gym`` env is an agent task, with no new code. The
  rows are the hub's usual rows; the env is ``env_class`` from the YAML, else each row's; the agent plays the
  env's episode and the reward is the env's (the sum of its turn rewards).
* :class:`~skygym_adapters.agents.swe.SWEBenchTask` (``task: swe_bench``): SWE-bench-format instances, one
  container per trajectory, the patch graded by the resolved rule in a fresh container (:mod:`.swe`).
* :class:`GeneralReactTask` (``task: general_react``): math and QA rows for a ReAct agent with tools; the agent
  answers through the ``finish`` tool and the answer is graded with the hub's rewards (math-verify equivalence,
  or exact match) against ``reward_spec.ground_truth`` (or SkyAgent's ``reward_model.ground_truth``).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Dict, List, Mapping

from skyrl_gym.data import row_extras, validate_row

from skygym_adapters.agents.config import AgentConfigError
from skygym_adapters.agents.tools import AgentToolEnv, build_tools


class BaseTask:
    """Subclass and write the four hooks (all async, all optional but ``get_instruction``/``evaluate_result``)."""

    async def initialize_runtime(self, instance: Mapping[str, Any], cfg: Any) -> Any:
        """Start what the agent acts in and return it (an env for the agents of this package)."""
        return (getattr(cfg, "tool_env_cls", None) or AgentToolEnv)(build_tools(cfg.tools))

    async def get_instruction(self, instance: Mapping[str, Any]) -> List[Dict[str, Any]]:
        raise NotImplementedError(f"{type(self).__name__} must implement get_instruction(instance)")

    async def complete_runtime(self, runtime: Any, run: Any) -> Any:
        """What to evaluate once the agent stopped (SkyAgent extracts a patch here); default: the agent's answer."""
        return run.answer

    async def evaluate_result(
        self, result: Any, instance: Mapping[str, Any], data_source: str, instance_id: Any, trajectory_id: int
    ) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement evaluate_result(...)")

    async def close_runtime(self, runtime: Any) -> None:
        """Release the runtime of a trajectory that failed before ``complete_runtime`` (default: ``close()``)."""
        close = getattr(runtime, "close", None)
        if callable(close):
            close()


class EnvTask(BaseTask):
    """Any registered env as an agent task (see the module docstring)."""

    async def initialize_runtime(self, instance: Mapping[str, Any], cfg: Any) -> Any:
        import skyrl_gym

        env_class = cfg.env_class or instance.get("env_class")
        if not env_class:
            raise AgentConfigError("task: env needs env_class, in the agent YAML or in every row")
        validate_row(dict(instance))
        # env construction may block (a sandbox, a database): off the event loop
        return await asyncio.to_thread(
            skyrl_gym.make,
            env_class,
            env_config=dict(cfg.env_config or {}) or None,
            extras=copy.deepcopy(row_extras(instance)),
        )

    async def get_instruction(self, instance: Mapping[str, Any]) -> List[Dict[str, Any]]:
        return [dict(m) for m in validate_row(dict(instance))["prompt"]]

    async def complete_runtime(self, runtime: Any, run: Any) -> Any:
        return run.env_reward  # the env scored every turn; the driver closed it

    async def evaluate_result(
        self, result: Any, instance: Mapping[str, Any], data_source: str, instance_id: Any, trajectory_id: int
    ) -> float:
        return float(result or 0.0)


def ground_truth_of(instance: Mapping[str, Any]) -> Any:
    for key in ("reward_spec", "reward_model"):
        spec = instance.get(key)
        if isinstance(spec, Mapping) and "ground_truth" in spec:
            return spec["ground_truth"]
    raise KeyError("the row has no reward_spec.ground_truth (or reward_model.ground_truth) to grade against")


class GeneralReactTask(BaseTask):
    """Math and QA rows for a ReAct agent (see the module docstring). Rows whose ``data_source`` names a QA
    dataset (``nq``, ``hotpotqa``, ``triviaqa``, ...) are graded by SQuAD exact match; every other row by
    math-verify equivalence of the answer (its last ``\\boxed{}`` if it has one) with the ground truth."""

    QA_SOURCES = ("2wikimultihopqa", "bamboogle", "hotpotqa", "musique", "nq", "popqa", "triviaqa", "squad")

    async def get_instruction(self, instance: Mapping[str, Any]) -> List[Dict[str, Any]]:
        return [
            dict(m) for m in validate_row(dict(instance))["prompt"]
        ]  # the agent adds how to call its tools

    async def evaluate_result(
        self, result: Any, instance: Mapping[str, Any], data_source: str, instance_id: Any, trajectory_id: int
    ) -> float:
        if not result:
            return 0.0
        truth = ground_truth_of(instance)
        answer = str(result)
        if str(data_source or "").lower() in self.QA_SOURCES:
            from skyrl_gym.envs.search.utils import targets_of
            from skyrl_gym.rewards import exact_match

            # the hub's QA rows hold {"target": [...]}: its str() was the answer to match ("target: Paris" paid)
            return float(exact_match(answer, targets_of(truth)))
        from skyrl_gym.rewards import last_boxed_content
        from skyrl_gym.rewards.math import math_equal

        boxed = last_boxed_content(answer)
        verdict = await asyncio.to_thread(
            math_equal, boxed if boxed is not None else answer.strip(), str(truth)
        )
        return float(verdict.equal)


TASK_REGISTRY: Dict[str, type] = {"env": EnvTask, "general_react": GeneralReactTask}
# SkyAgent's import paths, so its YAML files name the same tasks.
TASK_ALIASES = {
    "skyrl_agent.tasks.general_react.utils.GeneralReactTask": "general_react",
    "skyrl_agent.tasks.general_react.GeneralReactTask": "general_react",
    "skyrl_agent.tasks.swebench.utils.SWEBenchTask": "swe_bench",
    "skyrl_agent.tasks.swebench.SWEBenchTask": "swe_bench",
    "SWEBenchTask": "swe_bench",
}


def register_task(name: str, cls: type) -> None:
    TASK_REGISTRY[name] = cls


def resolve_task(name: str) -> BaseTask:
    from skygym_adapters.agents.registry import import_object

    name = TASK_ALIASES.get(name, name)
    if name in TASK_REGISTRY:
        return TASK_REGISTRY[name]()
    if "." in name:
        return import_object(name, "task")()
    raise AgentConfigError(
        f"unknown task {name!r}; choose one of {sorted(TASK_REGISTRY)} or an import path (module.Class)"
    )


__all__ = ["BaseTask", "EnvTask", "GeneralReactTask", "TASK_REGISTRY", "register_task", "resolve_task"]
