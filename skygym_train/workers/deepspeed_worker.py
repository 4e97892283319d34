"""DeepSpeed ZeRO training workers (``trainer.strategy=deepspeed``).

The same worker as ``fsdp_worker.TrainingWorker`` (roles, forward passes, losses, micro-batches, weight export),
with the model wrapped in a ``deepspeed.DeepSpeedEngine`` instead of FSDP2: ZeRO stage 1, 2 or 3 partitions the
optimizer state, the gradients and (stage 3) the parameters across the role's ranks. It runs on CUDA (NCCL) and
on CPU with DeepSpeed's CPU accelerator over gloo, so it is tested on machines without GPUs too.

What the trainer owns and DeepSpeed must not set on its own (``config.deepspeed.OWNED_KEYS``): batch sizes and accumulation (the
worker plans its micro-batches and marks the accumulation boundary itself), the optimizer and its schedule (built
from ``trainer.<role>.optimizer_config`` as for FSDP2) and gradient clipping (``max_grad_norm``). Everything
else in ``trainer.<role>.deepspeed_config`` (``zero_optimization``, precision sections, ...) goes to DeepSpeed
as given; null means ZeRO-3 with DeepSpeed's defaults, as SkyRL-train's ``deepspeed_config/train.yaml``.

Checkpoints are DeepSpeed's own (``engine.save_checkpoint``), read back only with ``torch.load(weights_only=True)``
plus the few DeepSpeed classes its files name (``safe_checkpoint_engine``); resume with the number of ranks that
saved. DeepSpeed's CPU accelerator JIT-compiles a small shared-memory kernel the first time a process group
starts (about two minutes on two cores; cached under ``~/.cache/torch_extensions``).
"""

from __future__ import annotations

import copy
import math
import os
from typing import Any, Dict, List, Optional

import torch

from skygym_train.checkpoint import DEEPSPEED_TAG as CHECKPOINT_TAG
from skygym_train.workers.fsdp_worker import TrainingWorker


def engine_config(spec: Any, cuda: bool) -> Dict[str, Any]:
    """The dict given to ``deepspeed.initialize`` for ``spec``'s role: the user's sections plus the keys the trainer
    owns. ``disable_trace_cache`` (a SkyRL-train key, not DeepSpeed's) turns ZeRO-3's prefetching off."""
    config = copy.deepcopy(spec.deepspeed_config) if spec.deepspeed_config else {}
    zero = config.setdefault("zero_optimization", {})
    zero.setdefault("stage", 3)
    if config.pop("disable_trace_cache", False):
        zero.update(stage3_prefetch_bucket_size=0, stage3_max_live_parameters=0, stage3_max_reuse_distance=0)
    micro = spec.micro_forward_batch_size if spec.role == "ref" else spec.micro_train_batch_size
    config["train_micro_batch_size_per_gpu"] = max(1, int(micro))
    # the worker marks the accumulation boundary itself: its micro-batch count varies with the token budget
    config["gradient_accumulation_steps"] = 1
    if spec.optimizer is not None:
        config["gradient_clipping"] = float(spec.optimizer.max_grad_norm)
    config.setdefault("steps_per_print", 2**31 - 1)  # the trainer logs its own metrics
    precision = {"bf16", "fp16", "torch_autocast"} & set(config)
    if cuda and not precision and spec.mixed_precision is not None and spec.bf16 is not False:
        # as FSDP2's mixed precision on GPU (fsdp_config.mixed_precision.param_dtype); on CPU, trainer.bf16 autocasts
        section = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16"}.get(spec.mixed_precision.param_dtype)
        if section:
            config[section] = {"enabled": True}
    return config


GATHER_BYTES = 256 << 20
"""About how many bytes of ZeRO-3 partitioned parameters ``full_state_dict`` gathers at once."""


def _groups_by_bytes(tensors: List[torch.Tensor], limit: int) -> List[List[torch.Tensor]]:
    """Consecutive runs of ``tensors`` whose full sizes (``ds_numel`` for a ZeRO-3 partition) add up to at
    most ``limit`` bytes each (a larger tensor goes alone)."""
    groups: List[List[torch.Tensor]] = []
    used = limit
    for tensor in tensors:
        size = int(getattr(tensor, "ds_numel", tensor.numel())) * tensor.element_size()
        if used + size > limit:
            groups.append([])
            used = 0
        groups[-1].append(tensor)
        used += size
    return groups


