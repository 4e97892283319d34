"""The trainer's configuration as dataclasses.

Key names follow SkyRL-train (``trainer.algorithm.advantage_estimator``, ``generator.n_samples_per_prompt``,
...) so that commands written for SkyRL carry over. Defaults live in ``ppo_base_config.yaml`` beside this
file; the dataclasses give OmegaConf the types to check and the set of keys that exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class DataConfig:
    train_data: List[str] = field(default_factory=list)
    """JSONL or Parquet files of dataset rows (``prompt``, ``env_class``, ``reward_spec``, ...)."""
    val_data: List[str] = field(default_factory=list)
    shuffle: bool = True


@dataclass
class LoraConfig:
    rank: int = 0
    """0 disables LoRA."""
    alpha: int = 16
    dropout: float = 0.0
    target_modules: str = "all-linear"
    exclude_modules: Optional[str] = None
    """Module names (a regex, as PEFT takes it) left without an adapter."""
    init_method: str = "kaiming"
    """How LoRA weights start: ``kaiming`` (PEFT's default), or a PEFT ``init_lora_weights`` name such as
    ``gaussian``, ``pissa``, ``olora``."""
    lora_sync_path: str = "/tmp/skyrl_lora_sync"
    """SkyRL-train writes LoRA adapters here for its engines; the bundled trainer syncs merged weights instead,
    so only this default is accepted."""


@dataclass
class ModelConfig:
    path: Optional[str] = None
    """A local folder, a hub id, or an embedded model name (``smollm2-135m``)."""
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class OptimizerConfig:
    lr: float = 1e-6
    adam_betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    num_warmup_steps: int = 0
    scheduler: str = "constant_with_warmup"
    offload_after_step: bool = False
    """false only: moving the optimizer state to host memory between steps is not bundled."""


@dataclass
class MixedPrecisionConfig:
    param_dtype: str = "bf16"
    """The dtype a GPU computes in: bf16, fp16 (under DeepSpeed only: the FSDP2 worker does no loss scaling) or
    fp32 (SDPA attention then: flash attention has no fp32 kernel)."""
    reduce_dtype: str = "fp32"
    """The dtype FSDP2 reduces gradients in across ranks: fp32, bf16 or fp16."""


@dataclass
class FSDPConfig:
    cpu_offload: bool = False
    reshard_after_forward: bool = True
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    """Used on GPU only; CPU training runs in float32."""
    fsdp_size: int = -1
    """-1: shard over all ranks (the only layout offered; hybrid sharding is refused)."""
    shard_one_gpu: bool = False
    """Ours. On one GPU, wrap the model with FSDP2 anyway, for its bf16 mixed precision: each layer computes with
    bf16 copies of its parameters, gathered for the pass, and the residual stream is bf16 (less activation memory
    than autocast over fp32 parameters, which keeps an fp32 residual and bf16 copies of all weights). The price: an
    HF engine in the trainer's process cannot read the policy's tensors (a bf16 engine never can: it keeps a copy
    either way). false: plain parameters and bf16 autocast. CUDA only."""


@dataclass
class PolicyConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer_config: OptimizerConfig = field(default_factory=OptimizerConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    sequence_parallel_size: int = 1
    """> 1: Ulysses sequence parallelism: groups of this many of the role's ranks split each sequence (SDPA over
    heads exchanged all-to-all); it must divide the role's worker count and the model's attention heads."""
    deepspeed_config: Optional[Any] = None
    """With ``trainer.strategy=deepspeed``: DeepSpeed's config for this role (``zero_optimization``, precision, ...);
    null: ZeRO-3. Batch sizes, the optimizer, its schedule and clipping come from the trainer's keys."""
    model_config_kwargs: Dict[str, Any] = field(default_factory=dict)
    """Passed to ``from_pretrained`` when the training model loads: config fields (e.g. ``vocab_size``) and loading
    options (e.g. ``attn_implementation``). ``trust_remote_code`` runs the model folder's Python: refused unless
    ``SKYRL_GYM_TRUST_REMOTE_CODE=1`` is set where the command runs."""
    use_torch_compile: bool = False
    """false only: torch.compile of the logits is not bundled."""
    record_memory: bool = False
    """false only: CUDA memory snapshots are not bundled."""


