"""``AgentRunner``: a batch of instances -> trajectories -> a dispatcher -> training or evaluation output.

::

    from skygym_adapters.agents import AutoAgentRunner

    runner = AutoAgentRunner.from_task("agent.yaml", infer_engine=None, tokenizer=None)  # openai_server backend
    out = await runner.run(rows, val_mode=True)      # {"rewards", "messages", "results", "summary"}

    runner = AutoAgentRunner.from_task("agent.yaml", infer_engine=engine, tokenizer=tokenizer)  # skyrl-train
    out = await runner.run(batch)                    # the bundled trainer's GeneratorOutput
    out = await runner.generate(generator_input)     # the trainer's generator interface, one trajectory per prompt
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from skygym_adapters.agents.agents import CodeActAgent, ReActAgent
from skygym_adapters.agents.backends import build_backend
from skygym_adapters.agents.config import AgentConfig, AgentConfigError, load_agent_config, parse_agent_config
from skygym_adapters.agents.dispatchers import DISPATCHER_REGISTRY
from skygym_adapters.agents.registry import import_object
from skygym_adapters.agents.tasks import resolve_task
from skygym_adapters.agents.tools import build_tools
from skygym_adapters.agents.trajectory import (
    BaseTrajectory,
    ReActTrajectory,
    TrajectoryConfig,
    TrajectoryResult,
)
from skygym_adapters.rollout.metrics import pass_at_k
from skygym_adapters.types import GeneratorOutput

logger = logging.getLogger(__name__)

# agent_cls short name -> (trajectory class, agent class)
AGENT_REGISTRY: Dict[str, Tuple[type, type]] = {
    "react": (ReActTrajectory, ReActAgent),
    "codeact": (ReActTrajectory, CodeActAgent),
}
AGENT_ALIASES = {
    "skyrl_agent.agents.react.ReActAgent": "react",
    "ReActAgent": "react",
    "skyrl_agent.agents.oh_codeact.OHCodeActAgent": "codeact",
    "OHCodeActAgent": "codeact",
}


# SkyAgent's rule: trajectories that ended for these reasons are not trained on (all-zero loss mask), nor are
# those whose evaluation failed.
MASKED_FINISH_REASONS = (
    "CONTEXT_WINDOW_EXCEEDED",
    "max_iterations_reached",
    "error_runtime",
    "error_backend",
    "aborted",
)


def register_agent(name: str, trajectory_cls: type, agent_cls: type) -> None:
    AGENT_REGISTRY[name] = (trajectory_cls, agent_cls)


def resolve_agent(name: str) -> Tuple[type, type]:
    name = AGENT_ALIASES.get(name, name)
    if name in AGENT_REGISTRY:
        return AGENT_REGISTRY[name]
    if "." in name:
        obj = import_object(name, "agent_cls")
        if isinstance(obj, type) and issubclass(obj, BaseTrajectory):
            return obj, ReActAgent
        return ReActTrajectory, obj
    raise AgentConfigError(
        f"unknown agent_cls {name!r}; choose one of {sorted(AGENT_REGISTRY)} or an import path "
        "(a BaseTrajectory subclass, or an agent class with ReActAgent's run())"
    )


def get_field(path: str, content: Any) -> Any:
    """``a.b.c`` of nested mappings (SkyAgent's ``data.*_key``); KeyError naming the path when absent."""
    value = content
    for part in path.split("."):
        try:
            value = value[part]
        except (KeyError, TypeError, IndexError):
            raise KeyError(f"{path!r} is not in the row") from None
    return value


def summarize_results(results: Sequence[TrajectoryResult], success_threshold: float = 1.0) -> Dict[str, Any]:
    """Mean reward, pass@1 and pass@k (k = trajectories per instance, when more than one), finish reasons, errors."""
    if not results:
        return {"trajectories": 0}
    by_instance: Dict[str, List[bool]] = {}
    for r in results:
        by_instance.setdefault(str(r["instance_id"]), []).append(
            float(r.get("reward") or 0.0) >= success_threshold
        )
    k = min(len(v) for v in by_instance.values())
    summary: Dict[str, Any] = {
        "instances": len(by_instance),
        "trajectories": len(results),
        "mean_reward": sum(float(r.get("reward") or 0.0) for r in results) / len(results),
        "pass@1": sum(pass_at_k(len(v), sum(v), 1) for v in by_instance.values()) / len(by_instance),
    }
    if k > 1:
        summary[f"pass@{k}"] = sum(pass_at_k(len(v), sum(v), k) for v in by_instance.values()) / len(
            by_instance
        )
    summary["mean_turns"] = sum(int(r.get("num_turns") or 0) for r in results) / len(results)
    summary["finish_reasons"] = dict(Counter(str(r.get("finish_reason")) for r in results))
    # a reply cut at max_tokens is played as it was on a token backend (a chat backend ends the trajectory): say so
    summary["trajectories_with_replies_cut"] = sum(int(r.get("replies_cut") or 0) > 0 for r in results)
    summary["errors"] = sum(r.get("error") is not None for r in results)
    summary["eval_errors"] = sum(r.get("eval_error") is not None for r in results)
    return summary


class AgentRunner:
    """Runs an agent on batches of instances (see the module docstring).

    Args:
        cfg: an :class:`AgentConfig`, or the YAML's content as a mapping (parsed and checked here, once).
        infer_engine: the engine(s) of a token backend (``skyrl-train``); ignored by ``openai_server``.
        tokenizer: the policy's tokenizer (token backends); optional for ``openai_server``, where it only counts
            context tokens for ``max_prompt_length``.
    """

    def __init__(
        self, cfg: Union[AgentConfig, Mapping[str, Any]], infer_engine: Any = None, tokenizer: Any = None
    ) -> None:
        self.cfg = parse_agent_config(cfg)
        self.traj_cls, self.agent_cls = resolve_agent(self.cfg.agent_cls)
        self.task = resolve_task(self.cfg.task)
        if self.cfg.dispatcher.type not in DISPATCHER_REGISTRY:
            raise AgentConfigError(
                f"unknown dispatcher.type {self.cfg.dispatcher.type!r}; choose one of "
                f"{sorted(DISPATCHER_REGISTRY)} (or register one with register_dispatcher)"
            )
        self.tools = list(self.cfg.tools) or list(getattr(self.agent_cls, "default_tools", []))
        build_tools(self.tools)  # names checked now, not on the first trajectory
        self.infer_engine = infer_engine
        self.tokenizer = tokenizer
        self._build_backend()  # now, so that a bad backend config fails here
        # the trajectories of the run in progress (of the latest one started, when several run at once: each run
        # reads only its own)
        self.trajectories: Dict[Any, Dict[int, BaseTrajectory]] = {}
        # runs in progress, by event loop: a loop's HTTP session of the backend is closed when its last run ends;
        # the task's runtimes, and backends replaced while runs were in progress, when the last run of all ends
        self._runs_lock = threading.Lock()
        self._runs_by_loop: "Counter[asyncio.AbstractEventLoop]" = Counter()
        self._retired_backends: List[Any] = []
        self._executor: Optional[ThreadPoolExecutor] = None
        self._warned_env_classes: set = set()

    @classmethod
    def from_task(cls, task: str, infer_engine: Any = None, tokenizer: Any = None) -> "AgentRunner":
        """A runner from a YAML path, or the name of a shipped config."""
        return cls(load_agent_config(task), infer_engine, tokenizer)

    def _backend_settings(self) -> Tuple[Any, ...]:
        g = self.cfg.generator
        return (g.infer_backend, copy.deepcopy(dict(g.backend_config or {})), g.qwen3_enable_thinking)

    def _build_backend(self) -> None:
        g = self.cfg.generator
        self.chat_template_kwargs = (
            {} if g.qwen3_enable_thinking is None else {"enable_thinking": g.qwen3_enable_thinking}
        )
        self.backend = build_backend(
            g.infer_backend, g.backend_config, self.infer_engine, self.tokenizer,
            chat_template_kwargs=self.chat_template_kwargs,
        )
        self._backend_built_from = self._backend_settings()

    async def _backend_as_configured(self) -> None:
        """Build the backend again when ``cfg.generator``'s backend settings changed since it was built (e.g.
        ``runner.cfg.generator.backend_config.update(base_url=...)`` after ``from_task``): they were silently
        ignored, and every request went to the YAML's URL."""
        if self._backend_settings() != self._backend_built_from:
            self._retired_backends.append(self.backend)  # another run may still be using it
            self._build_backend()

    # ------------------------------------------------------------------ batches
    def _rows(self, batch: Any) -> List[Dict[str, Any]]:
        if isinstance(batch, Mapping) and "prompts" in batch:  # a GeneratorInput
            prompts = batch["prompts"]
            classes = batch.get("env_classes") or [None] * len(prompts)
            extras = batch.get("env_extras") or [{} for _ in prompts]
            rows = []
            for prompt, env_class, extra in zip(prompts, classes, extras):
                row = {**dict(extra or {}), "prompt": prompt}
                if env_class is not None:
                    row["env_class"] = env_class
                rows.append(row)
            return rows
        if isinstance(batch, Mapping):
            raise TypeError(
                "run() takes a list of rows or a GeneratorInput (with 'prompts'), got a mapping with keys "
                f"{sorted(batch)[:8]}"
            )
        return [dict(row) for row in batch]

    def _warn_replaced_env_classes(self, rows: List[Dict[str, Any]]) -> None:
        """One warning (per runner and row env) when the config's ``env_class`` replaces rows' own: rows of another
        env are then played and scored by the config's, which is easy to miss with a shipped config."""
        forced = self.cfg.env_class
        if not forced:
            return
        own: Counter = Counter()
        for row in rows:
            try:
                instance = get_field(self.cfg.data.instance_key, row) if self.cfg.data.instance_key else row
            except KeyError:
                continue  # reported when the trajectory is built
            env_class = instance.get("env_class") if isinstance(instance, Mapping) else None
            if env_class and env_class != forced and env_class not in self._warned_env_classes:
                own[str(env_class)] += 1
        if not own:
            return
        self._warned_env_classes.update(own)
        named = ", ".join(f"{name!r} x{count}" for name, count in sorted(own.items()))
        logger.warning(
            "the agent config's env_class %r replaces the env_class of %d of %d rows (%s): they are played and "
            "scored by %r; leave env_class out of the config to use each row's own",
            forced, sum(own.values()), len(rows), named, forced,
        )

    def _get_data(self, content: Mapping[str, Any], index: int) -> Dict[str, Any]:
        d = self.cfg.data
        instance = get_field(d.instance_key, content) if d.instance_key else content
        instance_id: Any = index
        if d.instance_id_key:
            try:
                instance_id = get_field(d.instance_id_key, content)
            except KeyError:
                instance_id = index
        data_source = "default"
        if d.data_source_key:
            try:
                data_source = get_field(d.data_source_key, content)
            except KeyError:
                pass
        return {"instance": instance, "instance_id": instance_id, "data_source": data_source}

    @property
    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="skyrl-agent-env")
        return self._executor

    def _rollout(self, sampling_params: Dict[str, Any]) -> Any:
        """The rollout loop's generator (token bookkeeping and GeneratorOutput) for token backends."""
        if not getattr(self.backend, "token_level", False):
            return None
        from skygym_adapters.rollout import RolloutConfig, RolloutGenerator

        g = self.cfg.generator
        config = RolloutConfig(
            sampling_params=dict(sampling_params),
            max_turns=g.max_iterations,  # type: ignore[arg-type]
            max_input_length=g.max_prompt_length,
            chat_template_kwargs=dict(self.chat_template_kwargs),
            max_env_workers=0,
        )
        return RolloutGenerator(self.backend.engine, self.backend.tokenizer, config)

    def _build(
        self,
        rows: List[Dict[str, Any]],
        val_mode: bool,
        repetitions: Optional[List[Tuple[Any, int]]],
        rollout: Any,
        sampling_params: Dict[str, Any],
        on_turn: Optional[Callable[[], None]] = None,
    ) -> Dict[Any, Dict[int, BaseTrajectory]]:
        g = self.cfg.generator
        trajectories: Dict[Any, Dict[int, BaseTrajectory]] = {}
        for index, row in enumerate(rows):
            data = self._get_data(row, index)
            if repetitions is not None:  # the trainer's generate(): one trajectory per prompt, ids given
                instance_id, ids = repetitions[index][0], [repetitions[index][1]]
                data["instance_id"] = instance_id
            else:
                ids = list(range(self.cfg.num_trajectories(val_mode)))
            per: Dict[int, BaseTrajectory] = {}
            for trajectory_id in ids:
                cfg = TrajectoryConfig(
                    instance_id=data["instance_id"],
                    trajectory_id=trajectory_id,
                    max_prompt_length=g.max_prompt_length,
                    sampling_params=dict(sampling_params),
                    max_iterations=g.max_iterations,
                    tools=list(self.tools),
                    agent_cls=self.cfg.agent_cls,
                    env_class=self.cfg.env_class,
                    env_config=dict(self.cfg.env_config),
                    tool_env_cls=getattr(self.agent_cls, "tool_env_cls", None),
                    on_turn=on_turn,
                )
                per[trajectory_id] = self.traj_cls(
                    cfg,
                    data,
                    self.backend,
                    self.tokenizer,
                    self.task,
                    val_mode=val_mode,
                    agent_cls=self.agent_cls,
                    rollout=rollout,
                    executor=self.executor,
                )
            trajectories[index] = per
        return trajectories

    # ------------------------------------------------------------------ running
    async def run(
        self,
        batch: Any,
        val_mode: bool = False,
        on_trajectory_done: Optional[Callable[[BaseTrajectory], None]] = None,
        on_turn: Optional[Callable[[], None]] = None,
    ) -> Dict[str, Any]:
        """Run ``generator.num_trajectories`` trajectories per instance (``val_config``'s in ``val_mode``).
        ``on_trajectory_done(trajectory)`` is called as each one ends, ``on_turn()`` after each env step of any
        (what a progress bar shows while long trajectories run).

        Training (``val_mode=False``, token backends): the bundled trainer's ``GeneratorOutput``. Evaluation
        (``val_mode=True``): ``{"rewards", "messages", "results", "summary"}`` in instance order.
        """
        return await self._run(self._rows(batch), val_mode, None, on_trajectory_done, on_turn=on_turn)

    async def generate(self, input_batch: Mapping[str, Any]) -> GeneratorOutput:
        """The bundled trainer's generator interface: one trajectory per prompt (the trainer already repeated each
        prompt ``n_samples_per_prompt`` times), named by the input's ``trajectory_ids``."""
        rows = self._rows(input_batch)
        ids = input_batch.get("trajectory_ids")
        repetitions = (
            [(t["instance_id"], int(t["repetition_id"])) for t in ids]
            if ids
            else [(i, 0) for i in range(len(rows))]
        )
        output = await self._run(rows, False, repetitions, None, input_batch.get("sampling_params"))
        return output  # type: ignore[return-value]

    async def _run(
        self,
        rows: List[Dict[str, Any]],
        val_mode: bool,
        repetitions: Optional[List[Tuple[Any, int]]],
        on_trajectory_done: Optional[Callable[[BaseTrajectory], None]],
        sampling_override: Optional[Mapping[str, Any]] = None,
        on_turn: Optional[Callable[[], None]] = None,
    ) -> Dict[str, Any]:
        loop = asyncio.get_running_loop()
        with self._runs_lock:
            self._runs_by_loop[loop] += 1
        rollout = None
        trajectories: Dict[Any, Dict[int, BaseTrajectory]] = {}
        try:
            await self._backend_as_configured()
            if not val_mode and not getattr(self.backend, "token_level", False):
                raise AgentConfigError(
                    f"training output needs token ids, which infer_backend "
                    f"{self.cfg.generator.infer_backend!r} does not give; run with val_mode=True to "
                    "evaluate, or use infer_backend: skyrl-train with an engine and a tokenizer"
                )
            sampling = dict(sampling_override) if sampling_override else self.cfg.sampling_params(val_mode)
            rollout = self._rollout(sampling)
            self._warn_replaced_env_classes(rows)
            # this run's own: the trainer's training batch and its evaluation may run at once on one runner
            trajectories = self.trajectories = self._build(rows, val_mode, repetitions, rollout, sampling, on_turn)
            limits = self.cfg.dispatcher.limits(val_mode)
            dispatcher = DISPATCHER_REGISTRY[self.cfg.dispatcher.type]
            num_trajectories = 1 if repetitions is not None else self.cfg.num_trajectories(val_mode)
            dispatcher_cfg = {
                "max_parallel_agents": limits.max_parallel_agents,
                "max_eval_parallel_agents": limits.max_eval_parallel_agents,
                "num_instances": len(rows),
                "num_trajectories": num_trajectories,
                "sampling_params": sampling,
                "on_trajectory_done": on_trajectory_done,
            }
            await dispatcher(
                dispatcher_cfg,
                trajectories,
                "initialize_trajectory",
                "generate_trajectory",
                "evaluate_trajectory",
            )
            ordered = [t for per in trajectories.values() for _, t in sorted(per.items())]
            for t in ordered:
                if t.result is None:  # a dispatcher that skipped it
                    t.fail("error_runtime", "the dispatcher never ran this trajectory")
            if val_mode:
                return self._eval_output(ordered)
            return self._training_output(ordered, rollout)
        finally:
            if rollout is not None:
                rollout.close()
            if self.trajectories is trajectories:
                self.trajectories = {}
            retired: List[Any] = []
            with self._runs_lock:
                self._runs_by_loop[loop] -= 1
                last_on_loop = self._runs_by_loop[loop] == 0
                if last_on_loop:
                    del self._runs_by_loop[loop]
                if not self._runs_by_loop:
                    # the last run of all. Before any await, and under the lock: a run that starts meanwhile (on
                    # this loop at the await, or on another thread) must not lose the runtimes it makes
                    retired, self._retired_backends = self._retired_backends, []
                    self._close_task_runtimes()
            if last_on_loop:
                # the backend's HTTP session belongs to this loop, which may end with the run (asyncio.run): close
                # it now, not at garbage collection ("Unclosed client session"); the next run opens its own
                await self._close_backends([self.backend, *retired])

    def _close_task_runtimes(self) -> None:
        """What a task started and still holds (containers of trajectories cut short: Ctrl-C, a crash)."""
        close_all = getattr(self.task, "close_all_runtimes", None)
        if callable(close_all):
            try:
                close_all()
            except Exception:
                logger.warning("the task's close_all_runtimes failed", exc_info=True)

    @staticmethod
    async def _close_backends(backends: List[Any]) -> None:
        for backend in backends:
            try:
                await backend.aclose()
            except Exception:  # a run's result is not lost to its clean-up
                logger.warning("closing the inference backend failed", exc_info=True)

    def _eval_output(self, ordered: List[BaseTrajectory]) -> Dict[str, Any]:
        results = [t.result for t in ordered]
        return {
            "rewards": [float(r.get("reward") or 0.0) for r in results],
            "messages": [r.get("messages", []) for r in results],
            "results": results,
            "summary": summarize_results(results),
        }

    def _training_output(self, ordered: List[BaseTrajectory], rollout: Any) -> GeneratorOutput:
        from skygym_adapters.rollout.trajectory import Trajectory
        from skygym_adapters.types import TrajectoryID

        trajectories = []
        for t in ordered:
            run = getattr(t, "run", None)
            trajectory = getattr(run, "trajectory", None)
            reward = float(t.result.get("reward") or 0.0)
            if trajectory is None:  # failed before the agent ran: a masked-out row
                prompt = (
                    list(t.data["instance"].get("prompt") or []) if hasattr(t.data["instance"], "get") else []
                )
                try:
                    prompt_ids = rollout.chat.prompt_ids(prompt)
                except Exception:
                    prompt_ids = [rollout.chat.turn_end_token_id]
                trajectory = Trajectory(
                    trajectory_id=TrajectoryID(
                        instance_id=str(t.cfg.instance_id), repetition_id=int(t.cfg.trajectory_id)
                    ),
                    env_class=str(t.cfg.env_class or "agent"),
                    prompt_ids=prompt_ids,
                    error=t.result.get("error") or "failed",
                    stop_reason="error",
                )
            elif trajectory.turns and trajectory.error is None and trajectory.total_reward != reward:
                # the task's evaluation is the trajectory's reward: it sits on the last turn's last token
                trajectory.turns[-1].reward += reward - trajectory.total_reward
            trajectories.append(trajectory)
        output = rollout.to_generator_output(trajectories)
        for row, t in enumerate(ordered):
            if (
                t.result.get("finish_reason") in MASKED_FINISH_REASONS
                or t.result.get("eval_error") is not None
            ):
                output["loss_masks"][row] = [0] * len(output["loss_masks"][row])
        reasons = Counter(str(t.result.get("finish_reason")) for t in ordered)
        metrics = output["rollout_metrics"]
        for reason, count in reasons.items():
            metrics[f"agent/finish_reason/{reason}"] = count / len(ordered)
        metrics["agent/avg_reward"] = sum(float(t.result.get("reward") or 0.0) for t in ordered) / max(
            len(ordered), 1
        )
        metrics["agent/num_eval_errors"] = sum(t.result.get("eval_error") is not None for t in ordered)
        return output

    async def aclose(self) -> None:
        """Close the backend's HTTP session on this loop and stop the env worker threads (as ``async with``
        does on exit)."""
        retired, self._retired_backends = self._retired_backends, []
        await self._close_backends([self.backend, *retired])
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def __aenter__(self) -> "AgentRunner":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


class AutoAgentRunner:
    """SkyAgent's entry point: ``AutoAgentRunner.from_task(yaml_path_or_name, infer_engine, tokenizer)``."""

    @classmethod
    def from_task(cls, task: str, infer_engine: Any = None, tokenizer: Any = None) -> AgentRunner:
        return AgentRunner.from_task(task, infer_engine, tokenizer)


__all__ = [
    "AGENT_REGISTRY",
    "MASKED_FINISH_REASONS",
    "AgentRunner",
    "AutoAgentRunner",
    "get_field",
    "register_agent",
    "resolve_agent",
    "summarize_results",
]
