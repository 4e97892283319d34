"""The trainer's side of generation: engines, the rollout generator, and weight sync to the engines.

The trainer only needs something with ``async generate(GeneratorInput) -> GeneratorOutput`` (the rollout
loop of ``skygym_adapters.rollout``) and engines it can put to sleep, wake and update.
"""

from __future__ import annotations

import sys
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


def hf_engine_dtype(cfg: Any) -> str:
    """The dtype the HF engine decodes in: ``generator.model_dtype``, where ``auto`` is bfloat16 where the
    hardware computes it (GPUs; CPUs with AVX512-BF16 or AMX), else float32."""
    dtype = cfg.generator.model_dtype
    if dtype != "auto":
        return str(dtype)
    from skygym_adapters.models import computes_bf16_natively

    return "bfloat16" if computes_bf16_natively() else "float32"


def create_engines(cfg: Any, model_path: str, tokenizer: Any, placement_group: Any = None) -> List[Any]:
    """Inference engines for ``generator.backend``: hf and vllm (in this process, or Ray actors with
    ``generator.run_engines_locally=true`` and Ray on), remote and sglang (servers). ``placement_group``: the
    policy's, which colocated engine actors share."""
    g = cfg.generator
    from skygym_train.config.validation import engines_are_ray_actors

    if engines_are_ray_actors(cfg):
        from skygym_train.engine_actors import create_engine_actors

        return create_engine_actors(cfg, model_path, tokenizer, create_engines, placement_group)
    if g.backend == "hf":
        from skygym_adapters.engines.hf import HFEngine

        batch = cfg.trainer.train_batch_size * g.n_samples_per_prompt
        # validation allows one HF engine: more would be copies of the model in this process
        return [HFEngine(model_path, tokenizer, dtype=hf_engine_dtype(cfg), max_batch_size=max(64, batch))]
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
        for key in ("enable_prefix_caching", "enable_chunked_prefill", "max_num_batched_tokens", "max_num_seqs"):
            if getattr(g, key) is not None:
                kwargs[key] = getattr(g, key)
        if engines_sleep_while_training(cfg):
            kwargs["enable_sleep_mode"] = True  # the trainer puts it to sleep while the policy trains
        kwargs.update(dict(g.engine_init_kwargs))
        return [VLLMEngine(model_path, seed=cfg.trainer.seed + i, **kwargs) for i in range(g.num_inference_engines)]
    if g.backend == "remote":
        from skygym_adapters.engines.remote import RemoteEngine

        return [RemoteEngine(url, tokenizer) for url in g.remote_inference_engine_urls]
    if g.backend == "sglang":
        from skygym_adapters.engines.sglang import SGLangEngine

        return [SGLangEngine(url, tokenizer, model_path=model_path) for url in g.remote_inference_engine_urls]
    raise ValueError(f"unknown generator.backend {g.backend!r}")


def engines_sleep_while_training(cfg: Any) -> bool:
    """Whether the trainer puts the engines to sleep while the policy trains
    (``trainer.placement.colocate_all``, on CUDA): vLLM engines (sleep mode gives back their KV cache and
    weights) and engine actors, which hold a GPU share in processes of their own. Not an HF engine in the
    trainer's process: moving its weights (and, on CUDA, the static KV cache its compiled decode step keeps for
    the next step) to the host and back every step would cost more than the memory is worth (while it shares
    the policy's weights there is nothing to give back at all)."""
    from skygym_train.config.validation import cuda_available, engines_are_ray_actors

    t, g = cfg.trainer, cfg.generator
    if not t.placement.colocate_all or t.async_training.enabled or not cuda_available():
        return False
    return g.backend == "vllm" or engines_are_ray_actors(cfg)


def engine_memory_metrics(engine: Any) -> Dict[str, float]:
    """What the engines in this process hold on their device between generations, for the step's metrics:
    ``memory/engine_weights_gib`` (their own weights; 0 while they read the policy's) and
    ``memory/engine_kv_cache_gib`` (KV caches kept for compiled decoding), from the engines that report it
    (``device_memory_bytes``: the HF engine); empty when none does."""
    from skygym_adapters.engines.client import engines_behind

    totals: Dict[str, int] = {}
    for each in engines_behind(engine):
        held = getattr(each, "device_memory_bytes", None)
        for key, value in (held() if callable(held) else {}).items():
            totals[key] = totals.get(key, 0) + int(value)
    return {f"memory/engine_{key}_gib": value / 2**30 for key, value in totals.items()}