@dataclass
class RefConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    """``model.path`` defaults to the policy's."""
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    sequence_parallel_size: int = 1
    """> 1: Ulysses sequence parallelism: groups of this many of the role's ranks split each sequence (SDPA over
    heads exchanged all-to-all); it must divide the role's worker count and the model's attention heads."""
    deepspeed_config: Optional[Any] = None
    """With ``trainer.strategy=deepspeed``: DeepSpeed's config for this role (``zero_optimization``, precision, ...);
    null: ZeRO-3. Batch sizes, the optimizer, its schedule and clipping come from the trainer's keys."""
    model_config_kwargs: Dict[str, Any] = field(default_factory=dict)
    """Passed to ``from_pretrained`` when the training model loads: config fields (e.g. ``vocab_size``) and loading
    options (e.g. ``attn_implementation``). ``trust_remote_code`` runs the model folder's Python: refused unless
    ``SKYRL_GYM_TRUST_REMOTE_CODE=1`` is set where the command runs."""


@dataclass
class CriticConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    """``model.path`` defaults to the policy's (a value head is added on top)."""
    optimizer_config: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=5e-6))
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    sequence_parallel_size: int = 1
    """> 1: Ulysses sequence parallelism: groups of this many of the role's ranks split each sequence (SDPA over
    heads exchanged all-to-all); it must divide the role's worker count and the model's attention heads."""
    deepspeed_config: Optional[Any] = None
    """With ``trainer.strategy=deepspeed``: DeepSpeed's config for this role (``zero_optimization``, precision, ...);
    null: ZeRO-3. Batch sizes, the optimizer, its schedule and clipping come from the trainer's keys."""
    model_config_kwargs: Dict[str, Any] = field(default_factory=dict)
    """Passed to ``from_pretrained`` when the training model loads: config fields (e.g. ``vocab_size``) and loading
    options (e.g. ``attn_implementation``). ``trust_remote_code`` runs the model folder's Python: refused unless
    ``SKYRL_GYM_TRUST_REMOTE_CODE=1`` is set where the command runs."""


@dataclass
class PlacementConfig:
    colocate_all: bool = True
    """Training workers and inference engines share devices (engines sleep while the policy trains)."""
    colocate_policy_ref: bool = True
    policy_num_nodes: int = 1
    policy_num_gpus_per_node: int = 1
    critic_num_nodes: int = 1
    critic_num_gpus_per_node: int = 1
    ref_num_nodes: int = 1
    ref_num_gpus_per_node: int = 1


@dataclass
class KLCtrlConfig:
    type: str = "fixed"
    """``fixed`` or ``adaptive``."""
    kl_target: float = 0.1
    horizon: int = 10000


@dataclass
class DynamicSamplingConfig:
    type: Optional[str] = None
    """``None``, ``filter`` (drop groups whose rewards all agree and sample more) or ``replace``."""
    max_sample_batches: int = 30
    min_replace_ratio: float = 0.3


@dataclass
class CISPOConfig:
    cispo_eps_clip_low: float = 1.0
    """The importance weight is clamped to [1 - low, 1 + high]; 1.0 leaves no lower bound."""
    cispo_eps_clip_high: float = 4.0


@dataclass
class SAPOConfig:
    tau_pos: float = 1.0
    tau_neg: float = 1.05


@dataclass
class ClipCovConfig:
    clip_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0


@dataclass
class KLCovConfig:
    kl_cov_frac: float = 0.2
    ppo_kl_coef: float = 1.0


