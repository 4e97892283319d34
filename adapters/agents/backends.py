"""Where an agent's next message comes from.

``openai_server`` (alias ``openai``): any OpenAI-compatible chat server. Messages go out, an assistant message
(text and/or tool calls) comes back; the server applies its own chat template, so evaluation needs neither a
tokenizer nor transformers. ``backend_config``: ``base_url``, ``model`` (asked from ``/v1/models`` when left out),
``api_key`` (else ``OPENAI_API_KEY``), ``timeout`` (seconds per request), ``max_concurrency``. SkyAgent's
``api_url`` and ``model_name`` are read as ``base_url`` and ``model``.

``skyrl-train`` (alias ``skyrl_train``): the bundled trainer's inference engines, token in and token out (any
:class:`~skygym_adapters.types.InferenceEngine`: hf, vllm, remote, sglang, or a list of them), with the
policy's tokenizer. Trajectories are recorded by the rollout loop (:mod:`skygym_adapters.rollout`), so training
gets prompt and response ids, loss masks and logprobs exactly as the trainer's own generator records them.

``verl``: veRL's server manager (what veRL hands its agent loops; ``infer_engine=`` is that object, anything with
``async generate(request_id, *, prompt_ids, sampling_params)`` returning veRL's ``TokenOutput``), token in and token
out, with logprobs when veRL's ``calculate_log_probs`` asks for them. It is the ``skyrl-train`` backend with
:class:`VerlServerEngine` as its engine, so the rollout loop records ids, masks and logprobs the same way.
``backend_config``: ``response_length`` (the response tokens one trajectory may use, as veRL's
``rollout.response_length``; each turn's ``max_tokens`` is cut to what is left), ``extra_sampling_params`` (sent
with every request as they are, e.g. veRL's ``repetition_penalty``). The veRL agent loop
:mod:`skygym_adapters.verl.agent_runner_loop` fills both in.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from skygym_adapters.engines.base import (
    BaseInferenceEngine,
    EngineError,
    check_reachable,
    resolve_sampling,
    served_model_name,
)
from skygym_adapters.engines.http_sessions import LoopSessions

from skygym_adapters.agents.config import AgentConfigError

logger = logging.getLogger(__name__)


@dataclass
class ChatReply:
    """One assistant message (``{"role": "assistant", "content", "tool_calls"?}``) and why generation stopped."""

    message: Dict[str, Any]
    finish_reason: str  # "stop" | "length" | "tool_calls" | ...


class OpenAIChatBackend:
    """A client of ``POST {base_url}/v1/chat/completions`` (aiohttp; one session per event loop)."""

    needs_tokenizer = False
    token_level = False

    _ALIASES = {"api_url": "base_url", "model_name": "model"}
    _KEYS = ("base_url", "model", "api_key", "timeout", "max_concurrency")
    _IGNORED = ("model_max_len", "require_token_ids")  # SkyAgent's; the server's own limits apply here

    def __init__(
        self,
        base_url: str,
        model: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: float = 600.0,
        max_concurrency: int = 256,
        tokenizer: Any = None,
    ) -> None:
        import aiohttp  # noqa: F401  (a missing one fails here, where the CLI names the extra to install)

        if not base_url:
            raise AgentConfigError(
                "the openai_server backend needs generator.backend_config.base_url "
                "(e.g. http://127.0.0.1:8000)"
            )
        root = str(base_url).rstrip("/")
        self.root_url = root[: -len("/v1")] if root.endswith("/v1") else root
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = float(timeout)
        self.tokenizer = tokenizer  # optional: only used to count context tokens
        self._http = LoopSessions(self.api_key, self.timeout, int(max_concurrency))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], tokenizer: Any = None) -> "OpenAIChatBackend":
        cfg = {cls._ALIASES.get(k, k): v for k, v in dict(cfg or {}).items()}
        for key in cls._IGNORED:
            if cfg.pop(key, None) is not None:
                logger.info(
                    "generator.backend_config.%s is accepted for SkyAgent compatibility but has no effect",
                    key,
                )
        unknown = sorted(set(cfg) - set(cls._KEYS))
        if unknown:
            raise AgentConfigError(
                f"unknown key(s) {unknown} in generator.backend_config for openai_server; "
                f"valid keys: {list(cls._KEYS)} (SkyAgent's api_url and model_name also work)"
            )
        return cls(tokenizer=tokenizer, **cfg)

    async def _model_name(self) -> str:
        if self.model is None:
            self.model = await served_model_name(self._http.get(), self.root_url,
                                                 "generator.backend_config.model (--model for `skyrl-gym agent eval`)")
        return self.model

    async def check_reachable(self) -> None:
        """Raise an :class:`EngineError` when nothing answers at ``base_url`` (see
        :func:`~skygym_adapters.engines.base.check_reachable`); without a model name the name is asked here, as the
        first chat would."""
        if self.model is None:
            await self._model_name()
            return
        await check_reachable(self._http.get(), self.root_url, min(self.timeout, 30.0))

    @staticmethod
    def payload_sampling(params: Mapping[str, Any]) -> Dict[str, Any]:
        """SkyAgent's ``sampling_params`` (vLLM/OpenAI names) validated by the engines' own rules, as request fields."""
        sampling = resolve_sampling(dict(params or {}))
        payload: Dict[str, Any] = {
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.top_k > 0:
            payload["top_k"] = sampling.top_k
        if sampling.min_p > 0:
            payload["min_p"] = sampling.min_p
        if sampling.stop:
            payload["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            payload["seed"] = sampling.seed
        return payload

    async def chat(
        self, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]], sampling_params: Mapping[str, Any]
    ) -> ChatReply:
        payload = {
            "model": await self._model_name(),
            "messages": messages,
            **self.payload_sampling(sampling_params),
        }
        if tools:
            payload["tools"] = tools
        url = self.root_url + "/v1/chat/completions"
        try:
            async with self._http.get().post(url, json=payload) as response:
                body = await response.text()
                if response.status >= 400:
                    raise EngineError(f"POST {url} -> HTTP {response.status}: {body[:300]}")
                data = await response.json(content_type=None)
        except EngineError:
            raise
        except asyncio.TimeoutError as exc:
            raise EngineError(
                f"POST {url} timed out after {self.timeout:g} s (raise generator.backend_config.timeout)"
            ) from exc
        except Exception as exc:
            raise EngineError(f"POST {url} failed: {type(exc).__name__}: {exc}") from exc
        try:
            choice = data["choices"][0]
            message = dict(choice["message"])
        except (KeyError, IndexError, TypeError) as exc:
            raise EngineError(f"{url} answered without choices[0].message: {str(data)[:300]}") from exc
        message["role"] = "assistant"
        return ChatReply(message, str(choice.get("finish_reason") or "stop"))

    def count_tokens(self, messages: List[Dict[str, Any]]) -> Optional[int]:
        """Context length by the tokenizer's chat template, when a tokenizer was given (None otherwise)."""
        if self.tokenizer is None:
            return None
        from skygym_adapters.rollout.chat import _as_ids

        plain = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
        return len(
            _as_ids(self.tokenizer.apply_chat_template(plain, tokenize=True, add_generation_prompt=True))
        )

    async def aclose(self) -> None:
        await self._http.aclose()