class DeepSpeedWorker(TrainingWorker):
    """A ``TrainingWorker`` whose model is a DeepSpeed ZeRO engine (``self.model``; the HF module is
    ``self.model.module``)."""

    skips_rows_without_advantage = False  # the engine counts its own micro-steps and holds the gradients

    def init_process_group(self) -> None:
        import deepspeed
        import torch.distributed as dist

        # DeepSpeed needs a process group even for one rank
        if self._dist_init is None:
            from skygym_train.weight_sync import free_port

            self._dist_init = f"tcp://127.0.0.1:{free_port()}"
        os.environ.setdefault("LOCAL_RANK", "0")  # one device per worker (Ray sets CUDA_VISIBLE_DEVICES)
        self._owns_process_group = not dist.is_initialized()  # else DeepSpeed takes the group it finds
        deepspeed.init_distributed(
            dist_backend="nccl" if self.device.type == "cuda" else "gloo",
            auto_mpi_discovery=False,
            init_method=self._dist_init,
            rank=self.rank,
            world_size=self.world_size,
            verbose=False,
        )

    def _shards_on_cuda(self) -> bool:
        return False  # deepspeed.initialize places the module on the device itself

    def _loads_from_rank0(self) -> bool:
        return False  # every rank loads the weights; ZeRO partitions them in deepspeed.initialize

    def _wrap(self, model: torch.nn.Module) -> None:
        import deepspeed

        config = engine_config(self.spec, cuda=self.device.type == "cuda")
        if self.spec.role == "ref":
            engine, *_ = deepspeed.initialize(model=model, config=config)
        else:
            optimizer, scheduler = self._new_optimizer(model)
            engine, optimizer, _, scheduler = deepspeed.initialize(
                model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config
            )
            self.optimizer, self.scheduler = optimizer, scheduler
        engine.checkpoint_engine = safe_checkpoint_engine()
        self.model = engine
        self.sharded = True

    def _attention_dtype(self) -> torch.dtype:
        # deepspeed.initialize casts the module to its bf16/fp16 section's dtype itself (a torch_autocast section
        # leaves the parameters in fp32 and casts the mask per layer, as SDPA casts a boolean one)
        return self._autocast_dtype() or next(self.model.parameters()).dtype

    # ------------------------------------------------------------------ training
    def _before_backward(self, last: bool) -> None:
        self.model.set_gradient_accumulation_boundary(last)

    def _backward(self, loss: torch.Tensor) -> None:
        self.model.backward(loss)

    def _optimizer_step(self) -> float:
        """DeepSpeed clips (``gradient_clipping`` = ``max_grad_norm``), steps the optimizer and the schedule."""
        self.model.step()
        norm = self.model.get_global_grad_norm()
        return float(norm) if norm is not None else math.nan

    # ------------------------------------------------------------------ weights and state
    def full_state_dict(self, cpu_offload: bool = True) -> Dict[str, torch.Tensor]:
        """Unsharded weights on rank 0 (other ranks get an empty dict), LoRA merged in. Under ZeRO-3 every rank
        joins the gathering of one parameter at a time, so only one full parameter exists at once."""
        import deepspeed

        module = self.model.module
        stage3 = self.model.zero_optimization_stage() == 3
        gathered: Dict[int, torch.Tensor] = {}  # rank 0's copies, by parameter
        named = list(module.state_dict(keep_vars=True).items())
        # tied weights: one gathering, on every rank alike (or the collectives pair wrongly); parameters are
        # gathered in groups of about GATHER_BYTES (one collective each, not one per parameter)
        unique = list({id(tensor): tensor for _, tensor in named}.values())
        for group in _groups_by_bytes(unique, GATHER_BYTES):
            partitioned = [t for t in group if hasattr(t, "ds_id")]
            with deepspeed.zero.GatheredParameters(partitioned, enabled=stage3 and bool(partitioned)):
                if self.rank == 0:
                    for tensor in group:
                        value = tensor.detach()
                        # one copy: to the host, or on the device (the gathered buffer is freed on exit)
                        gathered[id(tensor)] = value.to("cpu", copy=True) if cpu_offload else value.clone()
        if self.rank != 0:
            return {}
        state: Dict[str, torch.Tensor] = {name: gathered[id(tensor)] for name, tensor in named}
        if self.spec.lora is not None and self.spec.lora.rank > 0:
            state = self._merge_lora(state)
        return state

    def shutdown(self) -> None:
        """DeepSpeed's own teardown: it also drops the groups it cached, so a later worker in this process starts
        clean."""
        import deepspeed.comm
        import torch.distributed as dist

        if self._owns_process_group and dist.is_initialized():
            deepspeed.comm.destroy_process_group()
        self._owns_process_group = False

    def _unshareable_reason(self, dtype: Optional[str]) -> Optional[str]:
        return "DeepSpeed holds the parameters (ZeRO partitions and its own optimizer copies)"

    def save_training_state(self, folder: str) -> None:
        """Every rank writes its ZeRO partitions with ``engine.save_checkpoint`` into ``folder/deepspeed``."""
        self.model.save_checkpoint(
            folder, tag=CHECKPOINT_TAG, client_state={"global_step": self.global_step}, save_latest=False
        )

    def load_training_state(self, folder: str) -> None:
        path, client = self.model.load_checkpoint(
            folder,
            tag=CHECKPOINT_TAG,
            load_module_strict=True,
            load_optimizer_states=self.optimizer is not None,
            load_lr_scheduler_states=self.scheduler is not None,
        )
        if path is None:
            raise FileNotFoundError(f"{folder} has no DeepSpeed checkpoint ({CHECKPOINT_TAG}/)")
        self.global_step = int((client or {}).get("global_step", 0))


def _deepspeed_pickled_classes() -> list:
    """The classes DeepSpeed's checkpoint files name besides tensors and plain data."""
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, ZeroStageEnum, fragment_address]


def safe_checkpoint_engine() -> Any:
    """DeepSpeed's torch checkpoint engine with safe loads: ``torch.load(weights_only=True)`` allowing only the
    classes in ``_deepspeed_pickled_classes`` (DeepSpeed's own engine unpickles anything a file asks for)."""
    import pickle

    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    from skygym_train.checkpoint import UnsafeCheckpointError, _refusal_reason

    class SafeCheckpointEngine(TorchCheckpointEngine):
        def load(self, path: str, map_location: Any = None) -> Any:
            try:
                with torch.serialization.safe_globals(_deepspeed_pickled_classes()):
                    return torch.load(path, map_location=map_location, weights_only=True)
            except pickle.UnpicklingError as exc:
                raise UnsafeCheckpointError(
                    f"refusing to load {path}: it holds objects other than tensors, plain data and DeepSpeed's "
                    f"own checkpoint classes, and loading them could run code from the file. Only load checkpoints "
                    f"you trust. ({_refusal_reason(exc)})"
                ) from exc

    return SafeCheckpointEngine()
