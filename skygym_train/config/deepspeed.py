"""What ``trainer.<role>.deepspeed_config`` may hold (read by validation and by the DeepSpeed worker)."""

from __future__ import annotations

from typing import Any, Dict, Optional

OWNED_KEYS = {
    "train_batch_size": "the trainer splits trainer.policy_mini_batch_size / critic_mini_batch_size across ranks",
    "train_micro_batch_size_per_gpu": "set trainer.micro_train_batch_size_per_gpu",
    "gradient_accumulation_steps": "the worker accumulates over its micro-batches (trainer.micro_train_batch_size_per_gpu)",
    "optimizer": "set trainer.<role>.optimizer_config (AdamW, as with FSDP2)",
    "scheduler": "set trainer.<role>.optimizer_config.scheduler",
    "gradient_clipping": "set trainer.<role>.optimizer_config.max_grad_norm",
}
"""``deepspeed_config`` keys the trainer sets itself, each with what to set instead (validation refuses them)."""

ZERO_STAGES = (1, 2, 3)


def zero_stage(config: Optional[Dict[str, Any]]) -> int:
    """The ZeRO stage a role's ``deepspeed_config`` asks for (3 when it says nothing)."""
    zero = (config or {}).get("zero_optimization") or {}
    return int(zero.get("stage", 3))


def offload_devices(config: Optional[Dict[str, Any]]) -> Dict[str, str]:
    """``{"offload_param": device, "offload_optimizer": device}`` for the offloads the config turns on."""
    zero = (config or {}).get("zero_optimization") or {}
    found = {}
    for key in ("offload_param", "offload_optimizer"):
        device = str(((zero.get(key) or {}).get("device")) or "none").lower()
        if device != "none":
            found[key] = device
    return found