class TokenBackend:
    """The bundled trainer's engines behind the rollout loop: token ids in, token ids out, recorded for training."""

    needs_tokenizer = True
    token_level = True

    def __init__(
        self, engine: Any, tokenizer: Any, chat_template_kwargs: Optional[Dict[str, Any]] = None
    ) -> None:
        if engine is None:
            raise AgentConfigError(
                "the skyrl-train backend needs an inference engine: pass infer_engine= (an hf, vllm, "
                "remote or sglang engine from skygym_adapters.engines.make_engine, or a list of them)"
            )
        if tokenizer is None:
            raise AgentConfigError(
                "the skyrl-train backend records token ids and needs the policy's tokenizer; "
                "pass tokenizer= (or use infer_backend: openai_server for tokenizer-free evaluation)"
            )
        self.engine = engine
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    @classmethod
    def from_config(
        cls,
        cfg: Mapping[str, Any],
        engine: Any,
        tokenizer: Any,
        chat_template_kwargs: Optional[Dict[str, Any]] = None,
    ) -> "TokenBackend":
        if cfg:
            raise AgentConfigError(
                f"the skyrl-train backend takes no generator.backend_config (got keys {sorted(cfg)}); "
                "configure the engine you pass as infer_engine instead"
            )
        return cls(engine, tokenizer, chat_template_kwargs)

    async def aclose(self) -> None:
        """The engines are the caller's to close."""