@dataclass
class AlgorithmConfig:
    advantage_estimator: str = "grpo"
    """``grpo``, ``rloo``, ``reinforce++``, ``gae`` or a name registered by the user."""
    kl_ctrl: KLCtrlConfig = field(default_factory=KLCtrlConfig)
    kl_estimator_type: str = "k3"
    """``k1``, ``k2``, ``k3`` or ``abs``."""
    use_kl_estimator_k3: bool = False
    """Deprecated SkyRL spelling: true sets ``kl_estimator_type=k3``."""
    use_abs_kl: bool = False
    """Deprecated SkyRL spelling: true sets ``kl_estimator_type=abs``."""
    use_kl_in_reward: bool = False
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    use_entropy_loss: bool = False
    entropy_loss_coef: float = 0.01
    advantage_batch_normalize: bool = False
    zero_variance_filter: bool = False
    """Leave out of the update every group whose rewards all agree (its advantages are all 0 under
    grpo/rloo): no effect on the gradient direction, less compute."""
    policy_loss_type: str = "regular"
    """``regular`` (PPO clip), ``dual_clip``, ``gspo``, ``cispo`` or a user-registered name."""
    loss_reduction: str = "token_mean"
    """``token_mean``, ``sequence_mean`` or ``seq_mean_token_sum_norm``."""
    grpo_norm_by_std: bool = True
    lambd: float = 1.0
    gamma: float = 1.0
    eps_clip_low: float = 0.2
    eps_clip_high: float = 0.2
    clip_ratio_c: float = 3.0
    value_clip: float = 0.2
    value_head_prefix: str = "value_head"
    """Name of the critic's value head; only ``value_head`` is accepted (the bundled critic's head)."""
    use_tis: bool = False
    """Truncated importance sampling: weight each token's policy loss by min(pi_old / pi_rollout,
    ``tis_imp_ratio_cap``), correcting for the engine's probabilities differing from the trainer's (needs
    ``generator.sampling_params.logprobs=1``)."""
    tis_imp_ratio_cap: float = -1.0
    """The cap of the TIS weight; must be > 0 when ``use_tis`` is true."""
    sapo: SAPOConfig = field(default_factory=SAPOConfig)
    """Read by the ``sapo`` policy loss only, which is not bundled: defaults only."""
    clip_cov: ClipCovConfig = field(default_factory=ClipCovConfig)
    """Read by the ``clip_cov`` policy loss only, which is not bundled: defaults only."""
    kl_cov: KLCovConfig = field(default_factory=KLCovConfig)
    """Read by the ``kl_cov`` policy loss only, which is not bundled: defaults only."""
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    cispo: CISPOConfig = field(default_factory=CISPOConfig)
    max_seq_len: Optional[int] = None
    """Constant that ``seq_mean_token_sum_norm`` divides by; defaults to prompt + response length limits."""


@dataclass
class AsyncTrainingConfig:
    enabled: bool = False
    """Generate the next batch while the current one trains (one-step-off)."""
    max_staleness_steps: int = 1
    """How many policy updates a batch may lag behind; 0 means synchronous."""


@dataclass
class FullyAsyncConfig:
    max_staleness_steps: int = 4
    """SkyRL-train's fully asynchronous trainer (a separate entry point) is not bundled: defaults only; see
    ``trainer.async_training`` for one-step-off training."""
    num_parallel_generation_workers: int = 768
    """Defaults only (see ``max_staleness_steps``)."""