def build_generator(cfg: Any, engine: Any, tokenizer: Any) -> Generator:
    """The rollout loop of ``skygym_adapters.rollout`` configured from the trainer config (or, with
    ``generator.task`` set, the agent layer's runner: see ``skygym_train.agent_generator``)."""
    if cfg.generator.task:
        from skygym_train.agent_generator import build_agent_generator

        return build_agent_generator(cfg, engine, tokenizer)
    from skygym_adapters.rollout import RolloutConfig, RolloutGenerator  # type: ignore[attr-defined]

    g = cfg.generator
    rollout_cfg = RolloutConfig(
        sampling_params=sampling_params_dict(g.sampling_params),  # type: ignore[arg-type]
        max_turns=g.max_turns,
        max_input_length=g.max_input_length,
        use_conversation_multi_turn=g.use_conversation_multi_turn,
        append_eos_token_after_stop_str_in_multi_turn=g.append_eos_token_after_stop_str_in_multi_turn,
        batched=g.batched,
        apply_overlong_filtering=g.apply_overlong_filtering,
        zero_reward_on_non_stop=g.zero_reward_on_non_stop,
        max_env_workers=int(cfg.environment.skyrl_gym.get("max_env_workers", 32)),
        ray_env_workers=int(cfg.environment.ray_env_workers.num_workers),
        ray_env_worker_options=ray_env_worker_options(cfg),
        env_configs=env_configs(cfg),
        chat_template=chat_template(cfg),
        chat_template_kwargs=dict(g.chat_template_kwargs),
    )
    if rollout_cfg.ray_env_workers > 0:  # env workers are Ray actors: join (or start) Ray here, as the trainer does
        from skygym_train.ray_utils import init_ray

        init_ray()
    return RolloutGenerator(engine, tokenizer, rollout_cfg)


def ray_env_worker_options(cfg: Any) -> Dict[str, Any]:
    """``environment.ray_env_workers`` as the arguments of ``skygym_adapters.ray_envs.EnvWorkerPool``."""
    w = cfg.environment.ray_env_workers
    return {
        "num_cpus_per_worker": float(w.num_cpus_per_worker),
        "resources_per_worker": {str(k): float(v) for k, v in dict(w.resources_per_worker).items()},
        "scheduling_strategy": str(w.scheduling_strategy),
        "max_concurrency": int(w.max_concurrency),
        "imports": [str(m) for m in w.imports],
    }


def env_configs(cfg: Any) -> Dict[str, Any]:
    """``env_config`` per env id, as SkyRL-train passes them: each ``environment.skyrl_gym.<id>`` section, with
    ``environment.env_config`` over the section of ``environment.env_class``."""
    configs: Dict[str, Any] = {}
    for env_id, section in cfg.environment.skyrl_gym.items():
        if isinstance(section, dict):
            values = {key: value for key, value in section.items() if value is not None}  # null: the env's default
            if values:
                configs[env_id] = values
    own = dict(cfg.environment.env_config)
    if own:
        configs[cfg.environment.env_class] = {**configs.get(cfg.environment.env_class, {}), **own}
    return configs


def chat_template(cfg: Any) -> Any:
    """The Jinja text of ``generator.chat_template`` (source=file), or None for the tokenizer's own."""
    ct = cfg.generator.chat_template
    if ct.source == "file" and ct.name_or_path:
        from pathlib import Path

        return Path(ct.name_or_path).expanduser().read_text(encoding="utf-8")
    return None


class Timer:
    """Adds the seconds its block took to ``sink[key]``. Where this process uses a GPU it waits for the GPU's
    queued work at both ends, so each phase is charged for its own kernels (an optimizer step still running on
    the GPU would otherwise be counted in the phase after it)."""

    def __init__(self, sink: Dict[str, float], key: str):
        self.sink, self.key = sink, key

    def __enter__(self) -> "Timer":
        _wait_for_gpu()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        _wait_for_gpu()
        self.sink[self.key] = self.sink.get(self.key, 0.0) + time.perf_counter() - self.start


def _wait_for_gpu() -> None:
    torch = sys.modules.get("torch")  # a process that never imported torch has no GPU work to wait for
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