class VerlServerEngine(BaseInferenceEngine):
    """veRL's server manager as an :class:`~skygym_adapters.types.InferenceEngine` (see the module docstring).

    A trajectory's requests are recognised by their context: its first request's context is its prompt, and every
    later one starts with that prompt (the rollout loop only appends). Each trajectory gets one veRL request id,
    so veRL's sticky routing keeps its turns on one server (prefix cache). With ``response_length``, a turn's
    ``max_tokens`` is cut to the response tokens the trajectory has left; once nothing is left, the server is not
    asked and the turn is empty with stop reason ``length``. veRL's stop reasons map to this project's:
    ``aborted`` -> ``abort``; a reply that used up its ``max_tokens`` without ending on EOS -> ``length``; else
    ``stop``. Made for the trajectories of one runner (the veRL loop builds one per sample): it remembers every
    prompt it has seen.
    """

    _KEYS = ("response_length", "extra_sampling_params")

    def __init__(
        self,
        server_manager: Any,
        response_length: Optional[int] = None,
        extra_sampling_params: Optional[Mapping[str, Any]] = None,
        eos_token_ids: Any = (),
    ) -> None:
        if not callable(getattr(server_manager, "generate", None)):
            raise AgentConfigError(
                "the verl backend needs veRL's server manager as infer_engine (an object with "
                "async generate(request_id, *, prompt_ids, sampling_params)); got "
                f"{type(server_manager).__name__}"
            )
        if response_length is not None and int(response_length) < 1:
            raise AgentConfigError(f"backend_config.response_length must be at least 1, got {response_length}")
        self.server_manager = server_manager
        self.response_length = None if response_length is None else int(response_length)
        self.extra_sampling_params = dict(extra_sampling_params or {})
        self.eos_token_ids = {int(t) for t in (eos_token_ids or ()) if t is not None}
        self._prompts: List[Tuple[List[int], str]] = []  # (prompt ids, veRL request id) of each trajectory
        self.calls = 0

    def verl_sampling(self, params: Mapping[str, Any], max_tokens: int) -> Dict[str, Any]:
        """This project's sampling params as the dict veRL's servers take (vLLM names)."""
        sampling = resolve_sampling(dict(params or {}))
        out: Dict[str, Any] = {
            **self.extra_sampling_params,
            "max_tokens": max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "logprobs": sampling.logprobs,
            **sampling.optional_fields(),
        }
        return out

    def _trajectory_of(self, context: List[int]) -> Tuple[int, str]:
        """(prompt length, request id) of the trajectory ``context`` belongs to: the longest known prompt that
        starts it, else ``context`` is a new trajectory's prompt."""
        best: Optional[Tuple[List[int], str]] = None
        for prompt, request_id in self._prompts:
            if len(prompt) <= len(context) and context[: len(prompt)] == prompt:
                if best is None or len(prompt) > len(best[0]):
                    best = (prompt, request_id)
        if best is None:
            best = (list(context), uuid.uuid4().hex)
            self._prompts.append(best)
        return len(best[0]), best[1]

    async def _one(self, prompt: List[int], params: Mapping[str, Any]) -> Dict[str, Any]:
        sampling = resolve_sampling(dict(params or {}))
        max_tokens = sampling.max_tokens
        prompt_length, request_id = self._trajectory_of(prompt)
        if self.response_length is not None:
            left = self.response_length - (len(prompt) - prompt_length)
            if left <= 0:
                return {"ids": [], "logprobs": [] if sampling.logprobs else None, "stop": "length"}
            max_tokens = min(max_tokens, left)
        self.calls += 1
        output = await self.server_manager.generate(
            request_id=request_id, prompt_ids=list(prompt), sampling_params=self.verl_sampling(params, max_tokens)
        )
        ids = [int(t) for t in output.token_ids]
        logprobs = list(output.log_probs) if output.log_probs else None
        if sampling.logprobs and logprobs is None and ids:
            raise EngineError("veRL's server returned no log_probs although rollout logprobs were asked for")
        if output.stop_reason == "aborted":
            stop = "abort"
        elif len(ids) >= max_tokens and not (ids and ids[-1] in self.eos_token_ids):
            stop = "length"
        else:
            stop = "stop"
        return {"ids": ids, "logprobs": logprobs if sampling.logprobs else None, "stop": stop}

    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[Dict[str, Any]] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> Dict[str, Any]:
        results = await asyncio.gather(*(self._one([int(t) for t in p], sampling_params or {}) for p in prompt_token_ids))
        wants_logprobs = resolve_sampling(dict(sampling_params or {})).logprobs
        return {
            "response_ids": [r["ids"] for r in results],
            "responses": [None for _ in results],
            "stop_reasons": [r["stop"] for r in results],
            "response_logprobs": [r["logprobs"] or [] for r in results] if wants_logprobs else None,
        }

    def close(self) -> None:
        """The server manager is veRL's."""


