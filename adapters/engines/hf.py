"""``HFEngine``: token-in/token-out generation with a transformers model, on CPU or GPU.

Requests from many coroutines (and event loops) are queued to one worker thread, which groups the requests
that arrived together and share sampling parameters into one left-padded batch and decodes them with a KV
cache. Each row stops on its own at EOS, a stop token, a stop string or ``max_generate_length``; its logprobs
are those of the temperature-scaled distribution the token was sampled from (what a trainer recomputes as
``log_softmax(logits / temperature)``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
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
from skygym_adapters.types import InferenceEngineOutput, SamplingParams

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    prompt: List[int]
    sampling: ResolvedSampling
    future: Future


_SHUTDOWN = object()


class HFEngine(BaseInferenceEngine):
    """A transformers causal LM behind the :class:`~skygym_adapters.types.InferenceEngine` protocol.

    >>> engine = HFEngine("smollm2-135m")                       # doctest: +SKIP
    >>> out = await engine.generate([[1, 2, 3]], {"max_generate_length": 8, "logprobs": True})  # doctest: +SKIP

    Args:
        model: a model name for :func:`skygym_adapters.models.resolve_model`, or a loaded ``PreTrainedModel``.
        tokenizer: needed when ``model`` is a loaded module (else loaded with the model); used for EOS ids,
            stop strings and decoding ``responses``.
        device / dtype: default to CUDA+bfloat16 when available, else CPU+float32.
        max_batch_size: at most this many sequences are decoded together.
        batch_wait_s: the worker keeps collecting requests into one batch while they arrive less than this
            many seconds apart, for at most ``max_batch_wait_s`` after the first one.
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        *,
        device: Optional[str] = None,
        dtype: Any = None,
        max_batch_size: int = 64,
        batch_wait_s: float = 0.01,
        max_batch_wait_s: float = 0.1,
    ) -> None:
        import torch

        if model is None or isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
            from skygym_adapters.models import load_model_and_tokenizer

            model, loaded_tokenizer = load_model_and_tokenizer(model, dtype=dtype, device=device)
            tokenizer = tokenizer or loaded_tokenizer
        elif tokenizer is None:
            raise ValueError("HFEngine: pass the tokenizer when giving an already loaded model")
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        if next(model.parameters()).device != self.device:
            self.model.to(self.device)
        self.model.eval()
        self.max_batch_size = int(max_batch_size)
        self.batch_wait_s = float(batch_wait_s)
        self.max_batch_wait_s = float(max_batch_wait_s)
        eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
        eos_ids = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_token_ids = frozenset(int(t) for t in eos_ids)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_token_ids)
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._model_lock = threading.Lock()  # generation vs weight updates
        self._worker: Optional[threading.Thread] = None
        self._closed = False
        self._sleeping = False
        self.weight_version = 0
        self._shared_weights: Optional[Dict[str, Any]] = None  # set by share_weights
        # Counters for benchmarks: batches run and sequences/tokens generated.
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
        """Generate one continuation per prompt (``messages`` and ``session_ids`` are not needed here); returns ids, decoded text, stop reasons and (optionally) logprobs."""
        prompts = validate_prompts(prompt_token_ids)
        sampling = resolve_sampling(sampling_params)  # type: ignore[arg-type]
        futures = [self.submit(prompt, sampling) for prompt in prompts]
        results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        return assemble_output(list(results), sampling.logprobs)

    def submit(self, prompt: List[int], sampling: ResolvedSampling) -> "Future[SequenceResult]":
        """Queue one prompt; the returned future resolves to a :class:`SequenceResult` (thread-safe)."""
        if self._closed:
            raise EngineError("HFEngine is closed")
        if self._sleeping:
            raise EngineError("HFEngine is asleep; call wake_up() before generate()")
        self._ensure_worker()
        future: Future = Future()
        self._queue.put(_Request(prompt, sampling, future))
        return future

    async def update_weights(self, named_tensors: Union[Mapping[str, Any], Iterable[Tuple[str, Any]], str]) -> None:
        """Load new weights: a state dict, an iterable of ``(name, tensor)``, or a checkpoint folder.

        Names must match the model's parameters; an unknown name raises (nothing is loaded then).
        """
        await asyncio.get_running_loop().run_in_executor(None, self._load_weights, named_tensors)

    async def sleep(self) -> None:
        """Free accelerator memory by moving the model to CPU (no-op on CPU, and while the weights are shared with a
        trainer: that memory is the trainer's); generate() refuses meanwhile."""
        self._sleeping = True
        if self.device.type != "cpu" and self._shared_weights is None:
            with self._model_lock:
                self.model.to("cpu")

    async def wake_up(self) -> None:
        if self.device.type != "cpu" and self._shared_weights is None:
            with self._model_lock:
                self.model.to(self.device)
        self._sleeping = False

    def close(self) -> None:
        """Stop the worker thread; pending requests fail with :class:`EngineError`."""
        self._closed = True
        if self._worker is not None and self._worker.is_alive():
            self._queue.put(_SHUTDOWN)
            self._worker.join(timeout=30)

    # ------------------------------------------------------------------ weights
    @property
    def weight_dtype(self) -> Any:
        """The dtype of the model's parameters (what weight updates are cast to)."""
        return next(self.model.parameters()).dtype

    def share_weights(self, tensors: Mapping[str, Any]) -> None:
        """Read the given tensors in place of the model's own parameters (no copy): a trainer in this process, or one
        whose pages are mapped here, updates them and the next generation sees the new weights.

        Every parameter (tied ones once) needs a tensor of the same shape, dtype and device; otherwise ``ValueError``
        and nothing changes. The caller must not update the tensors while a generation runs.
        """
        own = dict(self.model.named_parameters())
        problems = [name for name in own if name not in tensors][:3]
        for name, param in own.items():
            given = tensors.get(name)
            if given is not None and (tuple(given.shape), given.dtype, given.device) != (
                tuple(param.shape), param.dtype, param.device
            ):
                problems.append(f"{name}: {tuple(given.shape)} {given.dtype} on {given.device}, the engine has "
                                f"{tuple(param.shape)} {param.dtype} on {param.device}")
        if problems:
            raise ValueError("share_weights: " + "; ".join(p if ":" in p else f"{p}: missing" for p in problems[:3]))
        with self._model_lock:
            for name, param in own.items():
                param.data = tensors[name]
        self._shared_weights = {name: tensors[name] for name in own}
        self.weight_version += 1

    def shares_weights(self) -> bool:
        """True while every parameter still reads the tensors given to :meth:`share_weights`."""
        if self._shared_weights is None:
            return False
        return all(param.data_ptr() == self._shared_weights[name].data_ptr()
                   for name, param in self.model.named_parameters())

    def _load_weights(self, named_tensors: Any) -> None:
        import torch

        if isinstance(named_tensors, (str, bytes)) or hasattr(named_tensors, "__fspath__"):
            from transformers import AutoModelForCausalLM

            source = AutoModelForCausalLM.from_pretrained(str(named_tensors), dtype=next(self.model.parameters()).dtype)
            named_tensors = source.state_dict()
        items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        state = dict(self.model.state_dict())
        updates = {}
        for name, tensor in items:
            if name not in state:
                raise KeyError(f"update_weights: the model has no parameter named {name!r}")
            if tuple(tensor.shape) != tuple(state[name].shape):
                raise ValueError(
                    f"update_weights: {name!r} has shape {tuple(tensor.shape)}, the model expects {tuple(state[name].shape)}"
                )
            updates[name] = tensor
        with self._model_lock, torch.no_grad():
            if self._shared_weights is not None:  # the tensors are a trainer's: take a copy of our own before writing
                for param in self.model.parameters():
                    param.data = param.data.clone()
                self._shared_weights = None
                state = dict(self.model.state_dict())
            # the parameters themselves: a tied weight is one object under two names, written once
            targets = {**dict(self.model.named_buffers(remove_duplicate=False)),
                       **dict(self.model.named_parameters(remove_duplicate=False))}
            written = set()
            for name, tensor in updates.items():
                target = targets.get(name, state[name])
                if id(target) in written:
                    continue
                written.add(id(target))
                # one copy, cast to the engine's dtype on the way (device to device when both are on one GPU)
                target.copy_(tensor)
        self.weight_version += 1

    # ------------------------------------------------------------------ worker
    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run_worker, name="hf-engine", daemon=True)
            self._worker.start()

    def _run_worker(self) -> None:
        while True:
            first = self._queue.get()
            if first is _SHUTDOWN:
                self._fail_pending(EngineError("HFEngine was closed"))
                return
            pending: List[_Request] = [first]
            # Collect what arrives while requests keep coming (gaps shorter than batch_wait_s), for at most
            # max_batch_wait_s: trajectories started together reach the engine a few milliseconds apart (env
            # set-up, templating), and a batch cannot be joined once it runs.
            collect_until = time.monotonic() + self.max_batch_wait_s
            while len(pending) < self.max_batch_size * 4:
                remaining = collect_until - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = self._queue.get(timeout=min(self.batch_wait_s, remaining))
                except queue.Empty:
                    break
                if item is _SHUTDOWN:
                    self._queue.put(_SHUTDOWN)
                    break
                pending.append(item)
            groups: Dict[ResolvedSampling, List[_Request]] = {}
            for request in pending:
                groups.setdefault(request.sampling.without_seed(), []).append(request)
            for requests in groups.values():
                for start in range(0, len(requests), self.max_batch_size):
                    chunk = requests[start : start + self.max_batch_size]
                    try:
                        with self._model_lock:
                            results = self._generate_batch([r.prompt for r in chunk], [r.sampling for r in chunk])
                    except BaseException as exc:  # the requests fail; the worker lives on
                        logger.exception("HFEngine batch failed")
                        for request in chunk:
                            if not request.future.done():
                                request.future.set_exception(EngineError(f"generation failed: {exc!r}"))
                        continue
                    for request, result in zip(chunk, results):
                        request.future.set_result(result)

    def _fail_pending(self, error: Exception) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Request) and not item.future.done():
                item.future.set_exception(error)

    # ------------------------------------------------------------------ decoding
    def _generate_batch(self, prompts: List[List[int]], samplings: List[ResolvedSampling]) -> List[SequenceResult]:
        """Decode a batch that shares sampling parameters (seeds may differ per row)."""
        import torch

        sampling = samplings[0]
        batch = len(prompts)
        device = self.device
        max_len = max(len(p) for p in prompts)
        input_ids = torch.full((batch, max_len), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((batch, max_len), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, max_len - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention[row, max_len - len(prompt) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        generators = [self._row_generator(s.seed) for s in samplings]
        stop_ids = set(self.eos_token_ids) | set(sampling.stop_token_ids)
        stop_lookback = max((len(s) for s in sampling.stop), default=0) + 8

        generated: List[List[int]] = [[] for _ in range(batch)]
        logprobs: List[List[float]] = [[] for _ in range(batch)]
        reasons: List[Optional[str]] = [None] * batch

        from transformers import DynamicCache

        cache = DynamicCache()
        with torch.inference_mode():
            prefill = dict(
                input_ids=input_ids, attention_mask=attention, position_ids=positions, past_key_values=cache, use_cache=True
            )
            try:
                # Only the last position's logits are needed; computing the full vocabulary for every prompt
                # token dominates the prefill of small models.
                out = self.model(**prefill, logits_to_keep=1)
            except TypeError:  # models without logits_to_keep
                out = self.model(**prefill)
            next_logits = out.logits[:, -1, :].float()
            last_pos = positions[:, -1:]
            cache = out.past_key_values
            rows = list(range(batch))  # the original row of each position in the (shrinking) batch
            for _ in range(sampling.max_tokens):
                tokens, token_logprobs = self._sample(next_logits, sampling, [generators[r] for r in rows])
                keep = []
                for position, row in enumerate(rows):
                    token = int(tokens[position])
                    generated[row].append(token)
                    logprobs[row].append(float(token_logprobs[position]))
                    if token in stop_ids:
                        reasons[row] = "stop"
                    elif sampling.stop and self._ends_in_stop_string(generated[row], sampling.stop, stop_lookback):
                        reasons[row] = "stop"
                    elif len(generated[row]) >= sampling.max_tokens:
                        reasons[row] = "length"
                    else:
                        keep.append(position)
                if not keep:
                    break
                if len(keep) < len(rows):
                    # Drop finished rows from the batch and the KV cache: they would only cost compute.
                    index = torch.tensor(keep, device=device)
                    cache.batch_select_indices(index)
                    attention, last_pos, tokens = attention[index], last_pos[index], tokens[keep]
                    rows = [rows[p] for p in keep]
                attention = torch.cat(
                    [attention, torch.ones((len(rows), 1), dtype=attention.dtype, device=device)], dim=1
                )
                last_pos = last_pos + 1
                out = self.model(
                    input_ids=tokens.view(len(rows), 1).to(device),
                    attention_mask=attention,
                    position_ids=last_pos,
                    past_key_values=cache,
                    use_cache=True,
                )
                next_logits = out.logits[:, -1, :].float()

        results = []
        for row in range(batch):
            text = self.tokenizer.decode(generated[row], skip_special_tokens=True)
            results.append(
                SequenceResult(
                    token_ids=generated[row],
                    text=text,
                    stop_reason=reasons[row] or "length",
                    logprobs=logprobs[row] if sampling.logprobs else None,
                )
            )
        self.stats["batches"] += 1
        self.stats["sequences"] += batch
        self.stats["generated_tokens"] += sum(len(g) for g in generated)
        return results

    def _row_generator(self, seed: Optional[int]) -> Any:
        import torch

        if seed is None:
            return None
        generator = torch.Generator(device="cpu")
        generator.manual_seed(seed)
        return generator

    def _ends_in_stop_string(self, ids: List[int], stops: Tuple[str, ...], lookback: int) -> bool:
        # Only the tail can contain a stop string that was not there one token ago.
        tail = self.tokenizer.decode(ids[-lookback:], skip_special_tokens=False)
        return any(stop in tail for stop in stops)

    @staticmethod
    def _sample(logits: Any, sampling: ResolvedSampling, generators: List[Any]) -> Tuple[Any, Any]:
        """Pick the next token per row; return tokens and their logprob under the temperature-scaled logits."""
        import torch

        if sampling.temperature == 0:
            logprob_all = torch.log_softmax(logits, dim=-1)
            tokens = logits.argmax(dim=-1)
            return tokens.cpu(), logprob_all.gather(-1, tokens[:, None]).squeeze(-1).cpu()
        scaled = logits / sampling.temperature
        logprob_all = torch.log_softmax(scaled, dim=-1)
        filtering = (sampling.top_k and sampling.top_k > 0) or sampling.min_p > 0 or sampling.top_p < 1.0
        if not filtering:
            probs = logprob_all.exp()
        else:
            filtered = scaled.clone()
            if sampling.top_k and sampling.top_k > 0:
                kth = torch.topk(filtered, min(sampling.top_k, filtered.shape[-1]), dim=-1).values[:, -1:]
                filtered[filtered < kth] = float("-inf")
            if sampling.min_p > 0:
                probs = torch.softmax(filtered, dim=-1)
                threshold = probs.max(dim=-1, keepdim=True).values * sampling.min_p
                filtered[probs < threshold] = float("-inf")
            if sampling.top_p < 1.0:
                sorted_logits, order = torch.sort(filtered, descending=True, dim=-1)
                sorted_probs = torch.softmax(sorted_logits, dim=-1)
                remove = sorted_probs.cumsum(dim=-1) - sorted_probs > sampling.top_p
                sorted_logits[remove] = float("-inf")
                filtered = torch.full_like(filtered, float("-inf")).scatter(-1, order, sorted_logits)
            probs = torch.softmax(filtered, dim=-1)
        probs = probs.cpu()
        # Inverse-CDF draw: one uniform number per row and a search in the cumulative distribution. Exact, and
        # on CPU far cheaper than torch.multinomial or Gumbel noise over a 50k-token vocabulary.
        cdf = probs.cumsum(dim=-1)
        if all(g is None for g in generators):
            uniform = torch.rand((probs.shape[0], 1))
        else:
            uniform = torch.cat([torch.rand((1, 1), generator=g) for g in generators])
        # right=True: the first token whose cdf exceeds the draw, so a zero-probability token is never picked.
        tokens = torch.searchsorted(cdf, uniform * cdf[:, -1:], right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)
        return tokens, logprob_all.cpu().gather(-1, tokens[:, None]).squeeze(-1)


__all__ = ["HFEngine"]
