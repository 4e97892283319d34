"""Trajectories: one agent on one instance, in three stages a dispatcher schedules.

``initialize_trajectory`` (the task starts the runtime: builds the env), ``generate_trajectory`` (the agent
plays it; the task completes the runtime), ``evaluate_trajectory`` (the task scores the result). The outcome is
``trajectory.result``, a :class:`TrajectoryResult` with SkyAgent's keys. A stage that fails marks the result
(``finish_reason`` and ``error``, or ``eval_error``) and the later stages skip it: one broken trajectory never stops
the batch.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, TypedDict

from skyrl_gym.episode import finite_reward

logger = logging.getLogger(__name__)


class TrajectoryResult(TypedDict, total=False):
    instance_id: Any
    trajectory_id: int
    messages: List[Dict[str, Any]]
    results: Any  # what the task evaluates (the agent's answer; the env's reward for task: env)
    reward: float
    finish_reason: str
    error: Optional[str]
    eval_error: Optional[str]
    num_turns: int
    replies_cut: int  # replies that reached max_tokens and were played cut (token backends; a chat backend ends)
    state: Dict[str, Any]


@dataclass
class TrajectoryConfig:
    instance_id: Any
    trajectory_id: int
    max_prompt_length: Optional[int] = None
    sampling_params: Dict[str, Any] = field(default_factory=dict)
    max_iterations: int = 5
    tools: List[str] = field(default_factory=list)
    agent_cls: str = "react"
    env_class: Optional[str] = None
    env_config: Dict[str, Any] = field(default_factory=dict)
    tool_env_cls: Any = None  # the agent's env for tasks without one (AgentToolEnv, CodeActToolEnv)
    on_turn: Optional[Callable[[], None]] = None  # called after each env step (the turn count of a progress bar)


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class BaseTrajectory(ABC):
    """One agent on one instance. Subclass and write the three stages (each async)."""

    def __init__(
        self,
        cfg: TrajectoryConfig,
        data: Dict[str, Any],
        infer_engine: Any,
        tokenizer: Any,
        task: Any,
        val_mode: bool = False,
        agent_cls: Any = None,
        rollout: Any = None,
        executor: Any = None,
    ) -> None:
        self.cfg = cfg
        self.data = data  # {"instance": ..., "instance_id": ..., "data_source": ...}
        self.infer_engine = infer_engine
        self.tokenizer = tokenizer
        self.task = task
        self.val_mode = val_mode
        self.agent_cls = agent_cls
        self.rollout = rollout  # the rollout loop's generator, for token backends
        self.executor = executor  # where blocking env calls run
        self.result: Optional[TrajectoryResult] = None

    def fail(self, finish_reason: str, error: str) -> None:
        """Mark this trajectory as failed (the later stages skip it)."""
        base = dict(self.result or {})
        base.update(
            instance_id=self.cfg.instance_id,
            trajectory_id=self.cfg.trajectory_id,
            finish_reason=finish_reason,
            error=error,
            reward=0.0,
        )
        base.setdefault("messages", [])
        base.setdefault("eval_error", None)
        self.result = base  # type: ignore[assignment]

    @property
    def failed(self) -> bool:
        return (
            self.result is not None and self.result.get("error") is not None and "results" not in self.result
        )

    @abstractmethod
    async def initialize_trajectory(self) -> None: ...

    @abstractmethod
    async def generate_trajectory(self) -> None: ...

    @abstractmethod
    async def evaluate_trajectory(self) -> None: ...


class ReActTrajectory(BaseTrajectory):
    """The trajectory of :class:`~skygym_adapters.agents.agents.ReActAgent` (and agents with its ``run``)."""

    runtime: Any = None
    run: Any = None

    async def initialize_trajectory(self) -> None:
        try:
            self.runtime = await maybe_await(self.task.initialize_runtime(self.data["instance"], self.cfg))
        except Exception as exc:
            self.fail("error_runtime", f"initialize_runtime: {type(exc).__name__}: {exc}")

    async def generate_trajectory(self) -> None:
        if self.failed:
            return
        instance = self.data["instance"]
        try:
            instruction = await maybe_await(self.task.get_instruction(instance))
            agent = self.agent_cls(self.cfg, self.infer_engine, self.tokenizer)
            env_class = (
                self.cfg.env_class
                or (instance.get("env_class") if hasattr(instance, "get") else None)
                or "agent"
            )
            extras = (
                {k: v for k, v in instance.items() if k not in ("prompt", "env_class")}
                if hasattr(instance, "items")
                else {}
            )
            self.run = await agent.run(
                instruction,
                self.runtime,
                env_class=str(env_class),
                extras=extras,
                rollout=self.rollout,
                executor=self.executor,
            )
            results = await maybe_await(self.task.complete_runtime(self.runtime, self.run))
        except Exception as exc:
            await self._close_runtime()
            self.fail("error_runtime", f"generate: {type(exc).__name__}: {exc}")
            return
        except BaseException:  # cancelled (Ctrl-C): the runtime (a container) must not outlive the run
            await asyncio.shield(self._close_runtime())
            raise
        run = self.run
        self.result = TrajectoryResult(
            instance_id=self.cfg.instance_id,
            trajectory_id=self.cfg.trajectory_id,
            messages=run.messages,
            results=results,
            finish_reason=run.finish_reason,
            error=run.error,
            eval_error=None,
            reward=0.0,
            num_turns=run.num_turns,
            replies_cut=run.replies_cut,
            state={"env_metrics": run.env_metrics},
        )

    async def _close_runtime(self) -> None:
        """The task releases the runtime of a trajectory that failed (``close_runtime``, else ``close()``)."""
        runtime, self.runtime = self.runtime, None
        if runtime is None:
            return
        try:
            close_runtime = getattr(self.task, "close_runtime", None)
            if callable(close_runtime):
                await maybe_await(close_runtime(runtime))
            elif callable(getattr(runtime, "close", None)):
                runtime.close()
        except Exception:
            logger.warning("closing the runtime of trajectory %s failed", self.cfg.instance_id, exc_info=True)

    async def evaluate_trajectory(self) -> None:
        if self.result is None or self.failed:
            return
        if self.result.get("error") is not None:  # the run itself failed: nothing trustworthy to score
            self.result["reward"] = 0.0
            return
        try:
            reward = await maybe_await(
                self.task.evaluate_result(
                    self.result["results"],
                    self.data["instance"],
                    self.data["data_source"],
                    self.cfg.instance_id,
                    self.cfg.trajectory_id,
                )
            )
            if isinstance(reward, bool):  # a verdict (SkyAgent's tasks may return one): 1.0 or 0.0
                reward = float(reward)
            self.result["reward"] = finite_reward(reward, "the task's evaluate_result")  # NaN: a masked row
        except Exception as exc:
            self.result["reward"] = 0.0
            self.result["eval_error"] = f"{type(exc).__name__}: {exc}"


__all__ = ["BaseTrajectory", "ReActTrajectory", "TrajectoryConfig", "TrajectoryResult", "maybe_await"]
