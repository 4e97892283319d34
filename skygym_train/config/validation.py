"""Checks that run before any model loads; each problem names its key and why it cannot run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, Optional

from omegaconf import OmegaConf

from skygym_train.config.errors import ConfigError

STRATEGIES = ("fsdp2", "fsdp", "deepspeed")
BACKENDS = ("hf", "vllm", "remote", "sglang")
WEIGHT_SYNC_BACKENDS = ("auto", "inprocess", "shm", "gloo", "nccl", "checkpoint")
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
    """``trainer.logger`` as names: a list (SkyRL-train's tracking takes one too) or a comma-separated string."""
    value = cfg.trainer.logger
    parts = value if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else str(value).split(",")
    return [str(name).strip() for name in parts if str(name).strip()]


SCHEDULERS_NEEDING_MORE = {
    "cosine_with_min_lr": "needs min_lr or min_lr_rate",
    "cosine_warmup_with_min_lr": "needs min_lr or min_lr_rate",
    "warmup_stable_decay": "needs num_decay_steps",
    "reduce_lr_on_plateau": "steps on a metric, not once per training step",
    "greedy": "steps on a metric, not once per training step",
}
"""transformers schedulers that ``get_scheduler(name, optimizer, num_warmup_steps, num_training_steps)`` alone cannot
run (the config has no key for their extra arguments)."""


def schedulers() -> List[str]:
    """The LR schedules the trainer runs: transformers' ``SchedulerType`` names (what ``transformers.get_scheduler``
    takes), less ``SCHEDULERS_NEEDING_MORE``."""
    from transformers.trainer_utils import SchedulerType

    return [kind.value for kind in SchedulerType if kind.value not in SCHEDULERS_NEEDING_MORE]


_STANDARD_SCHEDULERS = frozenset(
    ("constant_with_warmup", "constant", "linear", "cosine", "cosine_with_restarts", "polynomial", "inverse_sqrt")
)
"""Names transformers has had for years: accepted without importing it (seconds, on every ``--check``)."""


def _check_scheduler(role: str, name: str) -> List[str]:
    if name in _STANDARD_SCHEDULERS:
        return []
    key = f"trainer.{role}.optimizer_config.scheduler={name!r}"
    valid = schedulers()
    if name in valid:
        return []
    if name in SCHEDULERS_NEEDING_MORE:
        return [f"{key}: transformers' {name} schedule {SCHEDULERS_NEEDING_MORE[name]}, which the config has no key "
                f"for; use one of {', '.join(valid)}"]
    return [f"{key}: not a transformers scheduler; expected one of {', '.join(valid)}"]


def validate_config(cfg: Any, has_cuda: Optional[bool] = None) -> None:
    """Raise ``ConfigError`` listing every problem found (not just the first).

    ``has_cuda`` defaults to whether this machine has CUDA GPUs: GPU-only settings are refused without them.
    """
    from skygym_train.config.compat import default_only_problems

    has_cuda = cuda_available() if has_cuda is None else has_cuda
    problems: List[str] = []
    for check in (_check_model_and_data, _check_batch_sizes, _check_algorithm, _check_placement, _check_models,
                  _check_engines, _check_generation, _check_run):
        problems += check(cfg, has_cuda)
    problems += default_only_problems(cfg)
    problems += _check_agent_task(cfg, has_cuda)
    if problems:
        raise ConfigError(problems)


def config_warnings(cfg: Any, has_cuda: Optional[bool] = None) -> List[str]:
    """Settings that run, but not quite as their name says on this machine (printed by ``--check`` and at start)."""
    has_cuda = cuda_available() if has_cuda is None else has_cuda
    t, g = cfg.trainer, cfg.generator
    out: List[str] = []
    if t.strategy == "fsdp":
        out.append("trainer.strategy=fsdp: the bundled trainer runs FSDP2 (fully_shard) for both fsdp and fsdp2")
    if g.backend == "vllm" and engines_are_ray_actors(cfg):
        import importlib.util

        if importlib.util.find_spec("vllm") is None:  # an engine in this process is refused instead (trainer.py)
            out.append("generator.backend=vllm: vLLM is not installed on this node; the engine actors need it on "
                       "the nodes they run on (a single machine: pip install 'skyrl-gym[vllm]', or "
                       "generator.backend=hf)")
    # (an engine in the trainer's process, the default, is not placed at all: colocate_all, on by default as in
    # SkyRL, changes nothing for it on a CPU, and saying so at every start was noise)
    if t.use_ray and t.placement.colocate_all and not has_cuda and g.backend in ("hf", "vllm") \
            and g.run_engines_locally is True:
        out.append("trainer.placement.colocate_all=true: the engine actors share the policy's CPU bundles (taking "
                   "turns with training); without GPUs there is no accelerator memory for them to release")
    if g.task:
        from skygym_train.agent_generator import agent_task_warnings

        out += agent_task_warnings(cfg)
    return out


def _data_parallel(workers: int, sequence_parallel_size: Any) -> int:
    """How many data-parallel groups ``workers`` ranks form (sizes they cannot hold are refused elsewhere)."""
    size = sequence_parallel_size if isinstance(sequence_parallel_size, int) and sequence_parallel_size > 0 else 1
    return workers // size if workers % size == 0 else workers


def _positive(key: str, value: Any, problems: List[str]) -> bool:
    if not isinstance(value, int) or value < 1:
        problems.append(f"{key}={value}: must be a positive integer")
        return False
    return True


def _check_model_and_data(cfg: Any, has_cuda: bool) -> List[str]:
    problems: List[str] = []
    if not cfg.trainer.policy.model.path:
        problems.append("trainer.policy.model.path: not set (a local folder, hub id or 'smollm2-135m')")
    if not cfg.data.train_data:
        problems.append("data.train_data: no training files given")
    for key, files in (("data.train_data", cfg.data.train_data), ("data.val_data", cfg.data.val_data)):
        for f in files:
            if "://" not in f and not Path(f).expanduser().exists():
                problems.append(f"{key}: file {f} does not exist")
    if not cfg.environment.env_class:
        problems.append("environment.env_class: not set (the env of rows that do not name their own env_class)")
    workers = cfg.environment.skyrl_gym.get("max_env_workers", 32)
    if not isinstance(workers, int) or workers < 0:
        problems.append(f"environment.skyrl_gym.max_env_workers={workers}: must be an integer >= 0")
    problems += env_section_problems(cfg)
    ray_workers = cfg.environment.ray_env_workers
    if ray_workers.num_workers < 0:
        problems.append(f"environment.ray_env_workers.num_workers={ray_workers.num_workers}: must be >= 0 "
                        "(0: envs run in this process)")
    if ray_workers.num_cpus_per_worker < 0:
        problems.append(f"environment.ray_env_workers.num_cpus_per_worker={ray_workers.num_cpus_per_worker}: "
                        "must be >= 0")
    if ray_workers.scheduling_strategy not in ("SPREAD", "DEFAULT"):
        problems.append(f"environment.ray_env_workers.scheduling_strategy={ray_workers.scheduling_strategy}: "
                        "must be SPREAD or DEFAULT")
    if ray_workers.max_concurrency < 1:
        problems.append(f"environment.ray_env_workers.max_concurrency={ray_workers.max_concurrency}: must be >= 1")
    return problems


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (a micro-batch size that splits ``n`` rows)."""
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _not_a_multiple(batch: int, mini_key: str, mini: int) -> str:
    """The problem of a mini-batch that does not split the batch, with a value that does."""
    return (f"trainer.train_batch_size={batch} is not a multiple of trainer.{mini_key}={mini}: set it to a divisor "
            f"of {batch}, e.g. trainer.{mini_key}={largest_divisor_at_most(batch, mini)}")


def _check_batch_sizes(cfg: Any, has_cuda: bool) -> List[str]:
    problems: List[str] = []
    t, g = cfg.trainer, cfg.generator
    # each check between sizes runs when its own sizes are valid: one bad size hid every other problem of them
    valid = {key for key, value in (
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
    ) if _positive(key, value, problems)}

    def usable(*keys: str) -> bool:
        return all(f"trainer.{key}" in valid or f"generator.{key}" in valid for key in keys)

    if t.max_tokens_per_microbatch != -1 and t.max_tokens_per_microbatch <= 0:
        problems.append(
            f"trainer.max_tokens_per_microbatch={t.max_tokens_per_microbatch}: must be -1 (micro-batches by "
            "row count) or a positive token budget"
        )
    if usable("train_batch_size", "policy_mini_batch_size") and t.train_batch_size % t.policy_mini_batch_size:
        problems.append(_not_a_multiple(t.train_batch_size, "policy_mini_batch_size", t.policy_mini_batch_size))
    if usable("policy_mini_batch_size", "n_samples_per_prompt", "micro_train_batch_size_per_gpu", "num_cpu_workers"):
        # ranks of one sequence-parallel group share their rows: the rows split over the groups
        world = _data_parallel(policy_world_size(cfg, has_cuda), t.policy.sequence_parallel_size)
        per_step = t.policy_mini_batch_size * g.n_samples_per_prompt
        if per_step % world:
            problems.append(
                f"trainer.policy_mini_batch_size * generator.n_samples_per_prompt = {per_step} sequences per "
                f"optimizer step cannot be split evenly over {world} policy workers"
            )
        elif (per_step // world) % t.micro_train_batch_size_per_gpu:
            rows, micro = per_step // world, t.micro_train_batch_size_per_gpu
            problems.append(
                f"trainer.micro_train_batch_size_per_gpu={micro} does not divide the {rows} sequences each policy "
                f"worker gets per optimizer step (trainer.policy_mini_batch_size * generator.n_samples_per_prompt "
                f"/ {world} worker{'s' if world > 1 else ''}): set it to a divisor of {rows}, e.g. "
                f"trainer.micro_train_batch_size_per_gpu={largest_divisor_at_most(rows, micro)}"
            )
    if uses_critic(cfg) and usable("train_batch_size", "n_samples_per_prompt", "micro_train_batch_size_per_gpu",
                                   "num_cpu_workers") \
            and _positive("trainer.critic_mini_batch_size", t.critic_mini_batch_size, problems):
        if t.train_batch_size % t.critic_mini_batch_size:
            problems.append(_not_a_multiple(t.train_batch_size, "critic_mini_batch_size", t.critic_mini_batch_size))
        critic_seqs = t.critic_mini_batch_size * g.n_samples_per_prompt
        cworld = _data_parallel(critic_world_size(cfg, has_cuda), t.critic.sequence_parallel_size)
        if critic_seqs % (cworld * t.micro_train_batch_size_per_gpu):
            problems.append(
                f"trainer.critic_mini_batch_size * generator.n_samples_per_prompt = {critic_seqs} is not "
                f"divisible by {cworld} critic workers x trainer.micro_train_batch_size_per_gpu"
            )
    return problems


def _check_algorithm(cfg: Any, has_cuda: bool) -> List[str]:
    from skygym_train.algorithms.advantages import ADVANTAGE_ESTIMATORS
    from skygym_train.algorithms.kl import KL_ESTIMATORS
    from skygym_train.algorithms.policy_losses import LOSS_REDUCTIONS, POLICY_LOSSES

    problems: List[str] = []
    algo, g = cfg.trainer.algorithm, cfg.generator
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
        not_bundled = " (a SkyRL-train loss that is not bundled)" if algo.policy_loss_type in ("sapo", "clip_cov", "kl_cov") else ""
        problems.append(
            f"trainer.algorithm.policy_loss_type={algo.policy_loss_type!r}: not registered{not_bundled} "
            f"(known: {', '.join(POLICY_LOSSES.names())})"
        )
    if algo.loss_reduction not in LOSS_REDUCTIONS:
        problems.append(
            f"trainer.algorithm.loss_reduction={algo.loss_reduction!r}: expected one of {', '.join(LOSS_REDUCTIONS)}"
        )
    if algo.kl_estimator_type not in KL_ESTIMATORS + ("low_var_kl",):
        problems.append(
            f"trainer.algorithm.kl_estimator_type={algo.kl_estimator_type!r}: expected one of {', '.join(KL_ESTIMATORS)}"
        )
    for flag, implied in (("use_kl_estimator_k3", "k3"), ("use_abs_kl", "abs")):
        if getattr(algo, flag) and algo.kl_estimator_type != implied:
            problems.append(
                f"trainer.algorithm.{flag}=true contradicts kl_estimator_type={algo.kl_estimator_type!r}: "
                f"set kl_estimator_type={implied} (the deprecated flag means that)"
            )
    if algo.use_kl_estimator_k3 and algo.use_abs_kl:
        problems.append("trainer.algorithm.use_kl_estimator_k3 and use_abs_kl are both true: choose kl_estimator_type")
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
    if algo.use_tis:
        if algo.tis_imp_ratio_cap <= 0:
            problems.append(f"trainer.algorithm.tis_imp_ratio_cap={algo.tis_imp_ratio_cap}: use_tis=true needs a "
                            "positive cap (e.g. 2.0)")
        if not g.sampling_params.logprobs:
            problems.append("trainer.algorithm.use_tis=true: needs the engine's log-probs; set "
                            "generator.sampling_params.logprobs=1")
        if g.backend in ("remote", "sglang"):
            problems.append(f"trainer.algorithm.use_tis=true: not offered with generator.backend={g.backend} (its "
                            "log-probs are not checked against the trainer's); use hf or vllm")
    if algo.loss_reduction == "seq_mean_token_sum_norm" and algo.max_seq_len is not None and algo.max_seq_len < 1:
        problems.append("trainer.algorithm.max_seq_len: must be positive")
    return problems


def _check_placement(cfg: Any, has_cuda: bool) -> List[str]:
    """GPU counts: honoured with CUDA GPUs; without them only 1 is meaningful (CPU workers: num_cpu_workers)."""
    problems: List[str] = []
    t = cfg.trainer
    p = t.placement
    roles = ["policy"] + (["ref"] if uses_ref(cfg) else []) + (["critic"] if uses_critic(cfg) else [])
    for role in ("policy", "ref", "critic"):
        for what in ("num_nodes", "num_gpus_per_node"):
            value = getattr(p, f"{role}_{what}")
            if not isinstance(value, int) or value < 1:
                problems.append(f"trainer.placement.{role}_{what}={value}: must be a positive integer")
            elif not has_cuda and value != 1 and role in roles:
                problems.append(
                    f"trainer.placement.{role}_{what}={value}: this machine has no CUDA GPUs; CPU runs start "
                    f"trainer.num_cpu_workers workers (set it instead and leave {role}_{what}=1)"
                )
    if has_cuda and not t.use_ray and p.policy_num_nodes * p.policy_num_gpus_per_node != 1:
        problems.append(
            f"trainer.placement.policy_num_gpus_per_node={p.policy_num_gpus_per_node} (x{p.policy_num_nodes} nodes): "
            "trainer.use_ray=false trains one worker on one device; set trainer.use_ray=true to use more"
        )
    if has_cuda and t.use_ray:
        policy = (p.policy_num_nodes, p.policy_num_gpus_per_node)
        # the trainer places every role on the policy's devices when colocate_all or colocate_policy_ref is set
        shared = p.colocate_all or p.colocate_policy_ref
        for role in roles[1:]:
            mine = (getattr(p, f"{role}_num_nodes"), getattr(p, f"{role}_num_gpus_per_node"))
            if shared and mine != policy:
                problems.append(
                    f"trainer.placement.{role}_num_nodes/{role}_num_gpus_per_node={mine[0]}x{mine[1]}: with "
                    f"colocate_all or colocate_policy_ref the {role} shares the policy's {policy[0]}x{policy[1]} "
                    "devices, so they must match it (or set both colocation flags false)"
                )
    if t.strategy not in STRATEGIES:
        problems.append(f"trainer.strategy={t.strategy!r}: this trainer supports {', '.join(STRATEGIES)} (fsdp and "
                        "fsdp2 both run FSDP2)")
    if t.async_training.enabled:
        if p.colocate_all:
            problems.append(
                "trainer.async_training.enabled=true with trainer.placement.colocate_all=true: one-step-off "
                "training overlaps generation with training, so engines need their own resources: set "
                "trainer.placement.colocate_all=false"
            )
        if t.async_training.max_staleness_steps < 1:
            problems.append("trainer.async_training.max_staleness_steps: must be >= 1 when async training is on")
    return problems


def _check_models(cfg: Any, has_cuda: bool) -> List[str]:
    """The training models: optimizers, FSDP options, attention, precision, LoRA."""
    from skygym_adapters.models import code_loading_refusal

    problems: List[str] = []
    t = cfg.trainer
    for role in ("policy", "ref", "critic"):
        section = getattr(t, role)
        refusal = code_loading_refusal(section.model_config_kwargs, f"trainer.{role}.model_config_kwargs")
        if refusal:
            problems.append(refusal)
        if section.fsdp_config.cpu_offload and not has_cuda:
            problems.append(
                f"trainer.{role}.fsdp_config.cpu_offload=true: needs CUDA GPUs (without them the weights already "
                "live in host memory); leave it false"
            )
        if section.fsdp_config.shard_one_gpu and not has_cuda:
            problems.append(f"trainer.{role}.fsdp_config.shard_one_gpu=true: a GPU setting (FSDP2's bf16 mixed "
                            "precision on one GPU); CPU training has no mixed-precision policy, leave it false")
        opt = getattr(section, "optimizer_config", None)
        if opt is not None:
            problems += _check_scheduler(role, opt.scheduler)
            if role == "policy" or (role == "critic" and uses_critic(cfg)):  # the roles that train
                problems += _check_optimizer(role, opt)
    problems += _check_precision(cfg, has_cuda)
    problems += _check_deepspeed(cfg, has_cuda)
    problems += _check_sequence_parallel(cfg, has_cuda)
    if t.flash_attn and not (has_cuda and flash_attn_installed()):
        problems.append("trainer.flash_attn=true: needs CUDA GPUs with flash-attn installed; set it to false (SDPA) "
                        "or leave it null (flash attention where available)")
    if t.export_dtype not in EXPORT_DTYPES:
        problems.append(f"trainer.export_dtype={t.export_dtype!r}: expected one of {', '.join(EXPORT_DTYPES)}")
    if t.policy.model.lora.rank < 0:
        problems.append("trainer.policy.model.lora.rank: must be >= 0")
    return problems


PRECISIONS = ("bf16", "bfloat16", "fp16", "fp32")


def _check_precision(cfg: Any, has_cuda: bool) -> List[str]:
    """Each role's ``fsdp_config.mixed_precision`` (read on GPUs): dtypes by name; no fp16 under FSDP2, whose worker
    scales no loss (fp16 gradients underflow to 0, or overflow and every such step is skipped as non-finite:
    training stalls with no error); no flash attention over fp32 compute (it has no fp32 kernel)."""
    problems: List[str] = []
    t = cfg.trainer
    for role in ("policy", "ref", "critic"):
        key = f"trainer.{role}.fsdp_config.mixed_precision"
        precision = getattr(t, role).fsdp_config.mixed_precision
        for name in ("param_dtype", "reduce_dtype"):
            value = getattr(precision, name)
            if value not in PRECISIONS:
                problems.append(f"{key}.{name}={value!r}: expected one of {', '.join(PRECISIONS)}")
        trains = role == "policy" or (role == "critic" and uses_critic(cfg))
        runs = trains or (role == "ref" and uses_ref(cfg))
        if (has_cuda and trains and t.strategy != "deepspeed" and t.bf16 is not False
                and precision.param_dtype == "fp16"):
            problems.append(f"{key}.param_dtype=fp16: the FSDP2 worker does no loss scaling, so fp16 gradients "
                            "underflow to 0 or overflow (those steps are skipped); use bf16 (GPUs from Ampere on), "
                            "fp32, or trainer.strategy=deepspeed, whose fp16 section scales the loss")
        if has_cuda and t.flash_attn and runs and (t.bf16 is False or precision.param_dtype == "fp32"):
            why = "trainer.bf16=false" if t.bf16 is False else f"{key}.param_dtype=fp32"
            problems.append(f"trainer.flash_attn=true: flash attention computes in bf16 or fp16 only, and {why} "
                            "computes in fp32; set trainer.flash_attn=false (SDPA) or null (SDPA for fp32)")
    return problems


def _check_optimizer(role: str, opt: Any) -> List[str]:
    """Values that train silently wrong: a learning rate of 0 (nothing trains: the run spends its time and leaves
    the policy as it was) or below (it ascends the loss), a clipping norm of 0 or below (torch then scales every
    gradient to 0, or flips its sign), negative weight decay or warm-up."""
    key = f"trainer.{role}.optimizer_config"
    problems = []
    if not (isinstance(opt.lr, (int, float)) and math.isfinite(opt.lr) and opt.lr > 0):
        problems.append(f"{key}.lr={opt.lr}: must be a positive number (0 trains nothing; below 0 ascends the "
                        "loss)")
    if not (math.isfinite(opt.max_grad_norm) and opt.max_grad_norm > 0):
        problems.append(f"{key}.max_grad_norm={opt.max_grad_norm}: must be a positive number (gradients are "
                        "clipped to this norm; a norm of 0 or below would scale them to 0 or flip them)")
    if not (math.isfinite(opt.weight_decay) and opt.weight_decay >= 0):
        problems.append(f"{key}.weight_decay={opt.weight_decay}: must be >= 0")
    if opt.num_warmup_steps < 0:
        problems.append(f"{key}.num_warmup_steps={opt.num_warmup_steps}: must be >= 0")
    return problems


def _check_deepspeed(cfg: Any, has_cuda: bool) -> List[str]:
    """``trainer.strategy=deepspeed`` and each role's ``deepspeed_config``; FSDP-only settings under DeepSpeed."""
    import importlib.util

    from skygym_train.config.deepspeed import OWNED_KEYS, ZERO_STAGES, offload_devices, zero_stage

    problems: List[str] = []
    t = cfg.trainer
    deepspeed = t.strategy == "deepspeed"
    if deepspeed and importlib.util.find_spec("deepspeed") is None:
        problems.append("trainer.strategy=deepspeed: the deepspeed package is not installed; pip install "
                        "'skyrl-gym[deepspeed]' (or use fsdp2)")
    for role in ("policy", "ref", "critic"):
        section = getattr(t, role)
        raw = section.deepspeed_config
        key = f"trainer.{role}.deepspeed_config"
        if raw is None:
            continue
        if not deepspeed:
            problems.append(f"{key}: only read with trainer.strategy=deepspeed (this run uses {t.strategy}); remove "
                            "it or set trainer.strategy=deepspeed")
            continue
        config = OmegaConf.to_container(raw, resolve=True) if OmegaConf.is_config(raw) else raw
        if not isinstance(config, dict):
            problems.append(f"{key}: expected a mapping of DeepSpeed settings, got {type(config).__name__}")
            continue
        for owned, instead in OWNED_KEYS.items():
            if owned in config:
                problems.append(f"{key}.{owned}: set by the trainer; {instead.replace('<role>', role)}")
        try:
            stage = zero_stage(config)
        except (TypeError, ValueError):
            stage = -1
        if stage not in ZERO_STAGES:
            problems.append(f"{key}.zero_optimization.stage: expected one of {', '.join(map(str, ZERO_STAGES))}")
        for offload, device in offload_devices(config).items():
            if not has_cuda:
                problems.append(f"{key}.zero_optimization.{offload}.device={device}: needs CUDA GPUs (without them "
                                "the weights already live in host memory); set it to none")
            elif device != "cpu":
                problems.append(f"{key}.zero_optimization.{offload}.device={device}: only cpu offload is bundled")
    if deepspeed:
        for role in ("policy", "ref", "critic"):
            fsdp = getattr(t, role).fsdp_config
            if fsdp.shard_one_gpu:
                problems.append(f"trainer.{role}.fsdp_config.shard_one_gpu=true: an FSDP setting; with "
                                "trainer.strategy=deepspeed the ZeRO engine holds the parameters, leave it false")
            if fsdp.cpu_offload:
                problems.append(f"trainer.{role}.fsdp_config.cpu_offload=true: an FSDP setting; with "
                                f"trainer.strategy=deepspeed set trainer.{role}.deepspeed_config.zero_optimization."
                                "offload_param/offload_optimizer instead")
            if fsdp.reshard_after_forward is not True:
                problems.append(f"trainer.{role}.fsdp_config.reshard_after_forward: an FSDP setting; ZeRO-3 always "
                                "re-partitions after the forward pass, so leave it true with trainer.strategy=deepspeed")
    return problems


def _check_sequence_parallel(cfg: Any, has_cuda: bool) -> List[str]:
    """``trainer.<role>.sequence_parallel_size`` (Ulysses): groups of ranks that the role's worker count holds."""
    problems: List[str] = []
    t, p = cfg.trainer, cfg.trainer.placement
    for role in ("policy", "ref", "critic"):
        size = getattr(t, role).sequence_parallel_size
        key = f"trainer.{role}.sequence_parallel_size"
        if not _positive(key, size, problems) or size == 1:
            continue
        if not t.use_ray:
            problems.append(f"{key}={size}: trainer.use_ray=false trains one worker; sequence parallelism needs "
                            "trainer.use_ray=true and several workers")
            continue
        if p.colocate_all or p.colocate_policy_ref or role == "policy":
            workers = policy_world_size(cfg, has_cuda)
        elif has_cuda:
            workers = getattr(p, f"{role}_num_nodes") * getattr(p, f"{role}_num_gpus_per_node")
        else:
            workers = t.num_cpu_workers
        if workers % size:
            problems.append(f"{key}={size}: must divide the {role}'s {workers} workers (groups of {size} ranks share "
                            "their rows)")
        if t.strategy == "deepspeed":
            problems.append(f"{key}={size}: sequence parallelism runs with FSDP2 here, not trainer.strategy=deepspeed")
        if t.flash_attn:
            problems.append(f"{key}={size}: Ulysses attention runs SDPA on the exchanged heads; set "
                            "trainer.flash_attn to null or false")
    return problems


def _check_engines(cfg: Any, has_cuda: bool) -> List[str]:
    """Inference engines: which settings each backend can honour, and weight sync on this machine."""
    problems: List[str] = []
    t, g = cfg.trainer, cfg.generator
    if g.backend not in BACKENDS:
        problems.append(f"generator.backend={g.backend!r}: expected one of {', '.join(BACKENDS)}")
        return problems
    remote = g.backend in ("remote", "sglang")
    if g.run_engines_locally is not None and g.run_engines_locally == remote:
        fix = ("set generator.backend=remote (or sglang) with generator.remote_inference_engine_urls"
               if remote is False else "leave it null or false: remote/sglang engines run elsewhere")
        problems.append(f"generator.run_engines_locally={str(g.run_engines_locally).lower()} contradicts "
                        f"generator.backend={g.backend}: {fix}")
    if g.weight_sync_backend not in WEIGHT_SYNC_BACKENDS:
        problems.append(
            f"generator.weight_sync_backend={g.weight_sync_backend!r}: expected one of {', '.join(WEIGHT_SYNC_BACKENDS)}"
        )
    if remote:
        if not g.remote_inference_engine_urls:
            problems.append(f"generator.remote_inference_engine_urls: generator.backend={g.backend} needs server URLs")
        if t.placement.colocate_all:
            problems.append("trainer.placement.colocate_all=true: remote engines run elsewhere and cannot be colocated")
        if g.weight_sync_backend in ("inprocess", "shm", "gloo", "nccl"):
            problems.append(
                f"generator.weight_sync_backend={g.weight_sync_backend}: {g.backend} servers run elsewhere and "
                "reload from a folder (use checkpoint or auto)"
            )
    elif g.remote_inference_engine_urls:
        problems.append(f"generator.remote_inference_engine_urls: only used by backend=remote/sglang, not "
                        f"{g.backend}; remove it or change the backend")
    if g.weight_sync_backend == "nccl" and not has_cuda:
        problems.append("generator.weight_sync_backend=nccl: needs CUDA GPUs; use gloo or auto on CPU")
    if g.weight_sync_backend == "shm" and not (g.backend == "hf" and t.use_ray):
        problems.append("generator.weight_sync_backend=shm: shares an hf engine's weights with a Ray policy worker "
                        "on the same node; without Ray use inprocess (which shares them too), or auto")
    if g.model_name not in (None, "", t.policy.model.path):
        problems.append(f"generator.model_name={g.model_name}: the engines serve the policy being trained "
                        f"({t.policy.model.path}); leave it null")
    problems += _check_engine_actors(cfg, has_cuda)
    problems += _check_engines_beside_training(cfg, has_cuda)
    if g.backend in ("hf", "vllm") and g.num_inference_engines != 1 and not engines_are_ray_actors(cfg):
        problems.append(
            f"generator.num_inference_engines={g.num_inference_engines}: {g.backend} engines run in the trainer's "
            "process on one device, so more would only load copies of the model there; use 1, or start them as Ray "
            "actors (generator.run_engines_locally=true with trainer.use_ray=true)"
            + (" (inference_engine_tensor_parallel_size spans GPUs)" if g.backend == "vllm" else "")
        )
    if remote and g.num_inference_engines not in (1, len(g.remote_inference_engine_urls)):
        problems.append(
            f"generator.num_inference_engines={g.num_inference_engines}: with backend={g.backend} the engines are the "
            f"{len(g.remote_inference_engine_urls)} servers in generator.remote_inference_engine_urls"
        )
    if g.backend != "vllm":
        # engine start-up settings: the HF engine has no use for them, remote servers take theirs where they start
        why = ("the HF engine runs on one device" if g.backend == "hf"
               else f"{g.backend} servers are configured where they start")
        if g.inference_engine_tensor_parallel_size != 1:
            problems.append(
                f"generator.inference_engine_tensor_parallel_size={g.inference_engine_tensor_parallel_size}: {why}; "
                "use 1, or generator.backend=vllm"
            )
        if not g.enforce_eager:
            problems.append(f"generator.enforce_eager=false: a vLLM setting ({why}); leave it true or use "
                            "generator.backend=vllm")
        if g.gpu_memory_utilization != 0.8:
            problems.append(f"generator.gpu_memory_utilization={g.gpu_memory_utilization}: vLLM only ({why}); leave "
                            "0.8 or use generator.backend=vllm")
        if remote and g.model_dtype != "auto":
            problems.append(f"generator.model_dtype={g.model_dtype}: {why}; leave it auto")
    if g.backend != "vllm":
        for key in ("vllm_v1_disable_multiproc", "enable_prefix_caching", "enable_chunked_prefill",
                    "max_num_batched_tokens", "max_num_seqs"):
            if getattr(g, key) is not None:
                value = str(getattr(g, key)).lower() if isinstance(getattr(g, key), bool) else getattr(g, key)
                problems.append(f"generator.{key}={value}: a vLLM engine setting, but generator.backend="
                                f"{g.backend}; remove it or use backend=vllm")
        if g.engine_init_kwargs:
            problems.append(f"generator.engine_init_kwargs: passed to vLLM only, but generator.backend={g.backend}")
    from skygym_adapters.models import code_loading_refusal

    refusal = code_loading_refusal(g.engine_init_kwargs, "generator.engine_init_kwargs")
    if refusal:
        problems.append(refusal)
    if g.vllm_v1_disable_multiproc is False:
        problems.append("generator.vllm_v1_disable_multiproc=false: the bundled vLLM engine runs in this process "
                        "(weights are synced in memory); leave it null or true")
    return problems


VLLM_SHARE_BESIDE_TRAINING = 0.5
"""The most of a GPU's memory an in-process vLLM engine may claim while the policy trains on the same GPU."""


def _check_engines_beside_training(cfg: Any, has_cuda: bool) -> List[str]:
    """Engines that share a GPU with the policy: what cannot work there (checked only with CUDA GPUs)."""
    problems: List[str] = []
    t, g = cfg.trainer, cfg.generator
    if not has_cuda or g.backend not in ("hf", "vllm") or engines_are_ray_actors(cfg):
        return problems
    # the engines run in the trainer's process: on the policy's GPU without Ray, on the driver's GPU 0 with it
    if t.use_ray and t.placement.colocate_all and g.weight_sync_backend == "nccl":
        problems.append(
            "generator.weight_sync_backend=nccl: the engine runs in the trainer's process on GPU 0, which "
            "policy rank 0 shares with trainer.placement.colocate_all=true, and NCCL refuses two ranks on "
            "one GPU; use auto (gloo there) or gloo, or set colocate_all=false"
        )
    if g.backend == "vllm" and not t.use_ray and g.gpu_memory_utilization > VLLM_SHARE_BESIDE_TRAINING:
        problems.append(
            f"generator.gpu_memory_utilization={g.gpu_memory_utilization}: with trainer.use_ray=false the "
            "vLLM engine runs in the trainer's process on the policy's GPU, where the policy's weights and "
            "optimizer state (about 16 bytes a parameter) stay; vLLM claims this share of the whole GPU when "
            f"it starts and fails if it is not free. Set it to at most {VLLM_SHARE_BESIDE_TRAINING} (what "
            "the policy leaves), or trainer.use_ray=true with engines on GPUs of their own"
        )
    if g.backend == "vllm" and t.placement.colocate_all and not t.async_training.enabled:
        if g.engine_init_kwargs.get("enable_sleep_mode") is False:
            problems.append(
                "generator.engine_init_kwargs.enable_sleep_mode=false: with "
                "trainer.placement.colocate_all=true the trainer puts the vLLM engine to sleep while the "
                "policy trains, which needs sleep mode; remove the key (the trainer turns it on) or set "
                "colocate_all=false"
            )
    return problems


ENGINE_PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def engines_are_ray_actors(cfg: Any) -> bool:
    """True when the trainer starts its hf/vllm engines as Ray actors (``skygym_train.engine_actors``):
    ``generator.run_engines_locally=true`` (set explicitly, as SkyRL-train's configs do) with ``trainer.use_ray=true``."""
    g = cfg.generator
    return g.run_engines_locally is True and bool(cfg.trainer.use_ray) and g.backend in ("hf", "vllm")


def node_modules(cfg: Any) -> List[str]:
    """The modules the trainer's Ray workers and engine actors import, which every node they may be placed on needs
    (``ray_utils.check_nodes``)."""
    t = cfg.trainer
    modules = ["skyrl_gym", "torch", "transformers"]
    if t.strategy == "deepspeed":
        modules.append("deepspeed")
    if any(getattr(t, role).model.lora.rank > 0 for role in ("policy", "ref", "critic")):
        modules.append("peft")
    if t.flash_attn:
        modules.append("flash_attn")
    if engines_are_ray_actors(cfg) and cfg.generator.backend == "vllm":
        modules.append("vllm")
    return modules


def _check_engine_actors(cfg: Any, has_cuda: bool) -> List[str]:
    """Engines as Ray actors (``generator.run_engines_locally=true`` with Ray): what they cannot do."""
    problems: List[str] = []
    t, g = cfg.trainer, cfg.generator
    if g.engine_placement_strategy not in ENGINE_PLACEMENT_STRATEGIES:
        problems.append(f"generator.engine_placement_strategy={g.engine_placement_strategy!r}: expected one of "
                        f"{', '.join(ENGINE_PLACEMENT_STRATEGIES)}")
    if not engines_are_ray_actors(cfg):
        return problems  # without Ray, run_engines_locally=true engines run in the trainer's process, as with null
    if g.weight_sync_backend in ("inprocess", "shm"):
        problems.append(
            f"generator.weight_sync_backend={g.weight_sync_backend}: with generator.run_engines_locally=true and "
            "trainer.use_ray=true the engines are Ray actors, possibly on other nodes, so they cannot read the "
            "policy's memory; use auto (a gloo/nccl broadcast from policy rank 0) or checkpoint (a folder every node "
            "can read)"
        )
    if t.placement.colocate_all:
        if g.weight_sync_backend == "nccl":
            problems.append("generator.weight_sync_backend=nccl: colocated engine actors (trainer.placement."
                            "colocate_all=true) share policy rank 0's GPU, and NCCL refuses two ranks on one GPU; "
                            "use auto or gloo, or set colocate_all=false")
        if g.inference_engine_tensor_parallel_size != 1:
            problems.append(f"generator.inference_engine_tensor_parallel_size={g.inference_engine_tensor_parallel_size}"
                            ": a colocated engine actor takes a share of one policy bundle (one GPU); set "
                            "trainer.placement.colocate_all=false for engines that span GPUs")
    return problems


def _check_generation(cfg: Any, has_cuda: bool) -> List[str]:
    problems: List[str] = []
    g = cfg.generator
    for name in ("sampling_params", "eval_sampling_params"):
        sp = getattr(g, name)
        if sp is None:
            continue
        if sp.temperature < 0:
            problems.append(f"generator.{name}.temperature={sp.temperature}: must be >= 0")
        if not 0 < sp.top_p <= 1:
            problems.append(f"generator.{name}.top_p={sp.top_p}: must be in (0, 1]")
        if sp.max_generate_length < 1:
            problems.append(f"generator.{name}.max_generate_length: must be >= 1")
        if sp.logprobs is not None and sp.logprobs not in (0, 1):
            problems.append(f"generator.{name}.logprobs={sp.logprobs}: only the sampled token's log-prob is "
                            "recorded; use 1 (or 0/null for none)")
    if g.batched and g.max_turns != 1:
        problems.append(f"generator.batched=true: batched generation is single-turn, but generator.max_turns="
                        f"{g.max_turns}; set batched=false or max_turns=1")
    ct = g.chat_template
    if ct.source not in ("name", "file"):
        problems.append(f"generator.chat_template.source={ct.source!r}: expected name or file")
    elif ct.source == "name" and ct.name_or_path:
        problems.append(f"generator.chat_template.name_or_path={ct.name_or_path}: no named chat templates are "
                        "bundled; use source=file with a Jinja file, or leave it null for the tokenizer's template")
    elif ct.source == "file":
        if not ct.name_or_path:
            problems.append("generator.chat_template.name_or_path: source=file needs a Jinja template file")
        elif not Path(ct.name_or_path).expanduser().is_file():
            problems.append(f"generator.chat_template.name_or_path: file {ct.name_or_path} does not exist")
    return problems


def _check_agent_task(cfg: Any, has_cuda: bool) -> List[str]:
    """``generator.task``: the agent YAML loads, names registered parts and agrees with the trainer's keys."""
    if not cfg.generator.task:
        return []
    from skygym_train.agent_generator import agent_task_problems

    return agent_task_problems(cfg)


def _check_run(cfg: Any, has_cuda: bool) -> List[str]:
    problems: List[str] = []
    t = cfg.trainer
    for key, value in (("trainer.eval_interval", t.eval_interval), ("trainer.ckpt_interval", t.ckpt_interval),
                       ("trainer.hf_save_interval", t.hf_save_interval)):
        if value == 0 or value < -1:
            problems.append(f"{key}={value}: use a positive number of steps, or -1 to disable")
    if t.max_training_steps is not None and t.max_training_steps < 1:  # 0 read as no limit: a whole run
        problems.append(f"trainer.max_training_steps={t.max_training_steps}: use a positive number of steps, "
                        "or null for no limit (trainer.epochs decides)")
    if t.max_failed_steps == 0 or t.max_failed_steps < -1:
        problems.append(f"trainer.max_failed_steps={t.max_failed_steps}: use a positive number of steps, or -1 "
                        "to never stop")
    if t.resume_mode not in RESUME_MODES:
        problems.append(f"trainer.resume_mode={t.resume_mode!r}: expected latest, from_path or none")
    if t.resume_mode == "from_path" and not t.resume_path:
        problems.append("trainer.resume_path: resume_mode=from_path needs a checkpoint folder")
    elif t.resume_mode == "from_path":
        from skygym_train.checkpoint import resume_path_problem

        problem = resume_path_problem(str(t.resume_path))
        if problem:
            problems.append(problem)
    for name in loggers_of(cfg):
        if name not in LOGGERS:
            problems.append(f"trainer.logger: unknown logger {name!r}; choose from {', '.join(LOGGERS)}")
    return problems


def flash_attn_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


def env_section_problems(cfg: Any) -> List[str]:
    """Each ``environment.skyrl_gym.<id>`` section that sets a value for an id no env is registered under (a
    misspelt ``serch`` would reach no env, silently), and each key of a section, or of ``environment.env_config``,
    that its env does not read (``serch_url``). The sections SkyRL-train ships stay allowed while they are left
    at their nulls (an env of this hub or not)."""
    from skyrl_gym.registration import unknown_config_keys, unregistered_ids

    sections = {name: section for name, section in cfg.environment.skyrl_gym.items()
                if isinstance(section, dict) and any(value is not None for value in section.values())}
    unregistered = unregistered_ids(sections)
    problems = [f"environment.skyrl_gym.{name}: a section for an env that is not registered: {why}"
                for name, why in unregistered.items()]
    for name, section in sections.items():
        if name not in unregistered:
            set_keys = {key: value for key, value in section.items() if value is not None}
            problems += [f"environment.skyrl_gym.{name}.{key}: {why}"
                         for key, why in unknown_config_keys(name, set_keys).items()]
    own = dict(cfg.environment.env_config)
    if own and not unregistered_ids([cfg.environment.env_class]):
        for key, why in unknown_config_keys(cfg.environment.env_class, own).items():
            problems.append(f"environment.env_config.{key}: {why}{_where_the_key_belongs(key, cfg)}")
    return problems


def _where_the_key_belongs(key: str, cfg: Any) -> str:
    """For a key of ``environment.env_config`` that ``environment.env_class`` does not read: the envs that do, and
    how to reach them (the section goes to ``env_class`` alone, whatever the rows' own env classes are)."""
    from skyrl_gym.registration import envs_reading

    readers = envs_reading(key)
    if not readers:
        return ""
    first = readers[0]
    shown = ", ".join(readers[:3]) + (f" and {len(readers) - 3} more" if len(readers) > 3 else "")
    return (f"; environment.env_config goes to environment.env_class ({cfg.environment.env_class!r}), and "
            f"{key!r} is read by {shown}: set environment.skyrl_gym.{first}.{key}, or environment.env_class={first}")
