"""Checks that run before any model loads; each problem names its key and why it cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

from skygym_train.config.errors import ConfigError

STRATEGIES = ("fsdp2", "fsdp")
BACKENDS = ("hf", "vllm", "remote", "sglang")
WEIGHT_SYNC_BACKENDS = ("auto", "inprocess", "gloo", "nccl", "checkpoint")
LOGGERS = ("console", "tensorboard", "wandb", "jsonl")
RESUME_MODES = (None, "none", "latest", "from_path")


EXPORT_DTYPES = ("float32", "bfloat16", "float16")


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover - the train extra installs torch
        return False


def policy_world_size(cfg: Any, has_cuda: Optional[bool] = None) -> int:
    """How many policy workers (data-parallel ranks) this configuration starts."""
    trainer = cfg.trainer
    if not trainer.use_ray:
        return 1
    has_cuda = cuda_available() if has_cuda is None else has_cuda
    if has_cuda:
        return trainer.placement.policy_num_nodes * trainer.placement.policy_num_gpus_per_node
    return trainer.num_cpu_workers


def critic_world_size(cfg: Any, has_cuda: Optional[bool] = None) -> int:
    trainer = cfg.trainer
    if not trainer.use_ray:
        return 1
    has_cuda = cuda_available() if has_cuda is None else has_cuda
    if has_cuda:
        return trainer.placement.critic_num_nodes * trainer.placement.critic_num_gpus_per_node
    return trainer.num_cpu_workers


def uses_critic(cfg: Any) -> bool:
    return cfg.trainer.algorithm.advantage_estimator == "gae"


def uses_ref(cfg: Any) -> bool:
    algo = cfg.trainer.algorithm
    return bool(algo.use_kl_loss or algo.use_kl_in_reward)


def loggers_of(cfg: Any) -> List[str]:
    value = cfg.trainer.logger
    return [name.strip() for name in str(value).split(",") if name.strip()]


def validate_config(cfg: Any, has_cuda: Optional[bool] = None) -> None:
    """Raise ``ConfigError`` listing every problem found (not just the first)."""
    from skygym_train.algorithms.advantages import ADVANTAGE_ESTIMATORS
    from skygym_train.algorithms.kl import KL_ESTIMATORS
    from skygym_train.algorithms.policy_losses import LOSS_REDUCTIONS, POLICY_LOSSES

    problems: List[str] = []
    t, g, algo = cfg.trainer, cfg.generator, cfg.trainer.algorithm

    def positive(key: str, value: Any) -> bool:
        if not isinstance(value, int) or value < 1:
            problems.append(f"{key}={value}: must be a positive integer")
            return False
        return True

    if not t.policy.model.path:
        problems.append("trainer.policy.model.path: not set (a local folder, hub id or 'smollm2-135m')")
    if not cfg.data.train_data:
        problems.append("data.train_data: no training files given")
    for key, files in (("data.train_data", cfg.data.train_data), ("data.val_data", cfg.data.val_data)):
        for f in files:
            if "://" not in f and not Path(f).expanduser().exists():
                problems.append(f"{key}: file {f} does not exist")

    sizes_ok = all(
        positive(k, v)
        for k, v in (
            ("trainer.train_batch_size", t.train_batch_size),
            ("trainer.policy_mini_batch_size", t.policy_mini_batch_size),
            ("trainer.micro_train_batch_size_per_gpu", t.micro_train_batch_size_per_gpu),
            ("trainer.micro_forward_batch_size_per_gpu", t.micro_forward_batch_size_per_gpu),
            ("generator.n_samples_per_prompt", g.n_samples_per_prompt),
            ("trainer.epochs", t.epochs),
            ("trainer.update_epochs_per_batch", t.update_epochs_per_batch),
            ("trainer.eval_batch_size", t.eval_batch_size),
            ("generator.max_turns", g.max_turns),
            ("generator.num_inference_engines", g.num_inference_engines),
            ("generator.inference_engine_tensor_parallel_size", g.inference_engine_tensor_parallel_size),
            ("trainer.num_cpu_workers", t.num_cpu_workers),
        )
    )
    if sizes_ok:
        if t.train_batch_size % t.policy_mini_batch_size:
            problems.append(
                f"trainer.train_batch_size={t.train_batch_size} is not a multiple of "
                f"trainer.policy_mini_batch_size={t.policy_mini_batch_size}"
            )
        world = policy_world_size(cfg, has_cuda)
        per_step = t.policy_mini_batch_size * g.n_samples_per_prompt
        if per_step % world:
            problems.append(
                f"trainer.policy_mini_batch_size * generator.n_samples_per_prompt = {per_step} sequences per "
                f"optimizer step cannot be split evenly over {world} policy workers"
            )
        elif (per_step // world) % t.micro_train_batch_size_per_gpu:
            problems.append(
                f"trainer.micro_train_batch_size_per_gpu={t.micro_train_batch_size_per_gpu} does not divide the "
                f"{per_step // world} sequences each policy worker gets per optimizer step "
                f"(policy_mini_batch_size * n_samples_per_prompt / workers)"
            )
        if uses_critic(cfg):
            if positive("trainer.critic_mini_batch_size", t.critic_mini_batch_size):
                if t.train_batch_size % t.critic_mini_batch_size:
                    problems.append(
                        f"trainer.train_batch_size={t.train_batch_size} is not a multiple of "
                        f"trainer.critic_mini_batch_size={t.critic_mini_batch_size}"
                    )
                critic_seqs = t.critic_mini_batch_size * g.n_samples_per_prompt
                cworld = critic_world_size(cfg, has_cuda)
                if critic_seqs % (cworld * t.micro_train_batch_size_per_gpu):
                    problems.append(
                        f"trainer.critic_mini_batch_size * generator.n_samples_per_prompt = {critic_seqs} is not "
                        f"divisible by {cworld} critic workers x micro_train_batch_size_per_gpu"
                    )

    if t.max_tokens_per_microbatch != -1 and t.max_tokens_per_microbatch <= 0:
        problems.append(
            f"trainer.max_tokens_per_microbatch={t.max_tokens_per_microbatch}: must be -1 (micro-batches by "
            "row count) or a positive token budget"
        )

    if algo.advantage_estimator not in ADVANTAGE_ESTIMATORS:
        problems.append(
            f"trainer.algorithm.advantage_estimator={algo.advantage_estimator!r}: not registered "
            f"(known: {', '.join(ADVANTAGE_ESTIMATORS.names())})"
        )
    elif algo.advantage_estimator in ("grpo", "rloo") and g.n_samples_per_prompt < 2:
        problems.append(
            f"generator.n_samples_per_prompt={g.n_samples_per_prompt}: {algo.advantage_estimator} compares samples "
            "of the same prompt, so it needs at least 2 (every advantage would be 0)"
        )
    if algo.policy_loss_type not in POLICY_LOSSES:
        problems.append(
            f"trainer.algorithm.policy_loss_type={algo.policy_loss_type!r}: not registered "
            f"(known: {', '.join(POLICY_LOSSES.names())})"
        )
    if algo.loss_reduction not in LOSS_REDUCTIONS:
        problems.append(
            f"trainer.algorithm.loss_reduction={algo.loss_reduction!r}: expected one of {', '.join(LOSS_REDUCTIONS)}"
        )
    if algo.kl_estimator_type not in KL_ESTIMATORS + ("low_var_kl",):
        problems.append(f"trainer.algorithm.kl_estimator_type={algo.kl_estimator_type!r}: expected k1, k2 or k3")
    if algo.kl_ctrl.type not in ("fixed", "adaptive"):
        problems.append(f"trainer.algorithm.kl_ctrl.type={algo.kl_ctrl.type!r}: expected 'fixed' or 'adaptive'")
    if algo.use_kl_loss and algo.use_kl_in_reward:
        problems.append(
            "trainer.algorithm.use_kl_loss and use_kl_in_reward are both true: choose one place for the KL term"
        )
    if algo.eps_clip_low < 0 or algo.eps_clip_high < 0:
        problems.append("trainer.algorithm.eps_clip_low/eps_clip_high: must be >= 0")
    if algo.policy_loss_type == "dual_clip" and algo.clip_ratio_c <= 1:
        problems.append(f"trainer.algorithm.clip_ratio_c={algo.clip_ratio_c}: dual clip needs a value above 1")
    if algo.dynamic_sampling.type not in (None, "filter", "replace"):
        problems.append(
            f"trainer.algorithm.dynamic_sampling.type={algo.dynamic_sampling.type!r}: expected null, filter or replace"
        )

    if t.strategy not in STRATEGIES:
        problems.append(f"trainer.strategy={t.strategy!r}: this trainer supports {', '.join(STRATEGIES)}")
    if t.export_dtype not in EXPORT_DTYPES:
        problems.append(f"trainer.export_dtype={t.export_dtype!r}: expected one of {', '.join(EXPORT_DTYPES)}")
    if g.backend not in BACKENDS:
        problems.append(f"generator.backend={g.backend!r}: expected one of {', '.join(BACKENDS)}")
    if g.weight_sync_backend not in WEIGHT_SYNC_BACKENDS:
        problems.append(
            f"generator.weight_sync_backend={g.weight_sync_backend!r}: expected one of {', '.join(WEIGHT_SYNC_BACKENDS)}"
        )
    if g.backend in ("remote", "sglang"):
        if not g.remote_inference_engine_urls:
            problems.append(f"generator.remote_inference_engine_urls: generator.backend={g.backend} needs server URLs")
        if t.placement.colocate_all:
            problems.append(
                "trainer.placement.colocate_all=true: remote engines run elsewhere and cannot be colocated"
            )
    if g.weight_sync_backend == "nccl" and has_cuda is False:
        problems.append("generator.weight_sync_backend=nccl: needs CUDA GPUs (use gloo on CPU)")
    if g.backend in ("remote", "sglang") and g.weight_sync_backend in ("inprocess", "gloo", "nccl"):
        problems.append(
            f"generator.weight_sync_backend={g.weight_sync_backend}: {g.backend} servers run elsewhere and "
            "reload from a folder (use checkpoint or auto)"
        )

    sp = g.sampling_params
    if g.eval_sampling_params is not None and g.eval_sampling_params.temperature < 0:
        problems.append(f"generator.eval_sampling_params.temperature={g.eval_sampling_params.temperature}: must be >= 0")
    if sp.temperature < 0:
        problems.append(f"generator.sampling_params.temperature={sp.temperature}: must be >= 0")
    if not 0 < sp.top_p <= 1:
        problems.append(f"generator.sampling_params.top_p={sp.top_p}: must be in (0, 1]")
    if sp.max_generate_length < 1:
        problems.append("generator.sampling_params.max_generate_length: must be >= 1")
    if algo.loss_reduction == "seq_mean_token_sum_norm" and algo.max_seq_len is not None and algo.max_seq_len < 1:
        problems.append("trainer.algorithm.max_seq_len: must be positive")

    for key, value in (("trainer.eval_interval", t.eval_interval), ("trainer.ckpt_interval", t.ckpt_interval)):
        if value == 0 or value < -1:
            problems.append(f"{key}={value}: use a positive number of steps, or -1 to disable")
    if t.resume_mode not in RESUME_MODES:
        problems.append(f"trainer.resume_mode={t.resume_mode!r}: expected latest, from_path or none")
    if t.resume_mode == "from_path" and not t.resume_path:
        problems.append("trainer.resume_path: resume_mode=from_path needs a checkpoint folder")
    for name in loggers_of(cfg):
        if name not in LOGGERS:
            problems.append(f"trainer.logger: unknown logger {name!r}; choose from {', '.join(LOGGERS)}")
    if t.async_training.enabled:
        if t.placement.colocate_all:
            problems.append(
                "trainer.async_training.enabled=true with trainer.placement.colocate_all=true: one-step-off "
                "training overlaps generation with training, so engines need their own resources"
            )
        if t.async_training.max_staleness_steps < 1:
            problems.append("trainer.async_training.max_staleness_steps: must be >= 1 when async training is on")
    if t.policy.model.lora.rank < 0:
        problems.append("trainer.policy.model.lora.rank: must be >= 0")
    if problems:
        raise ConfigError(problems)
