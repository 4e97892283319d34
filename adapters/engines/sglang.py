"""``SGLangEngine``: a client of SGLang's native HTTP API (``python -m sglang.launch_server``).

Token-in/token-out through ``POST /generate`` with ``input_ids`` (the reply's ``output_ids`` and
``meta_info.output_token_logprobs``); weight updates through ``/update_weights_from_disk`` (a state dict is
first saved as a checkpoint folder); ``sleep``/``wake_up`` through ``/release_memory_occupation`` and
``/resume_memory_occupation``.

SGLang itself cannot run on the CPU machine this project is tested on (it needs CUDA kernels), so this client is
tested against a small server that speaks the same API over a real model (``tests/adapters/http_test_servers.py``),
written from SGLang's documented request and response fields. It has not been run against a real SGLang server
here.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import shutil
from typing import Any, Dict, List, Mapping, Optional

from skygym_adapters.engines.base import (
    BaseInferenceEngine,
    EngineError,
    ResolvedSampling,
    SequenceResult,
    assemble_output,
    check_reachable,
    resolve_sampling,
    unreachable_hint,
    validate_prompts,
)
from skygym_adapters.engines.http_sessions import LoopSessions
from skygym_adapters.engines.weights_folder import SaveFolder
from skygym_adapters.types import InferenceEngineOutput, SamplingParams

logger = logging.getLogger(__name__)
_SERVER = "an SGLang server (python -m sglang.launch_server ...)"


class SGLangEngine(BaseInferenceEngine):
    """SGLang's native API behind the :class:`~skygym_adapters.types.InferenceEngine` protocol.

    Args:
        base_url: the server root, e.g. ``http://127.0.0.1:30000``.
        tokenizer: the model's tokenizer (object or model name), used to decode replies; optional.
        model_path: the checkpoint folder the server loaded, needed to turn a state dict into a loadable folder
            for :meth:`update_weights` (asked from ``/get_model_info`` when not given).
        weights_dir: where state dicts are saved for the server to load (must be readable by the server).
    """

    def __init__(
        self,
        base_url: str,
        tokenizer: Any = None,
        *,
        model_path: Optional[str] = None,
        weights_dir: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout_s: float = 600.0,
        max_concurrency: int = 256,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        if isinstance(tokenizer, (str, os.PathLike)):
            from skygym_adapters.models import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.model_path = model_path
        self._weights = SaveFolder(weights_dir, "skyrl-gym-sglang-weights-")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._http = LoopSessions(self.api_key, self.timeout_s, self.max_concurrency)
        self.weight_version = 0

    async def check_reachable(self) -> None:
        """Raise an :class:`EngineError` when nothing answers at ``base_url`` (see
        :func:`~skygym_adapters.engines.base.check_reachable`), so that a command says so before its rollouts."""
        await check_reachable(self._session(), self.base_url, min(self.timeout_s, 30.0), "/health", _SERVER)

    def _session(self) -> Any:
        return self._http.get()

    async def _request(self, method: str, path: str, payload: Optional[Dict[str, Any]] = None) -> Any:
        try:
            async with self._session().request(method, self.base_url + path, json=payload) as response:
                body = await response.text()
                if response.status >= 400:
                    raise EngineError(f"{method} {path} -> HTTP {response.status}: {body[:500]}")
                return await response.json(content_type=None) if body else None
        except EngineError:
            raise
        except Exception as exc:
            hint = unreachable_hint(exc, _SERVER, self.base_url)
            raise EngineError(f"{method} {self.base_url}{path} failed: {type(exc).__name__}: {exc}{hint}") from exc

    # ------------------------------------------------------------------ protocol
    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[SamplingParams] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput:
        """One ``/generate`` call for the whole batch (``input_ids`` as a list of id lists)."""
        prompts = validate_prompts(prompt_token_ids)
        sampling = resolve_sampling(sampling_params)  # type: ignore[arg-type]
        payload = {
            "input_ids": prompts,
            "sampling_params": self._sampling_payload(sampling),
            "return_logprob": sampling.logprobs,
            "stream": False,
        }
        data = await self._request("POST", "/generate", payload)
        items = data if isinstance(data, list) else [data]
        if len(items) != len(prompts):
            raise EngineError(f"/generate returned {len(items)} results for {len(prompts)} prompts")
        return assemble_output([self._result(item, sampling) for item in items], sampling.logprobs)

    @staticmethod
    def _sampling_payload(sampling: ResolvedSampling) -> Dict[str, Any]:
        params: Dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "min_p": sampling.min_p,
            "no_stop_trim": True,  # keep the stop string: the recorded ids are what the model produced
            "skip_special_tokens": True,
        }
        if sampling.stop:
            params["stop"] = list(sampling.stop)
        if sampling.stop_token_ids:
            params["stop_token_ids"] = list(sampling.stop_token_ids)
        if sampling.seed is not None:
            params["sampling_seed"] = sampling.seed
        return params

    def _result(self, item: Mapping[str, Any], sampling: ResolvedSampling) -> SequenceResult:
        if "output_ids" not in item:
            raise EngineError(f"/generate returned no output_ids (fields: {sorted(item)}); token-out is required")
        ids = [int(t) for t in item["output_ids"]]
        meta = item.get("meta_info") or {}
        finish = meta.get("finish_reason") or {}
        kind = finish.get("type") if isinstance(finish, dict) else str(finish)
        reason = {"stop": "stop", "length": "length", "abort": "abort"}.get(kind or "", "stop")
        logprobs = None
        if sampling.logprobs:
            entries = meta.get("output_token_logprobs") or []
            if len(entries) != len(ids):
                raise EngineError(f"/generate returned {len(entries)} logprobs for {len(ids)} tokens")
            logprobs = [float(entry[0]) for entry in entries]
        text = item.get("text", "")
        if self.tokenizer is not None:
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return SequenceResult(token_ids=ids, text=text, stop_reason=reason, logprobs=logprobs)

    # ------------------------------------------------------------------ weights and memory
    async def update_weights(self, named_tensors: Any) -> None:
        """``/update_weights_from_disk`` with a folder, or with a state dict saved as a checkpoint folder."""
        if isinstance(named_tensors, (str, os.PathLike)):
            folder = str(named_tensors)
        else:
            if self.model_path is None:
                info = await self._request("GET", "/get_model_info")
                self.model_path = (info or {}).get("model_path")
            if not self.model_path:
                raise EngineError("update_weights from tensors needs model_path (the folder the server loaded)")
            folder = await asyncio.get_running_loop().run_in_executor(None, self._save_checkpoint, named_tensors)
        result = await self._request("POST", "/update_weights_from_disk", {"model_path": folder})
        if isinstance(result, dict) and result.get("success") is False:
            raise EngineError(f"SGLang refused the weight update: {result.get('message')}")
        self.weight_version += 1

    def _save_checkpoint(self, named_tensors: Any) -> str:
        """A loadable folder: the original config/tokenizer files plus the new weights (unchanged ones kept)."""
        import torch
        from safetensors.torch import load_file, save_file

        folder = self._weights.path
        os.makedirs(folder, exist_ok=True)
        assert self.model_path is not None
        for path in glob.glob(os.path.join(self.model_path, "*.json")) + glob.glob(os.path.join(self.model_path, "*.jinja")):
            shutil.copy(path, folder)
        state: Dict[str, torch.Tensor] = {}
        for path in sorted(glob.glob(os.path.join(self.model_path, "*.safetensors"))):
            state.update(load_file(path))
        items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        for name, tensor in items:
            state[name] = tensor.detach().cpu().clone()  # clone: tied weights share storage, safetensors refuses that
        for stale in glob.glob(os.path.join(folder, "*.safetensors")):
            os.remove(stale)
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.exists(index):
            os.remove(index)  # the copied index names the original shards; one file replaces them
        save_file(state, os.path.join(folder, "model.safetensors"))
        return folder

    async def sleep(self) -> None:
        await self._request("POST", "/release_memory_occupation", {})

    async def wake_up(self) -> None:
        await self._request("POST", "/resume_memory_occupation", {})

    @property
    def weights_dir(self) -> str:
        """Where weights given as tensors are saved: ``weights_dir=``, or a temporary folder removed at close."""
        return self._weights.path

    async def aclose(self) -> None:
        await self._http.aclose()
        self._weights.remove()

    def close(self) -> None:
        """Drop HTTP sessions (call :meth:`aclose` from a running loop to close them cleanly) and the weights folder
        this engine made."""
        self._http.forget()
        self._weights.remove()


__all__ = ["SGLangEngine"]
