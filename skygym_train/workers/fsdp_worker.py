"""Training workers: policy, reference and critic models, sharded with FSDP2 when there is more than one.

One class serves all three roles. A worker is a plain object: the local fast path uses it directly, the
Ray controller wraps it in ``ray.remote`` and runs one per device. With ``world_size > 1`` (or on CUDA)
the model is wrapped with ``torch.distributed.fsdp.fully_shard`` per decoder layer over a process group
(gloo on CPU, NCCL on CUDA); gradients are averaged across ranks by FSDP's reduce-scatter.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch

from skygym_adapters.engines.hf_attention import use_grouped_attention
from skygym_train.algorithms.policy_losses import Metrics
from skygym_train.workers.activations import recompute_gated_activations
from skygym_train.workers.batch import TrainingBatch
from skygym_train.workers.borrowed_weights import BorrowedWeights
from skygym_train.workers.log_probs import install_log_prob_head, log_probs_from_head, response_log_probs
from skygym_train.workers.packing import break_even_keys, layout, layout_for, packs_every_layer, plan_micro_batches

logger = logging.getLogger(__name__)

ROLES = ("policy", "ref", "critic")


@dataclass
class WorkerSpec:
    role: str
    model_path: str
    """A folder of Hugging Face weights (already resolved)."""
    optimizer: Any = None
    """An OptimizerConfig (policy/critic)."""
    lora: Any = None
    gradient_checkpointing: bool = False
    mixed_precision: Any = None
    reshard_after_forward: bool = True
    micro_train_batch_size: int = 1
    micro_forward_batch_size: int = 1
    seed: int = 42
    total_training_steps: int = 1000
    cpu_bf16_autocast: bool = False
    sample_packing: bool = True
    """Pack micro-batches (see ``packing``): shared prompts under sdpa/eager, end to end under flash attention."""
    max_tokens_per_microbatch: int = -1
    """> 0: micro-batches by token budget instead of by row count (``packing.plan_micro_batches``)."""
    flash_attn: Optional[bool] = None
    """None: flash attention on CUDA where flash-attn is installed, else SDPA; True: flash attention; False: SDPA."""
    bf16: Optional[bool] = None
    """None: ``mixed_precision`` on GPU, fp32 on CPU; True: also bf16 autocast on CPU; False: fp32 compute."""
    cpu_offload: bool = False
    """FSDP2 CPU offload of parameters, gradients and optimizer state (CUDA only)."""
    shard_one_gpu: bool = False
    """FSDP2 on one GPU too (``fsdp_config.shard_one_gpu``), for its mixed precision."""
    model_config_kwargs: Optional[Dict[str, Any]] = None
    """Set on the Hugging Face config when the model loads."""
    gradient_checkpointing_use_reentrant: bool = False
    sequence_parallel_size: int = 1
    """> 1: Ulysses sequence parallelism over groups of this many ranks (``ulysses``), which share their rows."""
    strategy: str = "fsdp2"
    """``fsdp2`` (this module's ``TrainingWorker``) or ``deepspeed`` (``deepspeed_worker.DeepSpeedWorker``)."""
    deepspeed_config: Optional[Dict[str, Any]] = None
    """The role's DeepSpeed config (``trainer.<role>.deepspeed_config``, plain values); None: ZeRO-3 defaults."""


def read_metrics(metrics: Metrics) -> Dict[str, float]:
    """The metrics as numbers, the tensors among them read from the device in one copy: a ``float()`` per metric
    and micro-batch would wait for the GPU between each forward pass and its backward pass. A tensor on another
    device (a loss of a user's that made one on the host) joins the first one's device."""
    tensors = {k: v for k, v in metrics.items() if isinstance(v, torch.Tensor)}
    out = {k: float(v) for k, v in metrics.items() if k not in tensors}
    if tensors:
        device = next(iter(tensors.values())).device
        stacked = torch.stack([v.detach().reshape(()).to(device, torch.float64) for v in tensors.values()])
        out.update(zip(tensors, stacked.tolist()))
    return {k: out[k] for k in metrics}


def _dtype(name: str) -> torch.dtype:
    return {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


class ValueModel(torch.nn.Module):
    """A transformer body with a scalar head per token (the critic)."""

    def __init__(self, body: torch.nn.Module, hidden_size: int):
        super().__init__()
        self.body = body
        self.value_head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           use_cache=False).last_hidden_state
        return self.value_head(hidden).squeeze(-1)


def _keep_optimizer_kernels(optimizer: torch.optim.Optimizer, kernels: List[Dict[str, Any]]) -> None:
    """After a checkpoint's optimizer state was loaded: AdamW's kernel is this run's choice (fused, see
    ``_new_optimizer``), not the one of the run that wrote the checkpoint, whose param groups came with the state.
    The fused kernel keeps each parameter's step count on the parameter's device."""
    for group, kernel in zip(optimizer.param_groups, kernels):
        group.update(kernel)
        if not kernel.get("fused"):
            continue
        for param in group["params"]:
            step = optimizer.state.get(param, {}).get("step")
            if isinstance(step, torch.Tensor) and step.device != param.device:
                optimizer.state[param]["step"] = step.to(param.device, torch.float32)


def gpu_compute_dtype(spec: WorkerSpec) -> torch.dtype:
    """The dtype a worker on a GPU computes in: ``fsdp_config.mixed_precision.param_dtype`` (by autocast over fp32
    parameters, or by FSDP2's policy where sharded) unless ``trainer.bf16=false``, which computes in fp32."""
    if spec.bf16 is False:
        return torch.float32
    if spec.mixed_precision is not None:
        return _dtype(spec.mixed_precision.param_dtype)
    return torch.bfloat16 if spec.bf16 else torch.float32


def attention_for(spec: WorkerSpec, cuda: bool) -> Optional[str]:
    """The attention a worker asks transformers for (outside sequence parallelism): "sdpa" with
    ``flash_attn=False``, "flash_attention_2" with ``flash_attn=True`` (validation checked CUDA, flash-attn and a
    16-bit compute dtype); unset, flash attention on a GPU where it is installed and the worker computes in 16 bits
    (flash attention has no fp32 kernel), SDPA otherwise. None: transformers' own choice, on the CPU or where
    ``model_config_kwargs`` names one (e.g. "eager"), which is kept on a GPU as well."""
    import importlib.util

    if spec.flash_attn is False:
        return "sdpa"
    if spec.flash_attn:
        return "flash_attention_2"
    if cuda and "attn_implementation" not in (spec.model_config_kwargs or {}):
        flash = importlib.util.find_spec("flash_attn") and gpu_compute_dtype(spec) != torch.float32
        return "flash_attention_2" if flash else "sdpa"
    return None


class TrainingWorker:
    """Holds one shard of a model; computes log-probs/values and takes optimizer steps."""

    skips_rows_without_advantage = True
    """Whether ``train_step`` may skip micro-batches that add nothing to the gradient (``_adds_nothing``)."""

    def __init__(self, spec: WorkerSpec, rank: int = 0, world_size: int = 1, dist_init: Optional[str] = None,
                 num_threads: Optional[int] = None):
        if spec.role not in ROLES:
            raise ValueError(f"unknown worker role {spec.role!r}; expected one of {ROLES}")
        if num_threads:
            # Ray gives an actor OMP_NUM_THREADS=1 unless told otherwise: use the cores the placement reserved.
            torch.set_num_threads(int(num_threads))
        self.spec = spec
        self.rank = rank
        self.world_size = world_size
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
        self._dist_init = dist_init
        self._owns_process_group = False  # shutdown closes only a group this worker opened (vLLM opens its own)
        self.model: Any = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.scheduler: Any = None
        self.sharded = False
        self.policy_loss_fn: Optional[Callable] = None
        self.algorithm: Any = None
        self.temperature = 1.0
        self.global_step = 0
        self.layout = "padded"
        """How micro-batches reach the model: ``shared_prefix``, ``varlen`` or ``padded`` (see ``packing``)."""
        self._attention_break_even: Optional[float] = None  # set by load_model (packing.break_even_keys)
        self._log_prob_head: Optional[torch.nn.Module] = None
        """The LM head that returns log-probs instead of logits (``log_probs.install_log_prob_head``), where it can."""
        self.tokens_run = 0
        """Tokens (padding included) through the model so far: what packing saves shows here."""
        self._sp_group: Any = None
        """This rank's sequence-parallel group (``ulysses``), when ``sequence_parallel_size`` > 1."""
        self._sp_rank = 0
        self._rank0_state: Optional[Dict[str, torch.Tensor]] = None
        """Rank 0's full weights between loading and sharding, when the other ranks build on meta."""
        self._shared_weights: Optional[torch.Tensor] = None
        """The shared-memory buffer the parameters live in once an engine maps them (``weight_sync`` shm)."""
        self._borrowed: Optional[BorrowedWeights] = None
        """An engine's bf16 weights this policy writes after each update and computes with (``borrow_weights``)."""

    # ------------------------------------------------------------------ set-up
    def torch_threads(self) -> int:
        """The intra-op threads this worker's torch uses (the cores its placement reserved, on CPU)."""
        return torch.get_num_threads()

    def rendezvous_address(self) -> tuple:
        """This node's IP and a free port, for rank 0 to host the process-group rendezvous."""
        from skygym_train.weight_sync import free_port

        try:
            import ray

            host = ray.util.get_node_ip_address()
        except Exception:  # not in Ray
            host = "127.0.0.1"
        return host, free_port()

    def cuda_device_uuid(self) -> Optional[str]:
        """This worker's GPU (``weight_sync`` refuses an NCCL group between two processes on one GPU)."""
        from skygym_train.weight_sync import cuda_device_uuid

        return cuda_device_uuid()

    def set_dist_init(self, init_method: str) -> None:
        self._dist_init = init_method

    def init_process_group(self) -> None:
        import torch.distributed as dist

        cuda = self.device.type == "cuda"
        if self.world_size == 1 and not cuda:
            return
        if self._dist_init is None and self.world_size == 1:
            from skygym_train.weight_sync import free_port

            self._dist_init = f"tcp://127.0.0.1:{free_port()}"
        if not dist.is_initialized():
            backend = "nccl" if cuda else "gloo"
            dist.init_process_group(backend, init_method=self._dist_init, rank=self.rank, world_size=self.world_size)
            self._owns_process_group = True

    def load_model(self) -> int:
        """Load the weights, shard them, build the optimizer. Returns the parameter count."""
        self._borrowed = None  # paired with the parameters of a model this replaces
        self.init_process_group()
        if self.spec.sequence_parallel_size > 1:
            from skygym_train.workers.ulysses import new_groups

            self._sp_group, self._sp_rank = new_groups(self.world_size, self.spec.sequence_parallel_size, self.rank)
        torch.manual_seed(self.spec.seed)
        model = self._load_module()
        config = getattr(model.body if isinstance(model, ValueModel) else model, "config", None)
        self.layout = layout_for(getattr(config, "_attn_implementation", None),
                                 self.spec.sample_packing and packs_every_layer(config))
        if self._sp_group is not None:
            self.layout = "padded"  # each rank runs a slice of whole rows; shared prompts would cross the slices
        # where a long row's attention costs more than repeating a prompt (packing.break_even_keys); counted
        # before wrapping, which shards the weights
        self._attention_break_even = break_even_keys(model.body if isinstance(model, ValueModel) else model)
        if self.spec.role == "ref":
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
        else:
            model.train()
        count = sum(p.numel() for p in model.parameters())  # before wrapping: ZeRO-3 leaves empty placeholders
        self._wrap(model)
        return count

    def _load_module(self) -> torch.nn.Module:
        """The role's model on this worker's device: Hugging Face weights in fp32, LoRA adapters, checkpointing."""
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

        from skygym_adapters.models import code_loading_refusal

        refusal = code_loading_refusal(self.spec.model_config_kwargs, f"trainer.{self.spec.role}.model_config_kwargs")
        if refusal:  # the config check says so first; this holds for a spec built without it
            raise ValueError(refusal)
        cuda = self.device.type == "cuda"
        load_dtype = torch.float32  # master weights stay fp32; mixed precision casts for compute on GPU
        extra: Dict[str, Any] = dict(self.spec.model_config_kwargs or {})
        if self.spec.sequence_parallel_size > 1:
            from skygym_train.workers.ulysses import register

            attention = register()  # SDPA over all-to-all exchanged heads
        else:
            attention = attention_for(self.spec, cuda)
        if attention:
            extra["attn_implementation"] = attention
        auto = AutoModel if self.spec.role == "critic" else AutoModelForCausalLM
        if self._loads_from_rank0() and self.rank != 0:
            # only rank 0 reads the weights; this rank builds the model on the meta device (no memory) and
            # gets its shards from rank 0 once sharded (_materialize)
            attention_kwargs = {k: extra.pop(k) for k in ("attn_implementation",) if k in extra}
            config = AutoConfig.from_pretrained(self.spec.model_path, **extra)
            with torch.device("meta"):
                model: torch.nn.Module = auto.from_config(config, dtype=load_dtype, **attention_kwargs)
                if self.spec.role == "critic":
                    model = ValueModel(model, config.hidden_size)
        else:
            model = auto.from_pretrained(self.spec.model_path, dtype=load_dtype, **extra)
            if self.spec.role == "critic":
                model = ValueModel(model, AutoConfig.from_pretrained(self.spec.model_path).hidden_size)
            if self._loads_from_rank0():
                self._rank0_state = model.state_dict()  # what rank 0 broadcasts once every rank is sharded
        if self._sp_group is None:
            if not self.spec.gradient_checkpointing:
                # on "sdpa" with grouped key/value heads: masked attention reads each key/value head in place instead
                # of keeping a copy per query head for the backward pass (hf_attention; the same outputs). Not with
                # checkpointing: no layer keeps those copies then, and the fold's mask would be the only change
                use_grouped_attention(model.body if isinstance(model, ValueModel) else model)
        else:
            from skygym_train.workers.ulysses import attach

            attach(model.body if isinstance(model, ValueModel) else model, self._sp_group,
                   self.spec.sequence_parallel_size)
        if self.spec.role != "ref" and self.spec.lora is not None and self.spec.lora.rank > 0:
            model = self._apply_lora(model)
        if self.spec.role != "ref" and not self.spec.gradient_checkpointing:
            # a gated MLP's activation recomputed in the backward pass, not kept (activations; the same results)
            recompute_gated_activations(model)
        if self.spec.role != "critic" and self._sp_group is None:
            # log-probs from the last hidden states, never the (B, T, vocabulary) logits (log_probs)
            self._log_prob_head = install_log_prob_head(model)
        if self.spec.gradient_checkpointing and self.spec.role != "ref":
            target = model.body if isinstance(model, ValueModel) else model
            kwargs = {"use_reentrant": self.spec.gradient_checkpointing_use_reentrant}
            if hasattr(target, "activation_checkpointing_enable"):  # transformers >= 5.24's name
                target.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            elif hasattr(target, "gradient_checkpointing_enable"):
                target.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            if hasattr(target, "config"):
                target.config.use_cache = False
        if self._shards_on_cuda() or (self._loads_from_rank0() and self.rank != 0):
            # fully_shard moves each layer to the GPU as it shards it: the whole fp32 model never sits on a
            # rank's GPU (with CPU offload the shards stay on the host); a meta model stays meta until then
            return model
        return model.to(self.device)

    def _loads_from_rank0(self) -> bool:
        """True when only rank 0 reads the weights and the other ranks build on the meta device (several FSDP2
        ranks, no LoRA: peft's adapter init needs real base weights)."""
        return self.world_size > 1 and not (self.spec.lora is not None and self.spec.lora.rank > 0)

    def _materialize(self, model: torch.nn.Module) -> None:
        """After sharding: the meta ranks allocate their shards and every rank takes rank 0's weights (each
        rank receives only its shards), then the buffers no state dict holds (rotary frequencies)."""
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        if self.rank != 0:
            model.to_empty(device=self.device)
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, self._rank0_state if self.rank == 0 else {}, options=options)
        self._rank0_state = None
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)
        for module in model.modules():  # a rotary embedding's copy of its frequencies (not a buffer)
            if getattr(module, "original_inv_freq", None) is not None and hasattr(module, "inv_freq"):
                module.original_inv_freq = module.inv_freq.clone()

    def _shards_on_cuda(self) -> bool:
        """True when ``_wrap`` will shard a CUDA model with FSDP2 (see there)."""
        return self.device.type == "cuda" and (self.world_size > 1 or self.spec.cpu_offload or self.spec.shard_one_gpu)

    def _wrap(self, model: torch.nn.Module) -> None:
        """Shard ``model`` with FSDP2 (more than one rank; on CUDA also CPU offload or ``shard_one_gpu``) and build
        its optimizer (policy and critic). One device keeps plain parameters otherwise: an engine in this process
        can then read them or copy them on the device (``weight_sync``), and bf16 compute comes from autocast
        (``_autocast_dtype``) instead of FSDP's mixed-precision policy."""
        if self.world_size > 1 or self._shards_on_cuda():
            self._shard(model)
            if self._loads_from_rank0():
                self._materialize(model)
        self.model = model
        if self.spec.role != "ref":
            self._build_optimizer()

    def _apply_lora(self, model: torch.nn.Module, initialise: bool = True) -> torch.nn.Module:
        """Wrap ``model`` (a ValueModel's body) with peft LoRA adapters. ``initialise=False`` uses peft's default
        init whatever ``init_method`` says: for a copy whose weights are then loaded, where an init that reads the
        base weights (``pissa``, ``olora``) would have nothing to read."""
        from peft import LoraConfig, get_peft_model

        lora = self.spec.lora
        targets: Any = lora.target_modules
        options: Dict[str, Any] = {}
        if getattr(lora, "exclude_modules", None):
            options["exclude_modules"] = lora.exclude_modules
        init = getattr(lora, "init_method", "kaiming")
        if init != "kaiming" and initialise:  # PEFT's default init (kaiming-uniform A, zero B) is SkyRL's "kaiming"
            options["init_lora_weights"] = init
        config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                            **options)
        if isinstance(model, ValueModel):
            model.body = get_peft_model(model.body, config)
            return model
        return get_peft_model(model, config)

    def _shard(self, model: torch.nn.Module) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (self.world_size,))
        kwargs: Dict[str, Any] = {"mesh": mesh, "reshard_after_forward": self.spec.reshard_after_forward}
        if self.device.type == "cuda" and self.spec.cpu_offload:
            from torch.distributed.fsdp import CPUOffloadPolicy

            kwargs["offload_policy"] = CPUOffloadPolicy()
        if self._sharded_param_dtype() is not None:
            kwargs["mp_policy"] = MixedPrecisionPolicy(
                param_dtype=_dtype(self.spec.mixed_precision.param_dtype),
                reduce_dtype=_dtype(self.spec.mixed_precision.reduce_dtype),
            )
        # one FSDP unit per decoder layer, so only one layer's full weights exist at a time
        for module in model.modules():
            if type(module).__name__.endswith("DecoderLayer"):
                fully_shard(module, **kwargs)
        fully_shard(model, **kwargs)
        self.sharded = True

    def _build_optimizer(self) -> None:
        self.optimizer, self.scheduler = self._new_optimizer(self.model)

    def _new_optimizer(self, model: torch.nn.Module) -> tuple:
        """AdamW over ``model``'s trainable parameters and its learning-rate schedule: the fused kernel where the
        parameters are all on a GPU (one launch per step; TRL's default too) or all on the CPU (SmolLM2-135M's
        step: 0.07 s against the multi-tensor kernel's 0.53 s on two AVX2 cores), else the multi-tensor one."""
        from transformers import get_scheduler

        opt = self.spec.optimizer
        params = [p for p in model.parameters() if p.requires_grad]
        fused = len({p.device.type for p in params}) == 1 and params[0].device.type in ("cuda", "cpu")
        optimizer = torch.optim.AdamW(params, lr=opt.lr, betas=tuple(opt.adam_betas), weight_decay=opt.weight_decay,
                                      **({"fused": True} if fused else {"foreach": True}))
        # transformers' schedulers, as SkyRL-train builds them (validation refuses names they cannot run with)
        scheduler = get_scheduler(
            opt.scheduler,
            optimizer,
            num_warmup_steps=max(0, int(opt.num_warmup_steps)),
            num_training_steps=max(1, self.spec.total_training_steps),
        )
        return optimizer, scheduler

    def configure_algorithm(self, algorithm: Any, policy_loss_fn: Optional[Callable], temperature: float) -> None:
        """Set the loss (a function, so user-registered losses reach Ray workers by value)."""
        self.algorithm = algorithm
        self.policy_loss_fn = policy_loss_fn
        self.temperature = temperature or 1.0

    # ------------------------------------------------------------------ forward passes
    def _autocast_dtype(self) -> Optional[torch.dtype]:
        """The dtype the forward pass computes in under autocast, or None (fp32, or FSDP's policy casts)."""
        if self.device.type == "cpu":
            return torch.bfloat16 if (self.spec.cpu_bf16_autocast or self.spec.bf16) else None
        if self.sharded:
            return None  # FSDP's MixedPrecisionPolicy casts the gathered parameters
        dtype = gpu_compute_dtype(self.spec)
        return None if dtype == torch.float32 else dtype

    def _sharded_param_dtype(self) -> Optional[torch.dtype]:
        """The dtype FSDP2's mixed-precision policy gathers parameters in (sharded on a GPU), or None."""
        if self.device.type == "cuda" and self.spec.mixed_precision is not None and self.spec.bf16 is not False:
            return gpu_compute_dtype(self.spec)
        return None

    def _attention_dtype(self) -> torch.dtype:
        """The dtype attention computes in: autocast's, FSDP's gathered parameters', or the parameters' own."""
        dtype = self._autocast_dtype() or (self._sharded_param_dtype() if self.sharded else None)
        return dtype or next(self.model.parameters()).dtype

    def _forward(self, batch: TrainingBatch) -> Any:
        dtype = self._autocast_dtype()
        if dtype is not None:
            with torch.autocast(self.device.type, dtype=dtype):
                return self._forward_impl(batch)
        return self._forward_impl(batch)

    def _forward_impl(self, batch: TrainingBatch) -> Any:
        if self._sp_group is not None:
            return self._forward_sequence_parallel(batch)
        t = {k: v.to(self.device) for k, v in batch.tensors.items()}
        budget = self.spec.max_tokens_per_microbatch
        rows = layout(self.layout, batch.tensors, batch.prompt_length, self._attention_break_even,
                      max_tokens=budget if budget > 0 else None)
        inputs = rows.model_inputs(self.device, self._attention_dtype())
        self.tokens_run += rows.num_tokens
        if self.spec.role == "critic":
            values = self.model(**inputs)
            return rows.gather(rows.kept(values)).float(), t
        keep = rows.logits_to_keep(self.device)
        entropy_grad = bool(self.algorithm is not None and self.algorithm.use_entropy_loss)
        if self._log_prob_head is not None:
            targets = t["input_ids"][:, batch.prompt_length :]
            with log_probs_from_head(self._log_prob_head, rows.gather, targets, self.temperature, entropy_grad):
                out = self._run_policy(**inputs, use_cache=False, logits_to_keep=keep)
            log_probs, entropy = out.logits.unbind(-1)  # (B, T, 2) from the head: no logits were made
            return (log_probs, entropy if entropy_grad else entropy.detach()), t
        out = self._run_policy(**inputs, use_cache=False, logits_to_keep=keep)
        logits = rows.gather(out.logits)  # (B, T, V): the logits that predict each response token
        # a packed layout's gather is a copy, and nothing keeps the model's own logits for the backward pass: they
        # go now, not after the log-probs (at 512-token answers and a 150k vocabulary, ~2.5 GiB a micro-batch)
        del out
        return response_log_probs(logits, t["input_ids"], batch.prompt_length, self.temperature, entropy_grad), t

    def _run_policy(self, **inputs: Any) -> Any:
        """The policy model on ``inputs``: with its linear layers reading an engine's bf16 copy of their weights
        where it borrows them (``borrow_weights``), else its own parameters."""
        if self._still_borrowed():
            return self._borrowed.call(self.model, **inputs)
        return self.model(**inputs)

    def _still_borrowed(self) -> bool:
        """Whether this worker computes with and writes an engine's weights; an engine that recalled them ends it
        here (the policy computes with autocast's casts again)."""
        if self._borrowed is not None and self._borrowed.recalled:
            logger.warning("the engine recalled the weights it lent the policy: the policy computes with its own "
                           "parameters again, and the engine needs a weight sync that copies")
            self._borrowed = None
        return self._borrowed is not None

    def _forward_sequence_parallel(self, batch: TrainingBatch) -> Any:
        """``_forward_impl`` under Ulysses: this rank runs its slice of every row; the per-token results of
        the group's slices are joined, so every rank returns what one process would (see ``ulysses``). Rows
        are shifted to start at their first real token, so attention is plainly causal and needs no
        ``(S, S)`` mask."""
        from skygym_train.workers.ulysses import causal_marker, gather_sequence, left_aligned

        size = torch.distributed.get_world_size(self._sp_group)
        t = {k: v.to(self.device) for k, v in batch.tensors.items()}
        rows = layout("padded", batch.tensors, batch.prompt_length)
        inputs = rows.model_inputs(self.device)
        ids, positions, shift = left_aligned(inputs["input_ids"], inputs["attention_mask"],
                                             inputs["position_ids"])
        length = ids.shape[1]
        padded = -(-length // size) * size
        ids, positions = (torch.nn.functional.pad(x, (0, padded - length)) for x in (ids, positions))
        mine = slice(self._sp_rank * (padded // size), (self._sp_rank + 1) * (padded // size))
        self.tokens_run += rows.num_tokens // size
        local = {"input_ids": ids[:, mine], "attention_mask": causal_marker(ids.shape[0], self.device),
                 "position_ids": positions[:, mine]}
        # the position that predicts response token j of a row: P - 1 + j in the padded row, less its shift
        slots = torch.arange(length - batch.prompt_length, device=self.device)[None]
        predicting = (batch.prompt_length - 1 - shift)[:, None] + slots
        if self.spec.role == "critic":
            values = gather_sequence(self.model(**local), self._sp_group)
            return values.gather(1, predicting).float(), t
        logits = self.model(**local, use_cache=False).logits
        targets = torch.roll(ids, -1, dims=1)[:, mine]  # the token each position predicts
        entropy_grad = bool(self.algorithm is not None and self.algorithm.use_entropy_loss)
        log_probs, entropy = response_log_probs(logits, targets, 0, self.temperature, entropy_grad)
        log_probs, entropy = (gather_sequence(x, self._sp_group) for x in (log_probs, entropy))
        return (log_probs.gather(1, predicting), entropy.gather(1, predicting)), t

    def _micro_batches(self, batch: TrainingBatch, rows: int) -> List[List[int]]:
        """Row indices of each micro-batch: ``rows`` rows each, or up to the token budget when one is set."""
        budget = self.spec.max_tokens_per_microbatch
        if budget > 0:
            shared = self.layout == "shared_prefix"
            return plan_micro_batches(batch.tensors, batch.prompt_length, budget, share_prompts=shared)
        return [list(range(start, min(batch.size, start + rows))) for start in range(0, batch.size, rows)]

    def _extra_micro_batches(self, count: int) -> int:
        """How many empty passes this rank adds so that every rank runs as many as the busiest one.

        FSDP's collectives pair up forward and backward passes across ranks, so the counts must match;
        with a token budget each rank's share of rows may split differently.
        """
        import torch.distributed as dist

        if self.spec.max_tokens_per_microbatch <= 0 or self.world_size == 1 or not dist.is_initialized():
            return 0
        most = torch.tensor([count], device=self.device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
        return int(most.item()) - count

    @torch.no_grad()
    def forward(self, batch: TrainingBatch) -> Dict[str, torch.Tensor]:
        """Log-probs (policy/ref) or values (critic) for every row, in micro-batches."""
        was_training = self.model.training
        self.model.eval()
        outputs: Dict[str, List[torch.Tensor]] = {}
        parts = self._micro_batches(batch, self.spec.micro_forward_batch_size)
        extra = self._extra_micro_batches(len(parts))  # agreed before any pass: collectives go in order
        for rows in parts:
            result, _ = self._forward(batch.select(rows))
            if self.spec.role == "critic":
                outputs.setdefault("values", []).append(result.cpu())
            else:
                log_probs, entropy = result
                outputs.setdefault("log_probs", []).append(log_probs.cpu())
                outputs.setdefault("entropy", []).append(entropy.cpu())
        for _ in range(extra):
            self._forward(batch.select([0]))  # joins the other ranks' collectives; the result is dropped
        if was_training:
            self.model.train()
        return {k: torch.cat(v) for k, v in outputs.items()}

    # ------------------------------------------------------------------ training
    def train_step(self, batch: TrainingBatch) -> Dict[str, float]:
        """One optimizer step on this worker's share of a mini-batch (gradient accumulation over micro-batches)."""
        from skygym_train.tracking import PeakMemory

        assert self.optimizer is not None, f"the {self.spec.role} worker has no optimizer"
        start_time = time.perf_counter()
        # no reset: in the trainer's process that would cut the step's own measure (memory/peak_gib) short
        peak = PeakMemory(self.device, reset=False)
        tokens_before = self.tokens_run
        self.optimizer.zero_grad(set_to_none=True)
        totals: Metrics = {}  # tensors stay on the device until the step's end (read_metrics)
        parts = self._micro_batches(batch, self.spec.micro_train_batch_size)
        extra = self._extra_micro_batches(len(parts))  # agreed before any pass: collectives go in order
        skipped, trained_weight = 0, 0.0
        for index, rows in enumerate(parts):
            weight = len(rows) / batch.size  # each micro-batch weighs its share of the rows
            # a sequence-parallel rank's gradients are its tokens' share and FSDP averages over every rank
            weight *= self.spec.sequence_parallel_size
            part = batch.select(rows)
            if self._adds_nothing(part):
                skipped += len(rows)
                continue
            self._before_backward(last=index == len(parts) - 1 and not extra)
            loss, metrics = self._loss(part)
            self._backward(loss * weight)
            trained_weight += weight
            for k, v in metrics.items():
                totals[k] = totals.get(k, 0.0) + v * weight
        if skipped:
            # the step the skipped rows would have given: zero gradients still decay the weights and move Adam's
            # moments (a parameter without a gradient would be left out of the step)
            for p in self.model.parameters():
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
            # the metrics describe the rows trained (as with zero_variance_filter)
            total_weight = trained_weight + skipped / batch.size * self.spec.sequence_parallel_size
            totals = {k: v * total_weight / trained_weight for k, v in totals.items()} if trained_weight else {}
        totals = read_metrics(totals)
        for index in range(extra):
            self._before_backward(last=index == extra - 1)
            loss, _ = self._loss(batch.select([0]))
            self._backward(loss * 0.0)  # joins the other ranks' collectives; adds nothing to the gradients
        grad_norm_value = self._optimizer_step()
        self.write_borrowed_weights()  # the engine's weights, and the next pass's compute copy, follow the update
        self.global_step += 1
        totals = self._mean_across_ranks(totals)
        prefix = "policy" if self.spec.role == "policy" else "critic"
        out = {f"{prefix}/{k}": v for k, v in totals.items()}
        out[f"{prefix}/grad_norm"] = grad_norm_value
        if self.spec.role == "policy":
            out["policy/skipped_rows"] = skipped / batch.size
        out[f"{prefix}/lr"] = float(self.scheduler.get_last_lr()[0])
        out[f"{prefix}/model_tokens"] = float(self.tokens_run - tokens_before)  # padding included
        out[f"timing/{prefix}_train_step_s"] = time.perf_counter() - start_time
        out[f"memory/{prefix}_peak_gib"] = peak.gib()  # GPU: since the trainer's step began; CPU: peak RSS
        return out

    def _adds_nothing(self, batch: TrainingBatch) -> bool:
        """Whether a policy micro-batch adds exactly nothing to the gradient, so that ``train_step`` can skip its
        forward and backward passes: every advantage of its response tokens is 0 (GRPO's groups whose rewards all
        agree), the policy loss vanishes with its advantages (``register_policy_loss(vanishes_without_advantage=
        True)``, as every bundled loss does) and no entropy or KL term is added. The update is the one the full
        passes give, without their cost (a 0 * inf = NaN gradient, which would have skipped the optimizer step,
        cannot arise). One unsharded process only: FSDP's collectives need every rank to run the same passes."""
        algo, t = self.algorithm, batch.tensors
        if self.spec.role != "policy" or not self.skips_rows_without_advantage or algo is None:
            return False
        if self.world_size > 1 or self.sharded:
            return False
        if algo.use_entropy_loss or (algo.use_kl_loss and "ref_log_probs" in t):
            return False
        if not getattr(self.policy_loss_fn, "vanishes_without_advantage", False):
            return False
        return not bool((t["advantages"] * t["response_mask"]).count_nonzero())  # NaN counts as non-zero

    def _before_backward(self, last: bool) -> None:
        """Called before each micro-batch's backward pass; ``last`` is the one before the optimizer step."""

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _optimizer_step(self) -> float:
        """Clip the accumulated gradients, step the optimizer (skipped when the norm is not finite) and the
        schedule; returns the gradient norm before clipping."""
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.requires_grad], self.spec.optimizer.max_grad_norm
        )
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        grad_norm_value = float(grad_norm)
        if math.isfinite(grad_norm_value):
            self.optimizer.step()
        self.scheduler.step()
        return grad_norm_value

    def _mean_across_ranks(self, values: Dict[str, float]) -> Dict[str, float]:
        import torch.distributed as dist

        if self.world_size == 1 or not dist.is_initialized() or not values:
            return values
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return {k: float(v) / self.world_size for k, v in zip(keys, t.tolist())}

    def _loss(self, batch: TrainingBatch) -> tuple[torch.Tensor, Metrics]:
        from skygym_train.algorithms.kl import kl_estimate
        from skygym_train.algorithms.policy_losses import reduce_loss, value_loss

        result, t = self._forward(batch)
        mask = t["response_mask"]
        algo = self.algorithm
        if self.spec.role == "critic":
            loss, metrics = value_loss(result, t["values"], t["returns"], mask, algo.value_clip if algo else None)
            metrics["value_loss"] = loss.detach()
            return loss, metrics
        log_probs, entropy = result
        # On-policy with a single update, the old policy is the current one: reuse this forward pass.
        old = t["old_log_probs"] if "old_log_probs" in t else log_probs.detach()
        assert self.policy_loss_fn is not None, "configure_algorithm() was not called"
        loss, metrics = self.policy_loss_fn(log_probs, old, t["advantages"], mask, algo)
        metrics = dict(metrics)
        metrics["pg_loss"] = loss.detach()
        reduction, max_len = algo.loss_reduction, algo.max_seq_len
        metrics["entropy"] = reduce_loss(entropy.detach(), mask, "token_mean")
        if algo.use_entropy_loss:
            loss = loss - algo.entropy_loss_coef * reduce_loss(entropy, mask, reduction, max_len)
        if algo.use_kl_loss and "ref_log_probs" in t:
            kl = kl_estimate(log_probs, t["ref_log_probs"], algo.kl_estimator_type)
            kl_loss = reduce_loss(kl, mask, reduction, max_len)
            # read from the batch's host copy: the device's would wait for the forward pass
            coef = float(batch.tensors["kl_coef"][0]) if "kl_coef" in t else algo.kl_loss_coef
            loss = loss + coef * kl_loss
            metrics["kl_loss"] = kl_loss.detach()
        metrics["loss"] = loss.detach()
        return loss, metrics

    # ------------------------------------------------------------------ weights and state
    def full_state_dict(self, cpu_offload: bool = True) -> Dict[str, torch.Tensor]:
        """Unsharded weights (on rank 0; other ranks get an empty dict), on CPU unless ``cpu_offload=False``. LoRA is
        merged in (by peft, ``_merge_lora``).

        This gathers the whole model on rank 0: it serves exports and engine weight sync, which need every weight in
        one place. Training checkpoints do not use it (``save_training_state`` writes each rank's shards)."""
        lora = self.spec.lora is not None and self.spec.lora.rank > 0
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            options = StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload)
            state = get_model_state_dict(self.model, options=options)
        elif self._shared_weights is not None or lora:
            # copies: a view of the shared buffer would carry the whole buffer when pickled (Ray), and the LoRA
            # merge writes into the base weights it is given (on the host with cpu_offload: GPU tensors came back
            # here, beside a DeepSpeed or sharded worker's host copies)
            state = {k: (v.detach().to("cpu", copy=True) if cpu_offload else v.detach().clone())
                     for k, v in self.model.state_dict().items()}
        else:
            state = {k: (v.detach().cpu() if cpu_offload else v.detach()) for k, v in self.model.state_dict().items()}
        if lora and state:
            state = self._merge_lora(state)
        return state

    def _merge_lora(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The weights with each LoRA adapter folded in by peft's own ``merge_and_unload`` (its scaling, rsLoRA,
        fan_in_fan_out layers, DoRA), keyed as the plain model's. peft runs on an unsharded copy of the model built
        on the meta device (no memory) and given ``state``'s tensors, which it merges in place."""
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(self.spec.model_path, **(self.spec.model_config_kwargs or {}))
        with torch.device("meta"):
            if self.spec.role == "critic":
                skeleton: torch.nn.Module = ValueModel(AutoModel.from_config(config), config.hidden_size)
            else:
                skeleton = AutoModelForCausalLM.from_config(config)
            skeleton = self._apply_lora(skeleton, initialise=False)
        missing, unexpected = skeleton.load_state_dict(state, strict=False, assign=True)
        if getattr(config, "tie_word_embeddings", False):  # assign=True replaced the tied Parameter under each name
            (skeleton.body if isinstance(skeleton, ValueModel) else skeleton).get_base_model().tie_weights()
        if unexpected or any(p.is_meta for p in skeleton.parameters()):
            raise RuntimeError(f"LoRA merge: the weights do not fit the model (missing {missing[:5]}, unexpected "
                               f"{unexpected[:5]})")
        if isinstance(skeleton, ValueModel):
            skeleton.body = skeleton.body.merge_and_unload()
            merged = skeleton
        else:
            merged = skeleton.merge_and_unload()
        return {k: v for k, v in merged.state_dict().items() if not v.is_meta}

    def _sharded_training_state(self) -> Dict[str, Any]:
        """This rank's model and optimizer state (its own shards under FSDP2: nothing is gathered), the scheduler
        and the step, keyed as ``torch.distributed.checkpoint`` saves them."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer if self.optimizer is not None else [])
        return {
            "model": model_state,
            "optimizer": optim_state,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else {},
            "global_step": self.global_step,
        }

    def save_training_state(self, folder: str) -> None:
        """Write model, optimizer and scheduler state into ``folder`` with DCP; every rank calls this at once and
        writes only its own shards (``checkpoint.save_sharded``)."""
        from skygym_train.checkpoint import save_sharded

        save_sharded(self._sharded_training_state(), Path(folder))

    def load_training_state(self, folder: str) -> None:
        """Load what ``save_training_state`` wrote (by any number of ranks) into this rank's shards."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        from skygym_train.checkpoint import load_sharded

        state = self._sharded_training_state()  # the layout to fill: this rank's shards, the optimizer's keys
        load_sharded(state, Path(folder))
        kernels = [{k: group.get(k) for k in ("fused", "foreach")} for group in self.optimizer.param_groups] if (
            self.optimizer is not None) else []
        set_state_dict(
            self.model,
            self.optimizer if self.optimizer is not None else [],
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )
        if self.optimizer is not None:
            _keep_optimizer_kernels(self.optimizer, kernels)
        if self.scheduler is not None and state["scheduler"]:
            self.scheduler.load_state_dict(state["scheduler"])
        self.global_step = int(state["global_step"])
        self.write_borrowed_weights()

    def save_hf(self, out_dir: str, tokenizer_source: Optional[str] = None, dtype: str = "float32") -> None:
        """Write a Hugging Face folder (merged LoRA, safetensors in ``dtype``) that transformers and vLLM load
        (rank 0 writes)."""
        state = self.full_state_dict()
        if self.rank != 0:
            return
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        config = AutoConfig.from_pretrained(self.spec.model_path)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(state, strict=False)
        real_missing = [k for k in missing if not k.endswith("lm_head.weight")]
        if real_missing or unexpected:
            raise RuntimeError(f"export mismatch: missing {real_missing[:5]}, unexpected {unexpected[:5]}")
        if "lm_head.weight" in missing:
            model.tie_weights()
        model.to(getattr(torch, dtype))
        os.makedirs(out_dir, exist_ok=True)
        if not torch.cuda.is_available():
            # save_pretrained imports DeepSpeed where it is installed (accelerate looks for its engine), and that
            # import warns, in every run that exports, that it found no GPU; this trainer's DeepSpeed runs on the
            # CPU here anyway
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        model.save_pretrained(out_dir)
        AutoTokenizer.from_pretrained(tokenizer_source or self.spec.model_path).save_pretrained(out_dir)
        _as_umask_allows(out_dir)

    def save_weights(self, out_dir: str) -> int:
        """Write every weight to ``out_dir/model.safetensors`` (plus ``config.json``) for engines to reload.

        Unlike :meth:`save_hf`, tied weights are written under each name: vLLM's in-place reload leaves a
        tied ``lm_head`` at its old value when the file has none. Rank 0 writes; returns the bytes written.
        """
        state = self.full_state_dict()
        if self.rank != 0:
            return 0
        from safetensors.torch import save_file
        from transformers import AutoConfig

        os.makedirs(out_dir, exist_ok=True)
        tensors = {name: tensor.contiguous().clone() for name, tensor in state.items()}  # clone: tied share storage
        partial = os.path.join(out_dir, "model.safetensors.partial")
        save_file(tensors, partial, metadata={"format": "pt"})
        os.replace(partial, os.path.join(out_dir, "model.safetensors"))  # a reader never sees half a file
        AutoConfig.from_pretrained(self.spec.model_path).save_pretrained(out_dir)
        return sum(t.numel() * t.element_size() for t in tensors.values())

    def connect_weight_broadcast(self, backend: str, host: str, port: int, world_size: int) -> None:
        """Rank 0 joins a process group of its own with the engines (see ``weight_sync``)."""
        if self.rank == 0:
            from skygym_train.weight_sync import BroadcastGroup

            self._broadcast_group = BroadcastGroup(backend, host, port, 0, world_size)

    def close_weight_broadcast(self) -> None:
        """Rank 0 leaves that group, and its store stops listening, now rather than when the worker is collected."""
        group = getattr(self, "_broadcast_group", None)
        if group is not None:
            group.close()
            self._broadcast_group = None

    def broadcast_weights(self, dtype: Optional[str] = None) -> int:
        """Every rank joins the unsharding; rank 0 broadcasts the full weights in buckets, floating tensors cast to
        ``dtype`` (the engine's). Returns bytes sent."""
        on_cpu = self.rank != 0 or self._broadcast_group.device.type == "cpu"
        state = self.full_state_dict(cpu_offload=on_cpu)  # NCCL sends from the GPU: no round trip through the host
        if self.rank != 0:
            return 0
        from skygym_train.weight_sync import send_state_dict

        return send_state_dict(self._broadcast_group, state, getattr(torch, dtype) if dtype else None)

    # ------------------------------------------------------------------ weights shared with an engine (no copy)
    def _unshareable_reason(self, dtype: Optional[str]) -> Optional[str]:
        if self.sharded:
            return "the policy's parameters are FSDP shards"
        if self.spec.lora is not None and self.spec.lora.rank > 0:
            return "LoRA: the engine needs the merged weights"
        dtypes = {p.dtype for p in self.model.parameters()}
        if dtype is not None and dtypes != {getattr(torch, dtype)}:
            return f"the engine runs in {dtype}, the policy's weights are {', '.join(sorted(map(str, dtypes)))}"
        if len(dtypes) != 1:
            return "the policy's parameters have several dtypes"
        return None

    def shareable_parameters(self) -> tuple:
        """``({name: tensor}, None)``: the live parameter tensors, for an engine in this process to read in place
        (the optimizer updates them in place); or ``(None, reason)``."""
        why = self._unshareable_reason(None)
        if why is not None:
            return None, why
        return {name: p.data for name, p in self.model.named_parameters()}, None

    def borrowing_refusal(self) -> Optional[str]:
        """Why this worker cannot compute with an engine's weights (``borrow_weights``), or None."""
        why = self._unshareable_reason(None)
        if why is None and self.spec.role != "policy":
            why = f"the {self.spec.role}'s weights do not reach an engine"
        if why is None and self._autocast_dtype() is None:
            dtype = next(self.model.parameters()).dtype
            why = f"the policy computes in its parameters' dtype ({str(dtype).replace('torch.', '')}), not autocast's"
        if why is None and torch.nn.functional.linear is not torch._C._nn.linear:
            # a replacement that keeps its weight as given would keep the engine's bf16 copy in the forward pass
            # and the fp32 parameter in a layer that gradient checkpointing recomputes
            why = ("torch.nn.functional.linear was replaced in this process (DeepSpeed ZeRO-3 does so for good once "
                   "it has run)")
        return why

    def borrow_weights(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Take an engine's own weights (``HFEngine.lend_weights``: a tensor per parameter name, in autocast's
        dtype, on this device) as this policy's compute copy: they are written now and after every optimizer
        step, and the forward passes' linear layers read them instead of autocast's casts of the parameters
        (``borrowed_weights``). ``ValueError`` says why not; nothing changes then."""
        why = self.borrowing_refusal()
        if why is not None:
            raise ValueError(why)
        borrowed = BorrowedWeights.check(self.model, tensors, self._autocast_dtype())
        borrowed.write()
        self._borrowed = borrowed

    def write_borrowed_weights(self) -> bool:
        """Write the parameters into the borrowed engine weights (done after each optimizer step anyway);
        False when nothing is borrowed."""
        if not self._still_borrowed():
            return False
        self._borrowed.write()
        return True

    def node_id(self) -> Optional[str]:
        try:
            import ray

            return ray.get_runtime_context().get_node_id()
        except Exception:  # not in Ray
            return None

    def share_parameters_in_file(self, path: str, dtype: Optional[str] = None) -> tuple:
        """Move the parameters into one shared-memory file at ``path`` (same values, same Parameter objects), for an
        engine in another process on this node to map. Returns ``(layout, None)`` or ``(None, reason)``."""
        why = self._unshareable_reason(dtype)
        if why is None and self.device.type != "cpu":
            why = "the policy is on a GPU (a shared-memory file holds host pages)"
        if why is not None:
            return None, why
        from skygym_train.weight_sync import move_parameters_to_shared_file

        info = move_parameters_to_shared_file(list(self.model.named_parameters()), path)
        self._shared_weights = info.pop("buffer")
        return info, None

    def get_rng_state(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state()
        return state

    def set_rng_state(self, state: Dict[str, Any]) -> None:
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda"])

    def ping(self) -> int:
        return self.rank

    def shutdown(self) -> None:
        """Close the process group this worker opened. One it found open is left alone: another worker of this
        process (the policy's, for the reference) closes it, or it is not the trainer's (an in-process vLLM engine
        opens one, and its later engines still use it)."""
        import torch.distributed as dist

        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_process_group = False


def _as_umask_allows(folder: str) -> None:
    """transformers writes the weights through a private temporary file (mode 0600) and renames it: an export
    that another user serves (a vLLM server, a colleague) gets the modes the process's umask allows, as the
    folder's other files have."""
    umask = 0o022
    try:
        with open("/proc/self/status") as status:  # reading it, unlike os.umask, changes nothing for other threads
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        pass  # not Linux: the common default
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False):
            os.chmod(entry.path, 0o666 & ~umask)