def _openai(cfg: Mapping[str, Any], infer_engine: Any, tokenizer: Any, **_: Any) -> OpenAIChatBackend:
    return OpenAIChatBackend.from_config(cfg, tokenizer)


def _token(cfg: Mapping[str, Any], infer_engine: Any, tokenizer: Any, **kwargs: Any) -> TokenBackend:
    return TokenBackend.from_config(cfg, infer_engine, tokenizer, kwargs.get("chat_template_kwargs"))


def _verl(cfg: Mapping[str, Any], infer_engine: Any, tokenizer: Any, **kwargs: Any) -> TokenBackend:
    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(VerlServerEngine._KEYS))
    if unknown:
        raise AgentConfigError(
            f"unknown key(s) {unknown} in generator.backend_config for verl; valid keys: {list(VerlServerEngine._KEYS)}"
        )
    if infer_engine is None:
        raise AgentConfigError(
            "the verl backend needs veRL's server manager as infer_engine (the veRL agent loop "
            "skyrl_agent_runner passes it); to evaluate without veRL use infer_backend: openai_server"
        )
    engine = infer_engine
    if not isinstance(infer_engine, VerlServerEngine):
        eos = getattr(tokenizer, "eos_token_id", None)
        engine = VerlServerEngine(infer_engine, eos_token_ids=eos if isinstance(eos, (list, tuple)) else [eos], **cfg)
    return TokenBackend(engine, tokenizer, kwargs.get("chat_template_kwargs"))


BACKEND_REGISTRY: Dict[str, Callable[..., Any]] = {
    "verl": _verl,
    "openai_server": _openai,
    "openai": _openai,
    "skyrl-train": _token,
    "skyrl_train": _token,
}


def register_backend(name: str, factory: Callable[..., Any]) -> None:
    """``factory(backend_config, infer_engine, tokenizer, **kwargs)`` returns an object with ``token_level`` and
    either ``chat(messages, tools, sampling_params)`` (chat) or ``engine`` + ``tokenizer`` (token level)."""
    BACKEND_REGISTRY[name] = factory


def build_backend(name: str, cfg: Mapping[str, Any], infer_engine: Any, tokenizer: Any, **kwargs: Any) -> Any:
    if name not in BACKEND_REGISTRY:
        raise AgentConfigError(
            f"unknown generator.infer_backend {name!r}; choose one of {sorted(BACKEND_REGISTRY)}"
        )
    return BACKEND_REGISTRY[name](cfg, infer_engine, tokenizer, **kwargs)


__all__ = [
    "BACKEND_REGISTRY",
    "ChatReply",
    "OpenAIChatBackend",
    "TokenBackend",
    "VerlServerEngine",
    "build_backend",
    "register_backend",
]
