"""Helpers shared by the engine implementations: sampling defaults and output assembly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from skygym_adapters.types import InferenceEngineOutput, SamplingParams

DEFAULT_MAX_GENERATE_LENGTH = 256


class EngineError(RuntimeError):
    """An inference engine could not serve a request (bad parameters, server error, dead worker)."""


def unreachable_hint(exc: BaseException, server: str, url: str) -> str:
    """``"; check that {server} is running at {url}"`` for an error that says nothing answered there (refused,
    reset, no route), else ``""`` (a timeout reached a server that was slow)."""
    if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
        return f"; check that {server} is running at {url}"
    return ""


async def served_model_name(session: Any, root_url: str, how_to_name: str) -> str:
    """The first model an OpenAI-compatible server at ``root_url`` lists (``GET /v1/models``), through the aiohttp
    ``session``; an :class:`EngineError` says why not: nothing answers there (and that ``how_to_name`` names the
    model instead), or what the answer lacked."""
    try:
        async with session.get(root_url + "/v1/models") as response:
            data = await response.json(content_type=None)
        model = data["data"][0]["id"]
        if not isinstance(model, str) or not model:
            raise ValueError(f"data[0].id is {model!r}, not a model name")
        return model
    except Exception as exc:
        unreachable = unreachable_hint(exc, "an OpenAI-compatible server", root_url)
        raise EngineError(f"could not ask {root_url}/v1/models for the model name ({type(exc).__name__}: {exc})"
                          + (f"{unreachable}, or name" if unreachable else "; name") + f" the model: {how_to_name}"
                          ) from exc


async def check_reachable(session: Any, root_url: str, timeout_s: float, path: str = "/v1/models",
                          server: str = "an OpenAI-compatible server") -> None:
    """Raise an :class:`EngineError` when nothing answers at ``root_url`` (refused, no route, no such host), so that
    a command can say so once, before its rollouts, instead of each of them failing on it: a ``GET path`` through
    the aiohttp ``session``, where any HTTP answer counts (a server without that route, or one that wants a key,
    answered). ``server`` names what should be running there, in the hint."""
    import aiohttp

    try:
        async with session.get(root_url + path, timeout=aiohttp.ClientTimeout(total=timeout_s)):
            pass
    except OSError as exc:
        hint = unreachable_hint(exc, server, root_url)
        if hint:
            raise EngineError(f"nothing answers at {root_url} ({type(exc).__name__}: {exc}){hint}") from exc


@dataclass(frozen=True)
class ResolvedSampling:
    """Sampling parameters with defaults filled in and validated; hashable so requests can be grouped."""

    max_tokens: int = DEFAULT_MAX_GENERATE_LENGTH
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: Tuple[str, ...] = ()
    stop_token_ids: Tuple[int, ...] = ()
    logprobs: bool = False
    seed: Optional[int] = None

    def without_seed(self) -> "ResolvedSampling":
        return ResolvedSampling(**{**self.__dict__, "seed": None})

    def optional_fields(self) -> Dict[str, Any]:
        """``min_p``, ``stop``, ``stop_token_ids`` and ``seed`` as vLLM-style request fields, only those that are set."""
        out: Dict[str, Any] = {}
        if self.min_p > 0:
            out["min_p"] = self.min_p
        if self.stop:
            out["stop"] = list(self.stop)
        if self.stop_token_ids:
            out["stop_token_ids"] = list(self.stop_token_ids)
        if self.seed is not None:
            out["seed"] = self.seed
        return out


_KNOWN_KEYS = set(SamplingParams.__annotations__) | {"max_tokens", "max_new_tokens"}


def resolve_sampling(params: Optional[Dict[str, Any]]) -> ResolvedSampling:
    """Validate a :class:`~skygym_adapters.types.SamplingParams` dict and fill in defaults.

    Accepts ``max_tokens``/``max_new_tokens`` as aliases of ``max_generate_length``. ``logprobs`` may be a
    bool or a vLLM-style integer (any value that is not None/False asks for the sampled token's logprob).
    Unknown keys raise, naming the key, rather than being silently ignored.
    """
    params = dict(params or {})
    unknown = sorted(set(params) - _KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown sampling parameter(s) {unknown}; known: {sorted(_KNOWN_KEYS)}")
    max_tokens = params.get("max_generate_length", params.get("max_tokens", params.get("max_new_tokens")))
    max_tokens = DEFAULT_MAX_GENERATE_LENGTH if max_tokens is None else int(max_tokens)
    if max_tokens < 1:
        raise ValueError(f"max_generate_length must be >= 1, got {max_tokens}")
    temperature = float(params.get("temperature", 1.0))
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    top_p = float(params.get("top_p", 1.0))
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    stop = params.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if any(not isinstance(s, str) or not s for s in stop):
        raise ValueError(f"stop must be a list of non-empty strings, got {stop!r}")
    logprobs = params.get("logprobs")
    seed = params.get("seed")
    return ResolvedSampling(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=int(params.get("top_k", -1) if params.get("top_k") is not None else -1),
        min_p=float(params.get("min_p", 0.0) or 0.0),
        stop=tuple(stop),
        stop_token_ids=tuple(int(t) for t in (params.get("stop_token_ids") or ())),
        logprobs=logprobs is not None and logprobs is not False,
        seed=None if seed is None else int(seed),
    )


@dataclass
class SequenceResult:
    """One generated sequence."""

    token_ids: List[int]
    text: str
    stop_reason: str  # "stop" | "length" | "abort"
    logprobs: Optional[List[float]] = None
    extra: Dict[str, Any] = field(default_factory=dict)


def assemble_output(results: List[SequenceResult], want_logprobs: bool) -> InferenceEngineOutput:
    """Per-sequence results -> the batched :class:`~skygym_adapters.types.InferenceEngineOutput`."""
    output: InferenceEngineOutput = {
        "response_ids": [r.token_ids for r in results],
        "responses": [r.text for r in results],
        "stop_reasons": [r.stop_reason for r in results],
        "response_logprobs": None,
    }
    if want_logprobs:
        if any(r.logprobs is None for r in results):
            raise EngineError("the engine was asked for logprobs but returned none for some sequences")
        output["response_logprobs"] = [list(r.logprobs or []) for r in results]
    return output


def validate_prompts(prompt_token_ids: Any) -> List[List[int]]:
    """Check that prompts are a list of non-empty lists of ints (token-in), naming the bad entry."""
    if not isinstance(prompt_token_ids, (list, tuple)):
        raise TypeError(f"prompt_token_ids must be a list of token-id lists, got {type(prompt_token_ids).__name__}")
    prompts: List[List[int]] = []
    for i, ids in enumerate(prompt_token_ids):
        if not isinstance(ids, (list, tuple)) or not ids:
            raise ValueError(f"prompt_token_ids[{i}] must be a non-empty list of token ids, got {ids!r:.80}")
        if not all(isinstance(t, int) and t >= 0 for t in ids):
            raise ValueError(f"prompt_token_ids[{i}] holds something other than non-negative ints")
        prompts.append(list(ids))
    return prompts


class BaseInferenceEngine:
    """Defaults of the :class:`~skygym_adapters.types.InferenceEngine` interface: engines subclass it and write
    ``generate`` (and ``update_weights`` where weights can change)."""

    needs_messages: bool = False

    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[Dict[str, Any]] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput:
        raise NotImplementedError(f"{type(self).__name__} must implement generate()")

    def expect_sessions(self, count: int) -> None:
        """``count`` sessions (trajectories) are starting, each ending with :meth:`finish_session`; an engine that
        batches requests may wait for theirs instead of a time window. Nothing to do by default."""

    def finish_session(self, session_id: str) -> None:
        """One engine keeps no per-session state."""

    def last_turn(self, session_id: str) -> None:
        """The session's next request is its last (its turn limit): an engine that keeps per-session state for later
        requests need not keep it. Optional: callers call it where an engine has it."""

    async def update_weights(self, named_tensors: Any) -> None:
        raise EngineError(f"{type(self).__name__} cannot update its weights")

    async def sleep(self) -> None:
        """Nothing to offload by default."""

    async def wake_up(self) -> None:
        """Nothing to reload by default."""

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release by default."""
