"""``RemoteEngine``: any OpenAI-compatible server (``/v1/completions`` or ``/v1/chat/completions``).

Token-in/token-out where the server allows it: the prompt goes as a list of token ids and the reply's ids are
read from ``token_ids`` (vLLM returns them with ``"return_token_ids": true``). A server that refuses token-id
prompts gets the decoded text instead, and one that returns no ids has its text re-tokenized; both fallbacks
log a warning once, because the recorded ids may then differ from what the model really produced.

Weight updates use vLLM's development endpoints (server started with ``VLLM_SERVER_DEV_MODE=1``):
``POST /collective_rpc`` with ``reload_weights`` from a folder, then ``/reset_prefix_cache``. A state dict is
written as safetensors into ``weights_dir`` first (a folder the server can read).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Dict, List, Mapping, Optional

from skygym_adapters.engines.base import (
    BaseInferenceEngine,
    EngineError,
    ResolvedSampling,
    SequenceResult,
    assemble_output,
    check_reachable,
    resolve_sampling,
    served_model_name,
    unreachable_hint,
    validate_prompts,
)
from skygym_adapters.engines.http_sessions import LoopSessions
from skygym_adapters.engines.weights_folder import (
    HEAD,
    SaveFolder,
    ties_embeddings,
    tied_head_weights,
    with_tied_head,
)
from skygym_adapters.types import InferenceEngineOutput, SamplingParams

logger = logging.getLogger(__name__)


def _refused(error: EngineError) -> bool:
    """Whether the server refused the request as malformed (HTTP 400 or 422)."""
    return " 400" in str(error) or " 422" in str(error)


class RemoteEngine(BaseInferenceEngine):
    """Client of an OpenAI-compatible server behind the :class:`~skygym_adapters.types.InferenceEngine` protocol.

    Args:
        base_url: the server root, e.g. ``http://127.0.0.1:8000`` (with or without ``/v1``).
        tokenizer: the model's tokenizer (object or model name): decodes replies, and is needed for the text
            fallbacks. Without it, only fully token-faithful servers work.
        model: the model name the server serves; asked from ``/v1/models`` when None.
        api: ``"completions"`` (token ids in and out) or ``"chat"`` (the server applies its own chat template to
            the conversation; the rollout loop passes the messages along with the ids).
        api_key: sent as a bearer token if given (or from ``OPENAI_API_KEY``).
        max_concurrency: requests in flight at once.
        weights_dir: where :meth:`update_weights` writes a state dict for the server to load.
        name_hint: how the caller names ``model``, in the error when ``/v1/models`` cannot be asked (a command
            line says its flag).
    """

    def __init__(
        self,
        base_url: str,
        tokenizer: Any = None,
        *,
        model: Optional[str] = None,
        api: str = "completions",
        api_key: Optional[str] = None,
        timeout_s: float = 600.0,
        max_concurrency: int = 256,
        weights_dir: Optional[str] = None,
        name_hint: str = "RemoteEngine(..., model=NAME)",
    ) -> None:
        if api not in ("completions", "chat"):
            raise ValueError(f"api must be 'completions' or 'chat', got {api!r}")
        root = base_url.rstrip("/")
        self.root_url = root[: -len("/v1")] if root.endswith("/v1") else root
        if isinstance(tokenizer, (str, os.PathLike)):
            from skygym_adapters.models import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.model = model
        self.api = api
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._weights = SaveFolder(weights_dir, "skyrl-gym-weights-")
        self._name_hint = name_hint  # how the caller names the model, for an error that cannot ask the server
        self.needs_messages = api == "chat"
        self._prompt_as_text = False
        self._warned: set = set()
        self._http = LoopSessions(self.api_key, self.timeout_s, self.max_concurrency)
        self.weight_version = 0

    # ------------------------------------------------------------------ HTTP plumbing
    def _session(self) -> Any:
        return self._http.get()

    async def _post(self, path: str, payload: Dict[str, Any]) -> Any:
        session = self._session()
        try:
            async with session.post(self.root_url + path, json=payload) as response:
                body = await response.text()
                if response.status >= 400:
                    hint = ""
                    if response.status == 404 and "model" in body.lower():  # vLLM: "The model `x` does not exist."
                        hint = (f"; the server serves no model named {payload.get('model')!r}: its names are at "
                                f"{self.root_url}/v1/models (skyrl-gym eval --served-model NAME)")
                    elif path == "/v1/completions" and response.status in (404, 405):
                        hint = ("; the server has no completions API: for a chat-only server use api='chat' "
                                "(skyrl-gym eval --api chat)")
                    raise EngineError(f"POST {path} -> HTTP {response.status}: {body[:500]}{hint}")
                if not body:
                    return None
                try:
                    return await response.json(content_type=None)
                except ValueError:
                    return body
        except EngineError:
            raise
        except Exception as exc:
            hint = unreachable_hint(exc, "an OpenAI-compatible server", self.root_url)
            raise EngineError(f"POST {self.root_url}{path} failed: {type(exc).__name__}: {exc}{hint}") from exc

    async def _model_name(self) -> str:
        if self.model is None:
            self.model = await served_model_name(self._session(), self.root_url, self._name_hint)
        return self.model

    async def check_reachable(self) -> None:
        """Raise an :class:`EngineError` when nothing answers at ``base_url`` (see
        :func:`~skygym_adapters.engines.base.check_reachable`), so that a command says so before its rollouts;
        without a model name the name is asked here, as the first request would."""
        if self.model is None:
            await self._model_name()
            return
        await check_reachable(self._session(), self.root_url, min(self.timeout_s, 30.0))

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)

    # ------------------------------------------------------------------ protocol
    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[SamplingParams] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput:
        """Generate one continuation per prompt. ``messages`` (one conversation per prompt) is required by
        ``api="chat"``; the ids are then only used to check that the server templated them the same way."""
        prompts = validate_prompts(prompt_token_ids)
        sampling = resolve_sampling(sampling_params)  # type: ignore[arg-type]
        if self.api == "chat" and (messages is None or len(messages) != len(prompts)):
            raise ValueError("RemoteEngine(api='chat') needs the conversation of every prompt (messages=...)")
        model = await self._model_name()
        semaphore = asyncio.Semaphore(self.max_concurrency)

        async def one(i: int) -> SequenceResult:
            async with semaphore:
                if self.api == "chat":
                    return await self._chat(model, prompts[i], messages[i], sampling)  # type: ignore[index]
                return await self._completion(model, prompts[i], sampling)

        results = await asyncio.gather(*(one(i) for i in range(len(prompts))))
        return assemble_output(list(results), sampling.logprobs)

    def _common_payload(self, model: str, sampling: ResolvedSampling) -> Dict[str, Any]:
        payload: Dict[str, Any] = {
            "model": model,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "return_token_ids": True,  # vLLM extension; other servers ignore unknown fields
            "include_stop_str_in_output": True,
            "skip_special_tokens": True,
        }
        if sampling.top_k > 0:
            payload["top_k"] = sampling.top_k
        payload.update(sampling.optional_fields())
        return payload

    async def _completion(self, model: str, prompt: List[int], sampling: ResolvedSampling) -> SequenceResult:
        payload = self._common_payload(model, sampling)
        if sampling.logprobs:
            payload["logprobs"] = 1
        if self._prompt_as_text:
            data = await self._post("/v1/completions", {**payload, "prompt": self._as_text(prompt)})
        else:
            try:
                data = await self._post("/v1/completions", {**payload, "prompt": prompt})
            except EngineError as exc:
                if not _refused(exc) or await self._takes_token_ids(payload, prompt):
                    raise  # this prompt (too long, say), not its form: later prompts still go as ids
                self._require_tokenizer("send the prompt as text")
                self._prompt_as_text = True
                self._warn_once(
                    "prompt_text",
                    f"{self.root_url} refuses token-id prompts ({exc}); sending decoded text instead: the server "
                    "re-tokenizes the prompt, which may differ from the recorded ids",
                )
                data = await self._post("/v1/completions", {**payload, "prompt": self._as_text(prompt)})
        where = f"{self.root_url}/v1/completions"
        choice = self._first_choice(data, where)
        text = choice.get("text")
        if not isinstance(text, str):  # "" is a real (empty) reply; a missing text is not a reply at all
            message = choice.get("message")
            hint = (
                "; the reply is in chat format (choices[0].message.content): use api='chat' (skyrl-gym eval --api chat)"
                if isinstance(message, dict) and "content" in message
                else ""
            )
            raise EngineError(f"{where} answered without a reply text: choices[0].text is "
                              f"{'missing' if 'text' not in choice else type(text).__name__}{hint}")
        token_logprobs = None
        logprobs = choice.get("logprobs")
        if sampling.logprobs and isinstance(logprobs, dict):
            token_logprobs = logprobs.get("token_logprobs")
        return self._result(text, choice.get("token_ids"), choice.get("finish_reason"), token_logprobs, sampling, where)

    async def _takes_token_ids(self, payload: Dict[str, Any], prompt: List[int]) -> bool:
        """Whether the server takes a token-id prompt at all: one token, one token back. A server that refused a
        prompt as ids may have refused that prompt (too long), not the form; sending it as text instead could
        even fit (a sampled reply's ids can be longer than the server's own tokenization of its text)."""
        try:
            await self._post("/v1/completions", {**payload, "prompt": prompt[:1], "max_tokens": 1})
        except EngineError as exc:
            if _refused(exc):
                return False
            raise
        return True

    def _as_text(self, prompt: List[int]) -> str:
        return self.tokenizer.decode(prompt, skip_special_tokens=False)

    def _first_choice(self, data: Any, where: str) -> Dict[str, Any]:
        """``choices[0]`` of a server's answer, or :class:`EngineError` saying what the answer was instead."""
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise EngineError(f"{where} answered without choices[0] (an object in a 'choices' list): "
                              f"{str(data)[:200]!r}")
        return choices[0]

    async def _chat(
        self, model: str, prompt: List[int], conversation: List[Dict[str, Any]], sampling: ResolvedSampling
    ) -> SequenceResult:
        payload = self._common_payload(model, sampling)
        payload["messages"] = conversation
        if sampling.logprobs:
            payload["logprobs"] = True
            payload["top_logprobs"] = 0
        data = await self._post("/v1/chat/completions", payload)
        server_prompt = data.get("prompt_token_ids") if isinstance(data, dict) else None
        if server_prompt is not None and list(server_prompt) != list(prompt):
            self._warn_once(
                "chat_prompt",
                "the server's chat template produced other prompt ids than the local template: recorded "
                "trajectories will not match what the server's model saw (use api='completions' for token-in)",
            )
        where = f"{self.root_url}/v1/chat/completions"
        choice = self._first_choice(data, where)
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(text, str):
            raise EngineError(f"{where} answered without a reply text: choices[0].message"
                              + (".content is " + ("missing" if "content" not in message else type(text).__name__)
                                 if isinstance(message, dict) else " is " + type(message).__name__))
        token_logprobs = None
        logprobs = choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if sampling.logprobs and isinstance(content, list):
            token_logprobs = [entry.get("logprob") if isinstance(entry, dict) else None for entry in content]
        return self._result(text, choice.get("token_ids"), choice.get("finish_reason"), token_logprobs, sampling, where)

    def _result(
        self,
        text: str,
        token_ids: Optional[List[int]],
        finish_reason: Optional[str],
        token_logprobs: Optional[List[Optional[float]]],
        sampling: ResolvedSampling,
        where: str,
    ) -> SequenceResult:
        reason = "length" if finish_reason == "length" else ("abort" if finish_reason == "abort" else "stop")
        if token_ids is not None and not (
            isinstance(token_ids, list)
            and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in token_ids)
        ):
            raise EngineError(f"{where} answered with choices[0].token_ids that are not a list of token ids: "
                              f"{str(token_ids)[:200]!r}")
        if token_logprobs is not None and not (
            isinstance(token_logprobs, list)
            and all(lp is None or (isinstance(lp, (int, float)) and not isinstance(lp, bool)) for lp in token_logprobs)
        ):
            token_logprobs = None  # optional: unusable logprobs are reported below and read as 0.0
        if token_ids is None:
            self._require_tokenizer("re-tokenize the reply")
            self._warn_once(
                "reply_text",
                f"{self.root_url} returned no token ids; re-tokenizing the reply text (not token-faithful: the ids "
                "may differ from what the model generated)",
            )
            token_ids = self.tokenizer.encode(text, add_special_tokens=False)
            ends_on_stop_string = any(text.endswith(s) for s in sampling.stop)
            if reason == "stop" and not ends_on_stop_string and self.tokenizer.eos_token_id is not None:
                token_ids = token_ids + [self.tokenizer.eos_token_id]  # the model stopped on EOS
            token_logprobs = None if token_logprobs is None or len(token_logprobs) != len(token_ids) else token_logprobs
        token_ids = [int(t) for t in token_ids]
        logprobs = None
        if sampling.logprobs:
            if token_logprobs is None or len(token_logprobs) != len(token_ids):
                self._warn_once("logprobs", "the server returned no usable logprobs; using 0.0")
                logprobs = [0.0] * len(token_ids)
            else:
                logprobs = [float(lp) if lp is not None else 0.0 for lp in token_logprobs]
        if self.tokenizer is not None:
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        return SequenceResult(token_ids=token_ids, text=text, stop_reason=reason, logprobs=logprobs)

    def _require_tokenizer(self, purpose: str) -> None:
        if self.tokenizer is None:
            raise EngineError(f"RemoteEngine needs a tokenizer to {purpose}; pass tokenizer=...")

    # ------------------------------------------------------------------ weights and memory
    async def update_weights(self, named_tensors: Any) -> None:
        """Reload weights on a vLLM server in dev mode: from a folder, or from a state dict saved to ``weights_dir``.

        vLLM reloads in place and keeps any weight the files do not name: a folder written by ``save_pretrained``
        for a model with tied embeddings has no ``lm_head.weight``, and the server's head would keep its old value.
        Such a folder goes to ``weights_dir`` with the head named (:func:`tied_head_weights`). A state dict should
        name both (``state_dict()`` does, as the trainer's checkpoint sync writes them); one that names the
        embedding alone gets the head added where ``model`` is a local folder whose config ties them, and a
        warning where the engine cannot tell."""
        folder = str(named_tensors) if isinstance(named_tensors, (str, os.PathLike)) else None
        if folder is not None:
            named_tensors = await asyncio.get_running_loop().run_in_executor(None, tied_head_weights, folder)
        if named_tensors is not None:
            folder = await asyncio.get_running_loop().run_in_executor(None, self._save_state_dict, named_tensors)
        await self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": folder}})
        await self._post("/reset_prefix_cache", {})
        self.weight_version += 1

    def _save_state_dict(self, named_tensors: Any) -> str:
        from safetensors.torch import save_file

        items = list(named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors)
        embedding = next((name for name, _ in items if name.endswith("embed_tokens.weight")), None)
        if embedding is not None and HEAD not in {name for name, _ in items}:
            if self.model is not None and ties_embeddings(self.model):
                items = with_tied_head(items)
            else:
                self._warn_once("tied-head", f"update_weights: the state dict names {embedding} but not {HEAD}; the "
                                "server keeps every weight it is not given, so a model that ties them keeps its old "
                                f"head (name both, as state_dict() does, or give the model's local folder as model=)")
        tensors = {name: tensor.detach().cpu().clone() for name, tensor in items}  # clone: tied weights share storage
        folder = self._weights.path
        os.makedirs(folder, exist_ok=True)
        save_file(tensors, os.path.join(folder, "model.safetensors"))
        return folder

    async def sleep(self) -> None:
        await self._post("/sleep", {})

    async def wake_up(self) -> None:
        await self._post("/wake_up", {})

    @property
    def weights_dir(self) -> str:
        """Where :meth:`update_weights` saves a state dict: ``weights_dir=``, or a temporary folder removed at
        close."""
        return self._weights.path

    async def aclose(self) -> None:
        await self._http.aclose()
        self._weights.remove()

    def close(self) -> None:
        """Drop HTTP sessions (call :meth:`aclose` from a running loop to close them cleanly) and the weights folder
        this engine made."""
        self._http.forget()
        self._weights.remove()


__all__ = ["RemoteEngine"]