@dataclass
class TrainerConfig:
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    strategy: str = "fsdp2"
    """``fsdp2`` (``fsdp`` is accepted as a synonym) or ``deepspeed`` (ZeRO 1-3, ``pip install -e '.[deepspeed]'``;
    on CUDA, or on CPU through DeepSpeed's CPU accelerator over gloo)."""
    use_ray: bool = True
    """False runs everything in this process (one worker): the fast path for small CPU runs."""
    num_cpu_workers: int = 1
    """Policy workers to start when there is no GPU (each a gloo rank)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)
    fully_async: FullyAsyncConfig = field(default_factory=FullyAsyncConfig)
    sequence_parallel_backend: str = "ulysses"
    """Only ``ulysses`` is bundled; it matters only with a ``sequence_parallel_size`` > 1."""
    gradient_checkpointing: bool = True
    gradient_checkpointing_use_reentrant: bool = False
    """Passed to transformers' activation (gradient) checkpointing as ``use_reentrant``."""
    bf16: Optional[bool] = None
    """null: bfloat16 mixed precision on GPU (``fsdp_config.mixed_precision``), float32 on CPU. true: also bfloat16
    autocast on CPU (as ``cpu_bf16_autocast``). false: float32 compute everywhere."""
    flash_attn: Optional[bool] = None
    """null: flash attention where CUDA and flash-attn are present, else PyTorch SDPA. true: require it (refused
    without CUDA GPUs and flash-attn). false: SDPA."""
    disable_fast_tokenizer: bool = False
    """true loads the slow (Python) tokenizer."""
    target_modules: Optional[str] = None
    """Deprecated in SkyRL-train: only null is accepted; use ``trainer.policy.model.lora.target_modules``."""
    exclude_modules: Optional[str] = None
    """Deprecated in SkyRL-train: only null is accepted; use ``trainer.policy.model.lora.exclude_modules``."""
    update_ref_every_epoch: bool = False
    """false only: refreshing the reference model from the policy is not bundled."""
    dump_data_batch: bool = False
    """false only: dumping training batches is not bundled."""
    dump_eval_results: bool = False
    """Write every evaluated sample (prompt, decoded response, reward, stop reason, error) to
    ``<export_path>/dumped_evals/global_step_<n>.jsonl`` at each evaluation."""
    rope_scaling: Optional[Dict[str, Any]] = None
    """null only: RoPE overrides are not wired into the bundled engines."""
    rope_theta: Optional[float] = None
    """null only (see ``rope_scaling``)."""
    max_failed_steps: int = 3
    """Stop, showing the first trajectory error, after this many consecutive steps in which every trajectory
    ended in an error (an unknown env, a broken sandbox, ...); -1 never stops. A key of this project."""
    use_sample_packing: bool = True
    """Pack each micro-batch: no padding, and rows that share a prompt compute it once (exact; see
    ``skygym_train.workers.packing``). With flash attention, which takes no 4D mask, sequences are packed end
    to end instead (no padding; prompts repeated)."""
    cpu_bf16_autocast: bool = False
    """On CPU, run forward/backward under bfloat16 autocast (fp32 master weights), as TRL does by
    default; much faster on CPUs with AVX512-BF16/AMX, slightly less precise. GPUs use fsdp_config.mixed_precision."""
    seed: int = 42
    resume_mode: Optional[str] = "latest"
    """``latest``, ``from_path`` (with ``resume_path``) or ``none``."""
    resume_path: Optional[str] = None
    ckpt_path: str = "~/ckpts/skyrl"
    max_ckpts_to_keep: int = -1
    ckpt_interval: int = 10
    hf_save_interval: int = -1
    export_path: str = "~/exports/skyrl"
    export_dtype: str = "float32"
    """dtype of the Hugging Face export: ``float32``, ``bfloat16`` (half the size) or ``float16``; training is not
    affected (a key of this project, not of SkyRL-train)."""
    epochs: int = 1
    max_training_steps: Optional[int] = None
    update_epochs_per_batch: int = 1
    train_batch_size: int = 1024
    """Prompts per training step."""
    policy_mini_batch_size: int = 256
    """Prompts per optimizer step."""
    critic_mini_batch_size: int = 256
    micro_train_batch_size_per_gpu: int = 1
    """Sequences per forward/backward pass on one worker."""
    micro_forward_batch_size_per_gpu: int = 1
    max_tokens_per_microbatch: int = -1
    """When > 0, micro-batches are consecutive rows up to this many tokens (as packing runs them: a prompt
    shared by rows counts once) instead of ``micro_*_batch_size_per_gpu`` rows; a longer row goes alone.
    -1 (the default) counts rows."""
    eval_batch_size: int = 1024
    eval_before_train: bool = True
    eval_interval: int = 5
    """Steps between evaluations; -1 disables periodic evaluation."""
    max_prompt_length: int = 512
    project_name: str = "skyrl"
    run_name: str = "test_run"
    logger: Any = "console"
    """``console``, ``tensorboard``, ``wandb``, ``jsonl``; several as a list (``[console,jsonl]``) or joined by
    commas (``console,jsonl``)."""
    log_path: str = "/tmp/skyrl-logs"
    progress_bar: bool = True
    plot_path: Optional[str] = None
    """Write a PNG of mean reward per step here at the end of training."""


@dataclass
class SamplingParamsConfig:
    max_generate_length: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    logprobs: Optional[int] = 1
    stop: Optional[List[str]] = None
    repetition_penalty: float = 1.0
    """1.0 only: the bundled engines sample without a repetition penalty."""


