"""veRL's server-manager interface on top of any inference engine of this project.

veRL's agent loops talk to ``server_manager.generate(request_id, *, prompt_ids, sampling_params, ...)``
and expect a ``TokenOutput`` (``token_ids``, ``log_probs``, ``stop_reason``). :class:`EngineServerManager`
answers that call with any :class:`skygym_adapters.types.InferenceEngine` (a transformers model, a vLLM server,
a scripted engine), so veRL's own agent-loop worker can run on a machine without Ray actors or vLLM,
and the conformance kit can push scripted actions through veRL's real code.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from skygym_adapters.types import InferenceEngine, SamplingParams

# veRL's stop reasons: "completed" (EOS or stop), "length" is reported by veRL servers as "completed" too,
# "aborted" when the request was cancelled.
_STOP_REASONS = {"stop": "completed", "length": "completed", "abort": "aborted"}


def verl_to_engine_sampling(sampling_params: Dict[str, Any], default_max_tokens: int) -> SamplingParams:
    """veRL's sampling dict (vLLM names, ``top_k=-1`` for off) as this project's ``SamplingParams``."""
    params: SamplingParams = {}
    max_tokens = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
    params["max_generate_length"] = int(max_tokens) if max_tokens is not None else int(default_max_tokens)
    if sampling_params.get("temperature") is not None:
        params["temperature"] = float(sampling_params["temperature"])
    if sampling_params.get("top_p") is not None:
        params["top_p"] = float(sampling_params["top_p"])
    top_k = sampling_params.get("top_k")
    if top_k is not None and int(top_k) > 0:
        params["top_k"] = int(top_k)
    if sampling_params.get("logprobs"):
        params["logprobs"] = True
    if sampling_params.get("stop"):
        params["stop"] = list(sampling_params["stop"])
    if sampling_params.get("stop_token_ids"):
        params["stop_token_ids"] = [int(t) for t in sampling_params["stop_token_ids"]]  # type: ignore[typeddict-unknown-key]
    if sampling_params.get("seed") is not None:
        params["seed"] = int(sampling_params["seed"])
    return params


class EngineServerManager:
    """Implements veRL's ``LLMServerClient.generate`` with one of this project's inference engines.

    ``default_max_tokens`` bounds a turn when veRL's sampling params give no ``max_tokens``
    (veRL's own client derives it from ``rollout.response_length``). Requests are independent: there is
    no sticky routing to do with a single engine.
    """

    def __init__(self, engine: InferenceEngine, default_max_tokens: int = 256) -> None:
        self.engine = engine
        self.default_max_tokens = default_max_tokens
        self.tokenizer: Any = None  # veRL sets this when rollout tracing decodes tokens
        self.calls = 0

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: Any,
        sampling_params: Dict[str, Any],
        image_data: Optional[Any] = None,
        video_data: Optional[Any] = None,
        audio_data: Optional[Any] = None,
        **kwargs: Any,
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        if image_data or video_data or audio_data:
            raise ValueError(
                f"request {request_id}: EngineServerManager serves text models only; got multimodal inputs"
            )
        prompt = [int(token) for token in (prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else prompt_ids)]
        params = verl_to_engine_sampling(sampling_params, self.default_max_tokens)
        self.calls += 1
        output = await self.engine.generate([prompt], params)
        token_ids = list(output["response_ids"][0])
        logprobs_batch = output.get("response_logprobs")
        log_probs = list(logprobs_batch[0]) if logprobs_batch else None
        stop_reasons = output.get("stop_reasons") or ["stop"]
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason=_STOP_REASONS.get(stop_reasons[0], stop_reasons[0]),
            num_preempted=0,
        )


__all__ = ["EngineServerManager", "verl_to_engine_sampling"]
