"""Inference engines behind one async protocol (:class:`skygym_adapters.types.InferenceEngine`).

=========  ==========================================================================================
``hf``      :class:`~skygym_adapters.engines.hf.HFEngine`: transformers, batched, logprobs, CPU or GPU
``vllm``    :class:`~skygym_adapters.engines.vllm_engine.VLLMEngine`: in-process vLLM, weight updates from a state dict
``remote``  :class:`~skygym_adapters.engines.remote.RemoteEngine`: any OpenAI-compatible server
``sglang``  :class:`~skygym_adapters.engines.sglang.SGLangEngine`: SGLang's native HTTP API
=========  ==========================================================================================

:class:`~skygym_adapters.engines.client.EngineClient` spreads requests over several engines with per-trajectory
affinity. Each engine module imports its heavy dependency only when an engine is built.
"""

from __future__ import annotations

from typing import Any

from skygym_adapters.engines.base import EngineError, ResolvedSampling, resolve_sampling
from skygym_adapters.engines.client import EngineClient

ENGINE_KINDS = ("hf", "vllm", "remote", "sglang")


def make_engine(kind: str, **kwargs: Any) -> Any:
    """Build an engine by kind: ``make_engine("hf", model="smollm2-135m")``,
    ``make_engine("remote", base_url=..., tokenizer=...)``. Keyword arguments go to the engine's constructor."""
    if kind == "hf":
        from skygym_adapters.engines.hf import HFEngine

        return HFEngine(**kwargs)
    if kind == "vllm":
        from skygym_adapters.engines.vllm_engine import VLLMEngine

        return VLLMEngine(**kwargs)
    if kind == "remote":
        from skygym_adapters.engines.remote import RemoteEngine

        return RemoteEngine(**kwargs)
    if kind == "sglang":
        from skygym_adapters.engines.sglang import SGLangEngine

        return SGLangEngine(**kwargs)
    raise ValueError(f"unknown engine kind {kind!r}; choose one of {ENGINE_KINDS}")


__all__ = ["ENGINE_KINDS", "EngineClient", "EngineError", "ResolvedSampling", "make_engine", "resolve_sampling"]