@dataclass
class ChatTemplateConfig:
    source: str = "name"
    """``file``: ``name_or_path`` is a Jinja file that replaces the tokenizer's template. ``name``: only a null
    ``name_or_path`` is accepted (no named templates are bundled), meaning the tokenizer's own template."""
    name_or_path: Optional[str] = None


@dataclass
class GeneratorConfig:
    backend: str = "hf"
    """``hf`` (transformers) or ``vllm`` engines in this process; ``remote`` (OpenAI-compatible vLLM server) or
    ``sglang`` servers at ``remote_inference_engine_urls``."""
    model_dtype: str = "auto"
    """The engine's dtype: ``auto`` is bfloat16 where the hardware computes it (GPUs; CPUs with AVX512-BF16 or AMX,
    where it decodes about twice as fast as float32), else float32; or ``float32``/``bfloat16``/``float16``. The policy
    trains in its own precision (``trainer.bf16``) and computes the log-probs the loss uses itself."""
    num_inference_engines: int = 1
    inference_engine_tensor_parallel_size: int = 1
    weight_sync_backend: str = "auto"
    """``auto``, ``inprocess``, ``gloo``, ``nccl`` or ``checkpoint``."""
    run_engines_locally: Optional[bool] = None
    """null: follows ``backend`` (hf/vllm run in the trainer's process, remote/sglang elsewhere). true (as in SkyRL's
    configs) with ``trainer.use_ray=true``: hf/vllm engines are Ray actors in placement groups, on the policy's
    bundles with ``trainer.placement.colocate_all``, else on bundles of their own; false: remote/sglang only."""
    engine_placement_strategy: str = "PACK"
    """Ray placement strategy of the engine actors' own bundles (``colocate_all=false``): ``PACK``, ``SPREAD``,
    ``STRICT_PACK`` or ``STRICT_SPREAD``."""
    remote_inference_engine_urls: List[str] = field(default_factory=list)
    gpu_memory_utilization: float = 0.8
    enforce_eager: bool = True
    """vLLM: skip CUDA-graph capture / compilation (quick start-up; what short RL jobs and CPUs want)."""
    n_samples_per_prompt: int = 5
    max_turns: int = 1
    max_input_length: Optional[int] = None
    sampling_params: SamplingParamsConfig = field(default_factory=SamplingParamsConfig)
    eval_sampling_params: Optional[SamplingParamsConfig] = None
    """Sampling for evaluation; null uses ``sampling_params``."""
    eval_n_samples_per_prompt: int = 1
    apply_overlong_filtering: bool = False
    zero_reward_on_non_stop: bool = False
    chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    chat_template: ChatTemplateConfig = field(default_factory=ChatTemplateConfig)
    use_conversation_multi_turn: bool = True
    """true: each env observation becomes a new chat message; false: observations are appended as raw tokens
    inside one assistant message."""
    append_eos_token_after_stop_str_in_multi_turn: bool = True
    """When a turn ends on a stop string, append the end-of-turn token (loss mask 0)."""
    batched: bool = False
    """Single-turn batched generation: every trajectory in flight at once (needs ``max_turns=1``)."""
    async_engine: bool = True
    """true only: the bundled engines are asyncio engines."""
    step_wise_trajectories: bool = False
    """false only: the bundled trainer trains one sample per trajectory."""
    model_name: Optional[str] = None
    """The model the engines serve: null or the policy's path only, since they serve the policy being trained."""
    engine_init_kwargs: Dict[str, Any] = field(default_factory=dict)
    """Passed to the vLLM engine (``generator.backend=vllm`` only); ``trust_remote_code`` needs
    ``SKYRL_GYM_TRUST_REMOTE_CODE=1`` as well."""
    vllm_v1_disable_multiproc: Optional[bool] = None
    """vLLM only; null or true (the bundled vLLM engine runs in this process)."""
    enable_prefix_caching: Optional[bool] = None
    """vLLM only (null: vLLM's default)."""
    enable_chunked_prefill: Optional[bool] = None
    """vLLM only (null: vLLM's default)."""
    max_num_batched_tokens: Optional[int] = None
    """vLLM only (null: vLLM's default)."""
    max_num_seqs: Optional[int] = None
    """vLLM only (null: vLLM's default)."""
    fully_sharded_loras: bool = False
    """false only: LoRA weights reach the engines merged."""
    inference_engine_pipeline_parallel_size: int = 1
    """1 only: pipeline parallel engines are not bundled."""
    inference_engine_expert_parallel_size: int = 1
    """1 only: expert parallel engines are not bundled."""
    inference_engine_data_parallel_size: int = 1
    """1 only: use ``num_inference_engines`` (vLLM) for more engines."""
    weight_transfer_threshold_cuda_ipc_GB: float = 1.0
    """Only read by SkyRL-train's cuda_ipc weight sync, which is not bundled: default only."""
    override_existing_update_group: str = "auto"
    """``auto`` only: the weight-sync group is created fresh for each run."""
    enable_http_endpoint: bool = False
    """false only: an OpenAI-compatible endpoint over the engines is not bundled."""
    http_endpoint_host: str = "127.0.0.1"
    """Read only with ``enable_http_endpoint`` (refused): default only."""
    http_endpoint_port: int = 8000
    """Read only with ``enable_http_endpoint`` (refused): default only."""
    rope_scaling: Optional[Dict[str, Any]] = None
    """null only (see ``trainer.rope_scaling``)."""
    rope_theta: Optional[float] = None
    """null only (see ``trainer.rope_scaling``)."""
    task: Optional[str] = None
    """SkyAgent's key: an agent YAML (a path, or the name of one shipped with ``skygym_adapters.agents``);
    ``AutoAgentRunner.from_task(task)`` becomes the generator. null: the rollout loop. See docs/agents.md."""


