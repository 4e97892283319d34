"""The trainer's side of generation: engines, the rollout generator, and weight sync to the engines.

The trainer only needs something with ``async generate(GeneratorInput) -> GeneratorOutput`` (the rollout
loop of ``skygym_adapters.rollout``) and engines it can put to sleep, wake and update.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Protocol

from skygym_adapters.types import GeneratorInput, GeneratorOutput


class Generator(Protocol):
    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput: ...


def sampling_params_dict(params: Any) -> Dict[str, Any]:
    """The config's sampling section as the ``SamplingParams`` dict engines take."""
    out: Dict[str, Any] = {
        "max_generate_length": int(params.max_generate_length),
        "temperature": float(params.temperature),
        "top_p": float(params.top_p),
        "logprobs": bool(params.logprobs),
    }
    if params.top_k and params.top_k > 0:
        out["top_k"] = int(params.top_k)
    if params.min_p:
        out["min_p"] = float(params.min_p)
    if params.stop:
        out["stop"] = list(params.stop)
    return out


def create_engines(cfg: Any, model_path: str, tokenizer: Any) -> List[Any]:
    """Inference engines for ``generator.backend``: hf and vllm (in this process), remote and sglang (servers)."""
    g = cfg.generator
    if g.backend == "hf":
        from skygym_adapters.engines.hf import HFEngine

        batch = cfg.trainer.train_batch_size * g.n_samples_per_prompt
        return [HFEngine(model_path, tokenizer, max_batch_size=max(64, batch)) for _ in range(g.num_inference_engines)]
    if g.backend == "vllm":
        # in this process, so weights arrive without pickling (in-process, or received from a broadcast)
        from skygym_adapters.engines.vllm_engine import VLLMEngine

        kwargs: Dict[str, Any] = {
            "tensor_parallel_size": g.inference_engine_tensor_parallel_size,
            "enforce_eager": g.enforce_eager,
        }
        if g.gpu_memory_utilization:
            kwargs["gpu_memory_utilization"] = g.gpu_memory_utilization
        if g.model_dtype != "auto":
            kwargs["dtype"] = g.model_dtype
        return [VLLMEngine(model_path, seed=cfg.trainer.seed + i, **kwargs) for i in range(g.num_inference_engines)]
    if g.backend == "remote":
        from skygym_adapters.engines.remote import RemoteEngine

        return [RemoteEngine(url, tokenizer) for url in g.remote_inference_engine_urls]
    if g.backend == "sglang":
        from skygym_adapters.engines.sglang import SGLangEngine

        return [SGLangEngine(url, tokenizer, model_path=model_path) for url in g.remote_inference_engine_urls]
    raise ValueError(f"unknown generator.backend {g.backend!r}")


def build_generator(cfg: Any, engine: Any, tokenizer: Any) -> Generator:
    """The rollout loop of ``skygym_adapters.rollout`` configured from the trainer config."""
    from skygym_adapters.rollout import RolloutConfig, RolloutGenerator  # type: ignore[attr-defined]

    g = cfg.generator
    rollout_cfg = RolloutConfig(
        sampling_params=sampling_params_dict(g.sampling_params),  # type: ignore[arg-type]
        max_turns=g.max_turns,
        max_input_length=g.max_input_length,
        batched=g.max_turns == 1,
        apply_overlong_filtering=g.apply_overlong_filtering,
        zero_reward_on_non_stop=g.zero_reward_on_non_stop,
        env_configs=_env_configs(cfg),
        chat_template_kwargs=dict(g.chat_template_kwargs),
    )
    return RolloutGenerator(engine, tokenizer, rollout_cfg)


def _env_configs(cfg: Any) -> Dict[str, Any]:
    config = dict(cfg.environment.env_config)
    return {cfg.environment.env_class: config} if config else {}


class Timer:
    def __init__(self, sink: Dict[str, float], key: str):
        self.sink, self.key = sink, key

    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sink[self.key] = self.sink.get(self.key, 0.0) + time.perf_counter() - self.start
