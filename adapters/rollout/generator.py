"""``RolloutGenerator``: many trajectories at once on one event loop, returned as a SkyRL ``GeneratorOutput``."""

from __future__ import annotations

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from skyrl_gym.registration import env_config_for

from skygym_adapters.engines.base import EngineError, resolve_sampling
from skygym_adapters.engines.client import EngineClient
from skygym_adapters.rollout.chat import ChatTokenizer
from skygym_adapters.rollout.config import RolloutConfig
from skygym_adapters.rollout.drift import check_drift
from skygym_adapters.rollout.loop import engine_error_trajectory, run_trajectory
from skygym_adapters.rollout.metrics import rollout_metrics
from skygym_adapters.rollout.trajectory import Trajectory
from skygym_adapters.types import GeneratorInput, GeneratorOutput, InferenceEngine, SamplingParams, TrajectoryID

# Dataset-row columns that are not env extras.
_ROW_KEYS_NOT_EXTRAS = ("prompt", "env_class")


class RolloutGenerator:
    """Generates trajectories for a batch of prompts with an inference engine and skyrl-gym envs.

    >>> generator = RolloutGenerator(HFEngine("smollm2-135m"), tokenizer, RolloutConfig(max_turns=2))  # doctest: +SKIP
    >>> output = await generator.generate({"prompts": [...], "env_classes": ["gsm8k"], "env_extras": [row]})  # doctest: +SKIP

    Args:
        engine: one engine, a list of engines (spread with per-trajectory affinity), or an :class:`EngineClient`.
        tokenizer: the policy's tokenizer (its chat template drives the token bookkeeping).
        config: :class:`RolloutConfig` (defaults: single turn, 256 new tokens).
        env_pool: an :class:`~skygym_adapters.ray_envs.EnvWorkerPool` whose Ray actors build and step the envs
            (the caller's to shut down); without it, ``config.ray_env_workers > 0`` makes the generator start one of
            its own (ended by :meth:`close`).
    """

    def __init__(
        self,
        engine: Union[InferenceEngine, Sequence[InferenceEngine]],
        tokenizer: Any,
        config: Optional[RolloutConfig] = None,
        env_pool: Any = None,
    ) -> None:
        self.config = config or RolloutConfig()
        self._env_pool = env_pool
        self._owns_env_pool = False
        if isinstance(engine, EngineClient):
            self.client = engine
        elif isinstance(engine, (list, tuple)):
            self.client = EngineClient(list(engine))
        else:
            self.client = EngineClient([engine])
        self.tokenizer = tokenizer
        self.chat = ChatTokenizer(tokenizer, self.config.chat_template, self.config.chat_template_kwargs)
        self._executor: Optional[ThreadPoolExecutor] = None

    # ------------------------------------------------------------------ public API
    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        """SkyRL's generator interface: one output row per input prompt (per turn with step-wise trajectories)."""
        trajectories = await self.run(
            prompts=input_batch["prompts"],
            env_classes=input_batch["env_classes"],
            env_extras=input_batch.get("env_extras"),
            trajectory_ids=input_batch.get("trajectory_ids"),
            sampling_params=input_batch.get("sampling_params"),
        )
        return self.to_generator_output(trajectories)

    async def run(
        self,
        prompts: Sequence[List[Dict[str, Any]]],
        env_classes: Sequence[str],
        env_extras: Optional[Sequence[Optional[Dict[str, Any]]]] = None,
        trajectory_ids: Optional[Sequence[TrajectoryID]] = None,
        sampling_params: Optional[SamplingParams] = None,
        progress: Any = None,
        record_engine_errors: bool = False,
        on_trajectory: Optional[Callable[[int, Trajectory], None]] = None,
    ) -> List[Trajectory]:
        """Run one trajectory per prompt; returns :class:`Trajectory` records in input order.

        ``progress`` (e.g. a tqdm bar) gets ``update(1)`` per finished trajectory, and ``on_trajectory`` gets each
        one as it finishes, with its prompt's index (what a caller keeps of a run stopped by Ctrl-C). An engine
        error stops the whole run (training cannot go on with a broken engine); with ``record_engine_errors`` it
        ends only its own trajectory instead, as an env error does (``stop_reason`` "error", :attr:`Trajectory.error`
        "engine: ..."), so an evaluation keeps what the other trajectories did.
        """
        count = len(prompts)
        if len(env_classes) != count:
            raise ValueError(f"got {len(env_classes)} env_classes for {count} prompts")
        extras = list(env_extras) if env_extras is not None else [{} for _ in range(count)]
        if len(extras) != count:
            raise ValueError(f"got {len(extras)} env_extras for {count} prompts")
        ids = list(trajectory_ids) if trajectory_ids is not None else [
            TrajectoryID(instance_id=str(i), repetition_id=0) for i in range(count)
        ]
        if len(ids) != count:
            raise ValueError(f"got {len(ids)} trajectory_ids for {count} prompts")
        for i, prompt in enumerate(prompts):
            if not isinstance(prompt, list) or not all(isinstance(m, dict) and "role" in m for m in prompt):
                raise ValueError(f"prompts[{i}] must be a list of chat messages ({{'role', 'content'}}), got {prompt!r:.100}")
        params = dict(sampling_params if sampling_params is not None else self.config.sampling_params)
        resolve_sampling(params)  # fail early, before any env is built

        own_progress = None
        if progress is None and self.config.show_progress:
            from tqdm.auto import tqdm

            progress = own_progress = tqdm(total=count, desc="rollouts", unit="traj")
        try:
            trajectories = await self._run_concurrently(prompts, env_classes, extras, ids, params, progress,
                                                        record_engine_errors, on_trajectory)
        finally:
            if own_progress is not None:
                own_progress.close()
        if self.config.check_drift:
            for trajectory in trajectories:
                trajectory.drift = check_drift(trajectory, self.chat)
        return trajectories

    async def run_rows(
        self,
        rows: Sequence[Mapping[str, Any]],
        n_samples_per_prompt: int = 1,
        sampling_params: Optional[SamplingParams] = None,
        progress: Any = None,
        record_engine_errors: bool = False,
        on_trajectory: Optional[Callable[[int, Trajectory], None]] = None,
    ) -> List[Trajectory]:
        """Run ``n_samples_per_prompt`` trajectories for each dataset row (``prompt``, ``env_class``, extras).

        Every other column of a row (``reward_spec``, ``extra_info``, ``data_source``, ...) is passed to the env
        as ``extras``. A row's ``uid`` column, if any, names its trajectories; else its index does.
        ``record_engine_errors``, ``on_trajectory``: see :meth:`run`.
        """
        if n_samples_per_prompt < 1:
            raise ValueError(f"n_samples_per_prompt must be >= 1, got {n_samples_per_prompt}")
        prompts, env_classes, extras, ids = [], [], [], []
        for index, row in enumerate(rows):
            for key in _ROW_KEYS_NOT_EXTRAS:
                if key not in row:
                    raise ValueError(f"row {index} has no {key!r} field (fields: {sorted(row)})")
            for repetition in range(n_samples_per_prompt):
                prompts.append(copy.deepcopy(list(row["prompt"])))
                env_classes.append(str(row["env_class"]))
                extras.append({k: copy.deepcopy(v) for k, v in row.items() if k not in _ROW_KEYS_NOT_EXTRAS})
                ids.append(TrajectoryID(instance_id=str(row.get("uid", index)), repetition_id=repetition))
        return await self.run(prompts, env_classes, extras, ids, sampling_params, progress=progress,
                              record_engine_errors=record_engine_errors, on_trajectory=on_trajectory)

    def to_generator_output(self, trajectories: Sequence[Trajectory]) -> GeneratorOutput:
        """Trajectories -> SkyRL's ``GeneratorOutput`` (applying overlong filtering and reward zeroing options)."""
        config = self.config
        metrics = rollout_metrics(trajectories)
        rows: Dict[str, List[Any]] = {key: [] for key in (
            "prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "rollout_logprobs",
            "trajectory_ids", "env_metrics", "is_last_step", "trajectory_rewards", "num_turns", "errors",
        )}
        # SkyRL's keys: "llm" (engine calls) and "env" (env calls); "total" is the end-to-end time.
        times: Dict[str, List[float]] = {"llm": [], "env": [], "total": []}
        has_logprobs = bool(trajectories) and all(t.logprobs is not None or not t.turns for t in trajectories)
        for t in trajectories:
            zero_reward = config.zero_reward_on_non_stop and t.stop_reason != "stop"
            filtered = config.apply_overlong_filtering and t.stop_reason != "stop"
            if config.step_wise_trajectories:
                samples = t.step_samples() or [_empty_step(t, self.chat)]
            else:
                samples = [{
                    "prompt_ids": t.prompt_ids,
                    "response_ids": t.response_ids() or [self.chat.turn_end_token_id],
                    "loss_mask": t.response_loss_mask() if t.turns else [0],
                    "rewards": t.per_token_rewards() if t.turns else [0.0],
                    "logprobs": t.response_logprobs() if t.turns else [0.0],
                    "is_last_step": True,
                }]
            for sample in samples:
                rewards = [0.0] * len(sample["rewards"]) if zero_reward else list(sample["rewards"])
                rows["prompt_token_ids"].append(list(sample["prompt_ids"]))
                rows["response_ids"].append(list(sample["response_ids"]))
                rows["rewards"].append(rewards if config.per_token_rewards else float(sum(rewards)))
                rows["loss_masks"].append([0] * len(sample["loss_mask"]) if filtered else list(sample["loss_mask"]))
                rows["stop_reasons"].append(t.stop_reason)
                rows["rollout_logprobs"].append(list(sample["logprobs"] or []) if has_logprobs else None)
                rows["trajectory_ids"].append(t.trajectory_id)
                rows["env_metrics"].append(t.env_metrics if sample["is_last_step"] else {})
                rows["is_last_step"].append(sample["is_last_step"])
                rows["trajectory_rewards"].append(0.0 if zero_reward else t.total_reward)
                rows["num_turns"].append(t.num_turns)
                rows["errors"].append(t.error)
                times["llm"].append(t.model_seconds)
                times["env"].append(t.env_seconds)
                times["total"].append(t.total_seconds)
        output: GeneratorOutput = {
            "prompt_token_ids": rows["prompt_token_ids"],
            "response_ids": rows["response_ids"],
            "rewards": rows["rewards"],
            "loss_masks": rows["loss_masks"],
            "stop_reasons": rows["stop_reasons"],
            "rollout_logprobs": rows["rollout_logprobs"] if has_logprobs else None,
            "rollout_metrics": metrics,
            "trajectory_ids": rows["trajectory_ids"],
            "env_metrics": rows["env_metrics"],
            "is_last_step": rows["is_last_step"] if config.step_wise_trajectories else None,
            "trajectory_rewards": rows["trajectory_rewards"],
            "num_turns": rows["num_turns"],
            "errors": rows["errors"],
            "trajectory_time_splits": times,
            "trajectory_generation_times": list(times["total"]),
        }
        return output

    def close(self) -> None:
        """Stop the env thread pool and the Ray env workers this generator started (engines are the caller's to
        close)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._owns_env_pool and self._env_pool is not None:
            self._env_pool.shutdown()
            self._env_pool, self._owns_env_pool = None, False

    @property
    def env_pool(self) -> Any:
        """The :class:`~skygym_adapters.ray_envs.EnvWorkerPool` envs are built in, or None (envs in this process)."""
        if self._env_pool is None and self.config.ray_env_workers > 0:
            from skygym_adapters.ray_envs import EnvWorkerPool

            self._env_pool = EnvWorkerPool(self.config.ray_env_workers, **dict(self.config.ray_env_worker_options))
            self._owns_env_pool = True
        return self._env_pool

    # ------------------------------------------------------------------ internals
    @property
    def executor(self) -> Optional[ThreadPoolExecutor]:
        if self.config.max_env_workers == 0:
            return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.config.max_env_workers, thread_name_prefix="skyrl-env")
        return self._executor

    async def _run_concurrently(
        self,
        prompts: Sequence[List[Dict[str, Any]]],
        env_classes: Sequence[str],
        extras: Sequence[Optional[Dict[str, Any]]],
        ids: Sequence[TrajectoryID],
        params: Dict[str, Any],
        progress: Any,
        record_engine_errors: bool = False,
        on_trajectory: Optional[Callable[[int, Trajectory], None]] = None,
    ) -> List[Trajectory]:
        limit = None if self.config.batched else self.config.max_concurrent_trajectories
        semaphore = asyncio.Semaphore(limit) if limit else None
        executor = self.executor
        pool = self.env_pool
        if pool is not None:
            await pool.astart()

        def trajectory(i: int) -> Any:
            if pool is None:
                return run_trajectory(self.client, self.chat, self.config, prompts[i], env_classes[i], extras[i],
                                      ids[i], params, executor)
            from skygym_adapters.ray_envs import RayEnvCaller

            make_env = pool.env_factory(env_classes[i], env_config_for(self.config.env_configs, env_classes[i], {}),
                                        extras[i])
            return run_trajectory(self.client, self.chat, self.config, prompts[i], env_classes[i], extras[i], ids[i],
                                  params, executor, make_env=make_env, caller=RayEnvCaller(executor))

        # Tell the engine how many trajectories will send requests, so one step's requests decode as one batch
        # (each trajectory ends its session in run_trajectory). With a concurrency limit, the first ``limit`` start
        # at once and each later one is announced when it starts.
        announced_upfront = min(limit, len(prompts)) if limit else len(prompts)
        self.client.expect_sessions(announced_upfront)
        started = 0

        async def recorded(i: int) -> Trajectory:
            try:
                return await trajectory(i)
            except EngineError as exc:
                if not record_engine_errors:
                    raise
                return engine_error_trajectory(self.chat, prompts[i], env_classes[i], ids[i], exc)

        async def one(i: int) -> Trajectory:
            nonlocal started
            if semaphore is None:
                started += 1
                result = await recorded(i)
            else:
                async with semaphore:
                    started += 1
                    if started > announced_upfront:
                        self.client.expect_sessions(1)
                    result = await recorded(i)
            if progress is not None:
                progress.update(1)
            if on_trajectory is not None:
                on_trajectory(i, result)
            return result

        tasks = [asyncio.ensure_future(one(i)) for i in range(len(prompts))]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        finally:
            for k in range(max(0, announced_upfront - started)):  # announced, cancelled before they started
                self.client.finish_session(f"never-started-{k}")


def _empty_step(t: Trajectory, chat: ChatTokenizer) -> Dict[str, Any]:
    """A placeholder sample for a trajectory that failed before its first turn (masked out, reward 0)."""
    return {"prompt_ids": t.prompt_ids, "response_ids": [chat.turn_end_token_id], "loss_mask": [0], "rewards": [0.0],
            "logprobs": [0.0], "stop_reason": t.stop_reason, "is_last_step": True}


async def generate_rollouts(
    engine: Any,
    tokenizer: Any,
    rows: Sequence[Mapping[str, Any]],
    n_samples_per_prompt: int = 1,
    config: Optional[RolloutConfig] = None,
    sampling_params: Optional[SamplingParams] = None,
) -> GeneratorOutput:
    """One call from dataset rows to a ``GeneratorOutput`` (builds and closes a :class:`RolloutGenerator`)."""
    generator = RolloutGenerator(engine, tokenizer, config)
    try:
        trajectories = await generator.run_rows(rows, n_samples_per_prompt, sampling_params)
        return generator.to_generator_output(trajectories)
    finally:
        generator.close()


__all__ = ["RolloutGenerator", "generate_rollouts"]
