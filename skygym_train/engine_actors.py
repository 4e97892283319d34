"""Inference engines as Ray actors, placed in placement groups (work in progress)."""

from __future__ import annotations

from typing import Any


def engines_are_ray_actors(cfg: Any) -> bool:
    """True when the trainer starts its hf/vllm engines as Ray actors: ``generator.run_engines_locally=true`` (set
    explicitly, as SkyRL-train's configs do) with ``trainer.use_ray=true``."""
    g = cfg.generator
    return g.run_engines_locally is True and bool(cfg.trainer.use_ray) and g.backend in ("hf", "vllm")


def create_engine_actors(cfg: Any, model_path: str, tokenizer: Any, placement_group: Any = None) -> list:
    raise NotImplementedError("engine actors are not built yet")