@dataclass
class RayEnvWorkersConfig:
    num_workers: int = 0
    """0: envs run in the trainer's process (on ``environment.skyrl_gym.max_env_workers`` threads). N > 0: every
    env of a rollout is built, stepped and closed in one of N Ray actors (``skygym_adapters.ray_envs``) placed over
    the Ray cluster the trainer runs on, so env work spreads over its nodes; an env that raises there ends its
    trajectory with the same error as a local one. A key of this project, not of SkyRL-train."""
    num_cpus_per_worker: float = 1.0
    """CPUs Ray reserves for each env worker (0 is allowed)."""
    resources_per_worker: Dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each env worker needs, e.g. ``{env_node: 1}`` to keep env work on the nodes started
    with ``ray start --resources='{"env_node": 1}'``."""
    scheduling_strategy: str = "SPREAD"
    """``SPREAD`` (env workers on as many nodes as possible) or ``DEFAULT`` (Ray's own placement)."""
    max_concurrency: int = 32
    """Env calls one worker runs at once (threads); more sessions on it wait their turn."""
    imports: List[str] = field(default_factory=list)
    """Modules each env worker imports when it starts, to register env ids that are neither built in nor
    installed through an entry point."""


@dataclass
class EnvironmentConfig:
    env_class: str = "gsm8k"
    """Used for rows that do not name their own ``env_class``."""
    env_config: Dict[str, Any] = field(default_factory=dict)
    """Passed to the ``env_class`` env as ``env_config`` (over ``skyrl_gym.<env_class>``); a key that env does not
    read is refused."""
    skyrl_gym: Dict[str, Any] = field(default_factory=lambda: {
        "max_env_workers": 32,
        "text2sql": {"db_path": None},
        "llm_as_a_judge": {"model": None, "base_url": None},
        "search": {"log_requests": None, "search_url": None, "topk": None, "timeout": None},
    })
    """SkyRL-train's env settings: ``max_env_workers`` (threads for env calls; 0: none) and one section per env
    id, passed to that env as its ``env_config`` (e.g. ``environment.skyrl_gym.text2sql.db_path=...``). A section
    that sets a value for an id no env has is refused, and so is a key its env does not read (the keys each env
    reads: ``skyrl-gym info <id>``). The sections SkyRL-train ships are listed with null values, meaning the env's
    own default, so Hydra-style overrides of them need no ``+``."""
    ray_env_workers: RayEnvWorkersConfig = field(default_factory=RayEnvWorkersConfig)


@dataclass
class SkyRLTrainConfig:
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
