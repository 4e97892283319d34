"""``HFEngine``: token-in/token-out generation with a transformers model, on CPU or GPU.

Requests from many coroutines (and event loops) are queued to one worker thread, which groups the requests
that arrived together and share sampling parameters into one left-padded batch and decodes them with a KV
cache. Each row stops on its own at EOS, a stop token, a stop string or ``max_generate_length``; its logprobs
are those of the temperature-scaled distribution the token was sampled from (what a trainer recomputes as
``log_softmax(logits / temperature)``).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from skygym_adapters.engines.base import (
    BaseInferenceEngine,
    EngineError,
    ResolvedSampling,
    SequenceResult,
    assemble_output,
    resolve_sampling,
    validate_prompts,
)
from skygym_adapters.engines.hf_attention import has_grouped_attention, use_grouped_attention
from skygym_adapters.engines.hf_sampling import draw_uniforms, sample_tokens
from skygym_adapters.engines.hf_sessions import (
    KeptCache,
    SessionCaches,
    cache_layers,
    default_budget_bytes,
    keep_row,
    resume_into,
)
from skygym_adapters.engines.hf_stops import StopStrings
from skygym_adapters.types import InferenceEngineOutput, SamplingParams

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    prompt: List[int]
    sampling: ResolvedSampling
    future: Future
    session: Optional[str] = None


_SHUTDOWN = object()
_WAKE = object()  # a session closed: the worker looks again at what it waits for


class HFEngine(BaseInferenceEngine):
    """A transformers causal LM behind the :class:`~skygym_adapters.types.InferenceEngine` protocol.

    >>> engine = HFEngine("smollm2-135m")                       # doctest: +SKIP
    >>> out = await engine.generate([[1, 2, 3]], {"max_generate_length": 8, "logprobs": True})  # doctest: +SKIP

    Args:
        model: a model name for :func:`skygym_adapters.models.resolve_model`, or a loaded ``PreTrainedModel``. A
            model the engine loads, on transformers' ``"sdpa"`` attention with grouped key/value heads, is switched
            to :data:`~skygym_adapters.engines.hf_attention.NAME`: the same outputs, without copying the KV cache to
            every query head in masked steps. A loaded model is left as it is
            (:func:`~skygym_adapters.engines.hf_attention.use_grouped_attention` opts it in).
        tokenizer: needed when ``model`` is a loaded module (else loaded with the model); used for EOS ids,
            stop strings and decoding ``responses``.
        device / dtype: default to CUDA+bfloat16 when available, else CPU+float32.
        max_batch_size: at most this many sequences are decoded together.
        batch_wait_s: the worker keeps collecting requests into one batch while they arrive less than this
            many seconds apart, for at most ``max_batch_wait_s`` after the first one (for callers that do not say
            how many requests are coming; those that do call :meth:`expect_sessions`).
        max_expect_wait_s: how long a batch waits for the requests of the sessions announced by
            :meth:`expect_sessions` (a session whose env is slow to answer is left for the next batch).
        sync_interval: the host looks at the rows every this many decode steps (to hand out the rows that ended,
            report progress and drop ended rows from the batch); default 1 on CPU (free there), 16 on accelerators.
        decode_mode: ``"static"`` (a KV cache of fixed size, allocated for the whole budget), ``"dynamic"`` (a cache
            that grows by a copy of itself per token), or ``"auto"``: static with transformers >= 5, else dynamic.
        compile_decode: with the static cache, the decode step is compiled (``torch.compile(mode="reduce-overhead")``:
            CUDA graphs on CUDA, inductor's kernels alone elsewhere; each new batch size or cache length compiles
            once) and ended rows decode on, unread, until the batch ends; uncompiled they leave the batch and the
            cache. Default: on CUDA, unless ``SKYRL_GYM_HF_COMPILE_DECODE=0`` (for short runs, where the first
            compile, tens of seconds, costs more than it saves); off elsewhere. ``True`` compiles on any device.
        share_prefill: an uncompiled batch computes each distinct prompt once (a GRPO group's samples share one) and
            a prefix that every prompt of the batch starts with once (see :func:`plan_prefill`); the rows get the
            same cache and logits, up to float rounding. ``False`` runs every row's prompt through the model.
        session_cache_gib: an uncompiled batch keeps the KV cache of each row that has a session id (a trajectory)
            when the row ends, and the session's next prompt computes only what follows the tokens it shares with
            the kept ones (a multi-turn conversation: the new turn's observation), up to this many GiB on the
            model's device, least recently kept let go first (:mod:`~skygym_adapters.engines.hf_sessions`).
            A session's cache goes with :meth:`finish_session` and with new weights. Default
            ``SKYRL_GYM_HF_SESSION_CACHE_GIB``, else 2; 0 turns it off.

    ``on_progress``, when set to a callable, is called from the worker thread with ``(positions, rows)``: the token
    positions settled since its last call (generated tokens, and the unused budget of rows that ended early, so that
    over a batch they add up to rows x ``max_generate_length``: a progress bar of that total ends when the batch
    does) and the number of rows that ended meanwhile.
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
        max_expect_wait_s: float = 5.0,
        sync_interval: Optional[int] = None,
        decode_mode: str = "auto",
        compile_decode: Optional[bool] = None,
        share_prefill: bool = True,
        session_cache_gib: Optional[float] = None,
    ) -> None:
        import torch

        if session_cache_gib is not None and not float(session_cache_gib) >= 0:  # before any weights are loaded
            raise ValueError(f"HFEngine: session_cache_gib must be >= 0, got {session_cache_gib}")
        sessions = SessionCaches(default_budget_bytes() if session_cache_gib is None
                                 else int(float(session_cache_gib) * 2**30))
        loads_model = model is None or isinstance(model, (str, bytes)) or hasattr(model, "__fspath__")
        if loads_model:
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
        # grouped key/value heads read in place, not copied to every query head (hf_attention); a model handed in
        # is left as it is (it may be a trainer's, whose code checks the attention's name)
        self.grouped_attention = use_grouped_attention(self.model) if loads_model else has_grouped_attention(self.model)
        self.max_batch_size = int(max_batch_size)
        self.batch_wait_s = float(batch_wait_s)
        self.max_batch_wait_s = float(max_batch_wait_s)
        self.max_expect_wait_s = float(max_expect_wait_s)
        if sync_interval is not None and int(sync_interval) < 1:
            raise ValueError(f"HFEngine: sync_interval must be >= 1, got {sync_interval}")
        self.sync_interval = None if sync_interval is None else int(sync_interval)
        if decode_mode not in ("auto", "dynamic", "static"):
            raise ValueError(f"HFEngine: decode_mode must be auto, dynamic or static, got {decode_mode!r}")
        self.decode_mode = decode_mode
        self.compile_decode = compiles_by_default(self.device) if compile_decode is None else bool(compile_decode)
        self.share_prefill = bool(share_prefill)
        self.sessions = sessions
        self._static_caches: Dict[int, Tuple[int, Any]] = {}  # batch size -> (length, cache), see _static_cache
        self._compiled_forward: Any = None  # None: not yet compiled; False: the compiled step failed, eager
        self._compiled_shapes: set = set()
        self.on_progress: Optional[Callable[[int, int], None]] = None
        self._open_sessions = 0  # announced by expect_sessions and not yet finished
        self._last_turns: set = set()  # sessions whose next request is their last: nothing to keep for them
        self._sessions_lock = threading.Lock()
        self._stop_tables: Dict[Any, Any] = {}
        self._stop_matchers: Dict[Any, StopStrings] = {}
        forward_parameters = inspect.signature(model.forward).parameters
        # transformers 5 names the KV cache argument ``cache`` (``past_key_values`` is deprecated there).
        self._cache_keyword = "cache" if "cache" in forward_parameters else "past_key_values"
        self._accepts_logits_to_keep = "logits_to_keep" in forward_parameters
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
        self._lent_weights: Optional[WeightLoan] = None  # set by lend_weights
        # Counters for benchmarks: batches run, sequences and tokens generated, prompt positions run through the model
        # and prompt positions read from a session's kept cache instead.
        self.stats: Dict[str, int] = {"batches": 0, "sequences": 0, "generated_tokens": 0, "prefill_tokens": 0,
                                      "resumed_tokens": 0}

    # ------------------------------------------------------------------ protocol
    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[SamplingParams] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput:
        """Generate one continuation per prompt; returns ids, decoded text, stop reasons and (optionally) logprobs.
        ``messages`` are not needed here; ``session_ids`` order a batch's rows (see ``_run_worker``)."""
        prompts = validate_prompts(prompt_token_ids)
        sampling = resolve_sampling(sampling_params)  # type: ignore[arg-type]
        sessions = list(session_ids or []) + [None] * (len(prompts) - len(session_ids or []))
        futures = [self.submit(prompt, sampling, session) for prompt, session in zip(prompts, sessions)]
        results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        return assemble_output(list(results), sampling.logprobs)

    def expect_sessions(self, count: int) -> None:
        """Announce ``count`` sessions (trajectories) that will send requests, each ending with
        :meth:`finish_session`: while any is open, a batch starts once every open session has a request queued
        instead of after a time window, so the requests of one step decode as one batch."""
        if int(count) < 0:
            raise ValueError(f"expect_sessions: count must be >= 0, got {count}")
        with self._sessions_lock:
            self._open_sessions += int(count)

    def finish_session(self, session_id: str) -> None:
        """A session ended: its kept KV cache is let go, and if :meth:`expect_sessions` announced it, the next batch
        no longer waits for it."""
        self.sessions.forget(session_id)
        with self._sessions_lock:
            self._last_turns.discard(session_id)
            if self._open_sessions == 0:
                return
            self._open_sessions -= 1
        self._queue.put(_WAKE)

    def last_turn(self, session_id: str) -> None:
        """The session's next request is its last: its cache is not kept when that request ends (a single-turn
        trajectory's never is)."""
        if not self.sessions.enabled or (self._static_decoding() and self._compiles()):
            return  # nothing is kept anyway
        with self._sessions_lock:
            if len(self._last_turns) >= MAX_LAST_TURNS:  # hints of sessions never finished: let them go
                self._last_turns.clear()
            self._last_turns.add(session_id)

    def submit(self, prompt: List[int], sampling: ResolvedSampling, session: Optional[str] = None
               ) -> "Future[SequenceResult]":
        """Queue one prompt (of ``session``, a trajectory); the returned future resolves to a :class:`SequenceResult`
        (thread-safe)."""
        if self._closed:
            raise EngineError("HFEngine is closed")
        if self._sleeping:
            raise EngineError("HFEngine is asleep; call wake_up() before generate()")
        self._ensure_worker()
        future: Future = Future()
        self._queue.put(_Request(prompt, sampling, future, session))
        return future

    async def update_weights(self, named_tensors: Union[Mapping[str, Any], Iterable[Tuple[str, Any]], str]) -> None:
        """Load new weights: a state dict, an iterable of ``(name, tensor)``, or a checkpoint folder.

        Names must match the model's parameters; an unknown name raises (nothing is loaded then).
        """
        await asyncio.get_running_loop().run_in_executor(None, self._load_weights, named_tensors)

    async def sleep(self) -> None:
        """Free accelerator memory by moving the model to CPU and dropping the kept KV caches (no-op on CPU, and while
        the weights are shared with a trainer or lent to one: that memory is the trainer's too); the sessions' kept
        caches go on any device, and none is kept until :meth:`wake_up`; generate() refuses meanwhile."""
        self._sleeping = True
        self.sessions.pause()
        if self.device.type != "cpu" and not self._weights_held_with_trainer():
            with self._model_lock:
                self.model.to("cpu")
                self._static_caches.clear()  # (the compiled step records its graphs again on the new addresses)
                if self.device.type == "cuda":
                    import torch

                    torch.cuda.empty_cache()  # back to the device, for another process (this one would reuse it)

    async def wake_up(self) -> None:
        if self.device.type != "cpu" and not self._weights_held_with_trainer():
            with self._model_lock:
                self.model.to(self.device)
        self.sessions.resume()
        self._sleeping = False

    def close(self) -> None:
        """Stop the worker thread; pending requests, and a batch under way (at its next decode step), fail with
        :class:`EngineError`."""
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
        if self._lent_weights is not None:
            raise ValueError("share_weights: the engine's weights are lent to a trainer (lend_weights)")
        with self._model_lock:  # the version and the kept caches change before the next batch can start
            for name, param in own.items():
                param.data = tensors[name]
            self._shared_weights = {name: tensors[name] for name in own}
            self.weight_version += 1
            self.sessions.clear()

    def shares_weights(self) -> bool:
        """True while every parameter still reads the tensors given to :meth:`share_weights`."""
        return self._reads(self._shared_weights)

    def lend_weights(self) -> "WeightLoan":
        """The model's own parameter tensors, by name (a tied one under each of its names), for a trainer in this
        process to write its weights into after each optimizer step and to compute with meanwhile
        (``skygym_train.workers.borrowed_weights``): the trainer's bf16 compute copy and this engine's weights
        are then one tensor, and a weight sync moves nothing (:meth:`weights_changed` says the weights moved).

        Nothing moves: the tensors stay where a compiled decode step reads them. While lent, :meth:`sleep` leaves
        them on the device and :meth:`update_weights` refuses (its write would leave the trainer computing with
        weights that are not its own); :meth:`recall_weights` ends the loan. The caller must not write the
        tensors while a generation runs."""
        if self._shared_weights is not None:
            raise ValueError("lend_weights: the engine reads a trainer's weights already (share_weights)")
        if self._lent_weights is not None:
            raise ValueError("lend_weights: the engine's weights are lent already (one borrower at a time)")
        with self._model_lock:
            # one detached view per parameter (a tied one under each of its names): it shares the parameter's
            # version counter, so autograd sees a write into it between a forward and a backward pass
            views = {id(param): param.detach() for param in self.model.parameters()}
            self._lent_weights = WeightLoan((name, views[id(param)]) for name, param in self.model.named_parameters(
                remove_duplicate=False))
            return self._lent_weights

    def lends_weights(self) -> bool:
        """True while every parameter is still the tensor handed out by :meth:`lend_weights`."""
        return self._reads(self._lent_weights)

    def recall_weights(self) -> None:
        """End the loan of :meth:`lend_weights`: the borrower sees it (``WeightLoan.recalled``) and stops reading
        and writing the tensors; the engine alone writes them again (nothing moves)."""
        if self._lent_weights is not None:
            self._lent_weights.recalled = True
        self._lent_weights = None

    def weights_changed(self) -> None:
        """The tensors this engine reads (shared with a trainer or lent to one) were written in place: caches
        computed with the old weights are not resumed."""
        with self._model_lock:
            self.weight_version += 1
            self.sessions.clear()

    def _reads(self, tensors: Optional[Mapping[str, Any]]) -> bool:
        if tensors is None:
            return False
        return all(param.data_ptr() == tensors[name].data_ptr() for name, param in self.model.named_parameters())

    def _weights_held_with_trainer(self) -> bool:
        return self._shared_weights is not None or self._lent_weights is not None

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
        if self._lent_weights is not None:
            raise RuntimeError("update_weights: the engine's weights are lent to a trainer, which writes them after "
                               "each of its optimizer steps (lend_weights); recall_weights() ends the loan")
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
            # before the next batch can start: caches computed with the old weights are not resumed
            self.weight_version += 1
            self.sessions.clear()

    # ------------------------------------------------------------------ worker
    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run_worker, name="hf-engine", daemon=True)
            self._worker.start()

    def _run_worker(self) -> None:
        while True:
            pending = self._collect()
            if pending is None:
                self._fail_pending(EngineError("HFEngine was closed"))
                return
            # Rows in session order, not arrival order: trajectories reach the engine in whatever order their env
            # calls end, and an unseeded row's random numbers are the next ones of the global generator
            # (hf_sampling.draw_uniforms), so a run would otherwise sample differently from a rerun of it
            pending.sort(key=lambda request: (request.session is None, request.session or ""))
            groups: Dict[ResolvedSampling, List[_Request]] = {}
            for request in pending:
                groups.setdefault(request.sampling.without_seed(), []).append(request)
            for requests in groups.values():
                for start in range(0, len(requests), self.max_batch_size):
                    chunk = requests[start : start + self.max_batch_size]
                    try:
                        with self._model_lock:
                            self._generate_batch(chunk)
                    except BaseException as exc:  # the requests fail; the worker lives on
                        if not self._closed:
                            logger.exception("HFEngine batch failed")
                        for request in chunk:
                            if not request.future.done():
                                request.future.set_exception(EngineError(f"generation failed: {exc!r}"))

    def _collect(self) -> Optional[List[_Request]]:
        """The requests of the next batch (None once the engine is closed).

        While sessions announced by :meth:`expect_sessions` are open, the batch waits until every open session has a
        request queued (a session that ends without one is closed by :meth:`finish_session`), for at most
        ``max_expect_wait_s``: those requests belong together, and a batch cannot be joined once it runs. Otherwise it
        keeps collecting while requests arrive less than ``batch_wait_s`` apart, for at most ``max_batch_wait_s``:
        trajectories started together reach the engine a few milliseconds apart (env set-up, templating).
        """
        pending: List[_Request] = []
        while not pending:  # wake-ups (a session closed) may come before any request
            first = self._queue.get()
            if first is _SHUTDOWN:
                return None
            if isinstance(first, _Request):
                pending.append(first)
        started = time.monotonic()
        while len(pending) < self.max_batch_size * 4:
            with self._sessions_lock:
                waiting_for = self._open_sessions
            if waiting_for:
                if len(pending) >= waiting_for:
                    break
                remaining = started + self.max_expect_wait_s - time.monotonic()
                wait = remaining
            else:
                remaining = started + self.max_batch_wait_s - time.monotonic()
                wait = min(self.batch_wait_s, remaining)
            if remaining <= 0:
                break
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                if waiting_for:
                    continue  # the deadline check above ends the wait
                break
            if item is _SHUTDOWN:
                self._queue.put(_SHUTDOWN)
                break
            if isinstance(item, _Request):
                pending.append(item)
        return pending

    def _fail_pending(self, error: Exception) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Request) and not item.future.done():
                item.future.set_exception(error)

    # ------------------------------------------------------------------ decoding
    def _generate_batch(self, requests: List[_Request]) -> None:
        """Decode a batch of requests that share sampling parameters (seeds may differ per row); each request's future
        is resolved as soon as its row ends.

        Everything per token stays on the model's device: sampling, log-probs, the EOS/stop-token check and the
        record of generated ids. The host looks every ``sync_interval`` steps (one read of the rows' stop positions,
        plus the new ids where stop strings are set): it reports progress, hands out the rows that ended and, unless
        the decode step is compiled, drops them from the batch and the KV cache. A row's tokens past its end are
        discarded, so the result does not depend on how often the host looks.
        """
        import torch

        if self._closed:  # the next chunk of a batch close() interrupted: not even its prefill runs
            raise EngineError("HFEngine was closed during generation")
        prompts = [r.prompt for r in requests]
        sampling = requests[0].sampling
        batch, steps, device = len(prompts), sampling.max_tokens, self.device
        static = self._static_decoding()
        # A compiled decode step has fixed shapes: ended rows decode on, unread, and the batch is padded with rows
        # nobody reads up to a power of two (each batch size compiles once: a multi-turn rollout's later turns
        # come in every size). Uncompiled, ended rows leave the batch and the KV cache.
        compiled = static and self._compiles()
        width = min(1 << (batch - 1).bit_length(), max(batch, self.max_batch_size)) if compiled else batch
        prompts += [[self.pad_token_id]] * (width - batch)  # one token each: a row must attend to something
        # Uncompiled, the rows can be rebuilt after the prefill: a session's next turn starts from the cache its last
        # turn kept, or else a prompt shared by several rows (a GRPO group's samples) and a prefix shared by every
        # prompt (a system prompt, worked examples) are computed once. A compiled step's cache must stay where it
        # was recorded, and on accelerators the prefill is cheap anyway.
        rebuilds = not compiled and self._shares_prefill()
        keeps = rebuilds and self.sessions.enabled and any(r.session is not None for r in requests)
        resumed = self._resumed(requests) if keeps else None
        plan = plan_prefill(prompts) if self.share_prefill and rebuilds else None
        if resumed is not None and len(prompts) * resumed_width(prompts, resumed, kept=False) >= prefill_cost(
                prompts, plan):
            resumed = None  # a new prompt as long as the rest would pad every resumed row to its length
        if resumed is not None:
            plan = None
        # the prompts' positions in the cache (a resumed row's kept part and its new part are padded separately)
        max_len = max(len(p) for p in prompts) if resumed is None else resumed_width(prompts, resumed)
        seeds = [r.sampling.seed for r in requests] + [0] * (width - batch)
        uniforms = None if sampling.temperature == 0 else draw_uniforms(seeds, steps, device)
        sync_interval = self.sync_interval or (1 if device.type == "cpu" else 16)
        self.stats["batches"] += 1  # counted before any row is handed out: a caller may read them on its result
        self.stats["sequences"] += batch

        with torch.inference_mode():
            if static:  # a KV cache of fixed size: no copy of the whole cache per token, as a growing one makes
                length, cache = self._static_cache(width, max_len + steps, reuse=compiled)
            else:
                length, cache = max_len, self._new_cache()
            if resumed is not None:
                next_logits, attention, positions = self._prefill_resumed(prompts, resumed, cache, length)
                resumed = None  # the kept caches are in the batch's now: let them go before rows keep new ones
            elif plan is None:
                next_logits, attention, positions = self._prefill(prompts, cache, length)
            else:
                next_logits, attention, positions = self._prefill_shared(plan, cache, length, static)
            vocab = next_logits.shape[-1]
            stop_token = self._stop_token_table(sampling.stop_token_ids, vocab, device)
            stops = self._stop_strings(sampling.stop, vocab) if sampling.stop else None
            out_ids = torch.zeros((width, steps), dtype=torch.long, device=device)
            out_logprobs = torch.zeros((width, steps), dtype=torch.float32, device=device)
            first_stop = torch.full((width,), steps, dtype=torch.long, device=device)  # step of the row's stop token
            rows = list(range(batch))  # the requests' rows still decoding
            rows_index = torch.arange(batch, device=device)
            # The row of the tensors above that each row of the model's batch is: the rows still decoding, or every
            # row, padding included, when the decode step is compiled.
            batch_rows = torch.arange(width, device=device) if compiled else rows_index
            last_pos = positions[:, -1:]
            checked = 0  # steps before this one have been looked at on the host
            for step in range(steps):
                if self._closed:  # close() (Ctrl-C in a command) waits for this thread: it stops within a step
                    raise EngineError("HFEngine was closed during generation")
                tokens, token_logprobs = sample_tokens(
                    next_logits, sampling, None if uniforms is None else uniforms[batch_rows, step]
                )
                out_ids[batch_rows, step] = tokens
                out_logprobs[batch_rows, step] = token_logprobs
                previous = first_stop[batch_rows]
                first_stop[batch_rows] = torch.where(stop_token[tokens] & (previous == steps), step, previous)
                if step + 1 - checked >= sync_interval or step == steps - 1:
                    ended = self._ended_rows(rows, rows_index, first_stop, out_ids, checked, step, steps, stops)
                    # progress first: a caller woken by its result sees its rows counted
                    self._report_progress(len(rows) * (step + 1 - checked) + len(ended) * (steps - step - 1),
                                          len(ended))
                    results = self._results(ended, out_ids, out_logprobs, sampling.logprobs)
                    if keeps:  # before the rows leave the cache, and before a caller can finish their sessions
                        self._keep(requests, results, rows, cache, attention)
                    self._deliver(requests, results)
                    checked = step + 1
                    if len(ended) == len(rows):
                        break
                    if ended:
                        gone = {row for row, _, _ in ended}
                        keep = [p for p, row in enumerate(rows) if row not in gone]
                        rows = [rows[p] for p in keep]
                        keep_index = torch.tensor(keep, device=device)
                        rows_index = rows_index[keep_index]
                        if not compiled:  # ended rows leave the batch and the KV cache: they would only cost compute
                            batch_rows, tokens = rows_index, tokens[keep_index]
                            cache.reorder_cache(keep_index)
                            attention, last_pos = attention[keep_index], last_pos[keep_index]
                last_pos = last_pos + 1
                if static:
                    attention[:, max_len + step] = 1
                    out = self._decode_step(tokens.view(-1, 1), attention, last_pos, cache)
                else:
                    attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=1)
                    out = self._forward(tokens.view(-1, 1), attention, last_pos, cache)
                next_logits = out.logits[:, -1, :].float()

    def _ended_rows(self, rows: List[int], rows_index: Any, first_stop: Any, out_ids: Any, checked: int, step: int,
                    steps: int, stops: Optional[StopStrings]) -> List[Tuple[int, int, str]]:
        """``(row, length, stop_reason)`` of the rows that ended by ``step`` (two reads from the device at most)."""
        stop_steps = first_stop[rows_index].tolist()
        window_start = 0
        windows: Optional[List[List[int]]] = None
        if stops is not None:  # the new ids and enough context before them for the stop strings' tails
            window_start = max(0, checked - stops.lookback)
            windows = out_ids[rows_index, window_start : step + 1].tolist()
        ended = []
        for position, row in enumerate(rows):
            end = stop_steps[position] if stop_steps[position] < steps else None
            if windows is not None:
                limit = (step + 1 if end is None else end) - window_start
                hit = stops.first_stop(windows[position], checked - window_start, limit)  # type: ignore[union-attr]
                if hit is not None:
                    end = hit + window_start
            if end is not None:
                ended.append((row, end + 1, "stop"))
            elif step == steps - 1:
                ended.append((row, steps, "length"))
        return ended

    def _results(self, ended: List[Tuple[int, int, str]], out_ids: Any, out_logprobs: Any, want_logprobs: bool
                 ) -> List[Tuple[int, SequenceResult]]:
        """The ended rows' results, their ids (and logprobs) read in one copy each."""
        import torch

        if not ended:
            return []
        index = torch.tensor([row for row, _, _ in ended], device=out_ids.device)
        width = max(length for _, length, _ in ended)
        ids = out_ids[index, :width].tolist()
        logprobs = out_logprobs[index, :width].tolist() if want_logprobs else None
        results = []
        for i, (row, length, reason) in enumerate(ended):
            token_ids = ids[i][:length]
            results.append((row, SequenceResult(
                token_ids=token_ids,
                text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                stop_reason=reason,
                logprobs=logprobs[i][:length] if logprobs is not None else None,
            )))
        return results

    def _deliver(self, requests: List[_Request], results: List[Tuple[int, SequenceResult]]) -> None:
        for row, result in results:
            self.stats["generated_tokens"] += len(result.token_ids)
            future = requests[row].future
            if not future.done():
                future.set_result(result)

    # ------------------------------------------------------------------ sessions' kept caches
    def _resumed(self, requests: List[_Request]) -> Optional[List[Optional[Tuple[int, KeptCache]]]]:
        """Per row, ``(positions, kept cache)`` of its session's last turn that its prompt starts with; None when
        no row has any."""
        resumed = [None if r.session is None else self.sessions.take(r.session, r.prompt, self.weight_version)
                   for r in requests]
        return resumed if any(item is not None for item in resumed) else None

    def _keep(self, requests: List[_Request], results: List[Tuple[int, SequenceResult]], rows: List[int], cache: Any,
              attention: Any) -> None:
        """Keep the cache of each ended row that has a session: its prompt and answer, as far as computed."""
        place = {row: position for position, row in enumerate(rows)}  # the row's place in the model's batch
        for row, result in results:
            request = requests[row]
            with self._sessions_lock:
                last = request.session in self._last_turns
                self._last_turns.discard(request.session)
            # a request whose future is done before its result was set was cancelled: its trajectory has ended,
            # and may already have finished its session
            if request.session is not None and not last and not request.future.done():
                kept = keep_row(cache, place[row], attention[place[row]], request.prompt + result.token_ids,
                                self.weight_version)
                self.sessions.put(request.session, kept)

    def _report_progress(self, positions: int, rows: int) -> None:
        """Tell ``on_progress`` how many token positions of the batch's budget (rows x max tokens) were settled and
        how many rows ended."""
        if self.on_progress is not None and positions > 0:
            try:
                self.on_progress(positions, rows)
            except Exception:  # a broken progress display must not fail the generation
                logger.exception("HFEngine: on_progress failed")

    def _prefill(self, prompts: List[List[int]], cache: Any, length: int) -> Tuple[Any, Any, Any]:
        """Run the left-padded ``prompts`` through the model into ``cache``; returns the next-token logits (float32),
        the attention mask over the cache's ``length`` positions, and each row's position ids."""
        input_ids, attention = self._left_padded(prompts)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        attention = self._full_length_mask(attention, length)
        out = self._forward(input_ids, attention, positions, cache, last_only=True)
        self.stats["prefill_tokens"] += input_ids.numel()
        return out.logits[:, -1, :].float(), attention, positions

    def _prefill_shared(self, plan: "PrefillPlan", cache: Any, length: int, static: bool) -> Tuple[Any, Any, Any]:
        """:meth:`_prefill` computing ``plan.prefix`` once and each distinct prompt once, then giving every row its
        prompt's cache and logits. A row's cache holds the prefix, then its suffix left-padded to the longest suffix:
        the padding sits between them, masked, and the position ids run on across it, so the row attends to what it
        would attend to in the left-padded batch, with the same positions."""
        import torch

        device, prefix = self.device, len(plan.prefix)
        if prefix:
            ones = torch.ones((1, prefix), dtype=torch.long, device=device)
            self._forward(torch.tensor([plan.prefix], device=device),
                          self._full_length_mask(ones, length) if static else ones,
                          torch.arange(prefix, device=device)[None], cache, last_only=True)  # only its cache is read
            self.stats["prefill_tokens"] += prefix
            cache.reorder_cache(torch.zeros(len(plan.suffixes), dtype=torch.long, device=device))  # one copy per prompt
        input_ids, suffix_mask = self._left_padded(plan.suffixes)
        attention = torch.cat([suffix_mask.new_ones((len(plan.suffixes), prefix)), suffix_mask], dim=1)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self._forward(input_ids, self._full_length_mask(attention, length), positions[:, prefix:], cache,
                            last_only=True)
        self.stats["prefill_tokens"] += input_ids.numel()
        rows = torch.tensor(plan.rows, dtype=torch.long, device=device)
        cache.reorder_cache(rows)  # row i: the cache of its prompt
        attention = self._full_length_mask(attention, length)
        return out.logits[:, -1, :].float()[rows], attention[rows], positions[rows]

    def _prefill_resumed(self, prompts: List[List[int]], resumed: List[Optional[Tuple[int, KeptCache]]], cache: Any,
                         length: int) -> Tuple[Any, Any, Any]:
        """:meth:`_prefill` of rows that start from their session's kept cache: a row's cache holds the kept
        positions right-aligned in the widest kept part, then the rest of its prompt left-padded to the longest rest
        (the padding between is masked, the position ids run on across it, as in :meth:`_prefill_shared`)."""
        import torch

        counts = [0 if item is None else item[0] for item in resumed]
        kept = max(counts)
        kept_mask = resume_into(cache, resumed, kept)
        input_ids, rest_mask = self._left_padded([p[count:] for p, count in zip(prompts, counts)])
        attention = torch.cat([kept_mask.to(rest_mask.device), rest_mask], dim=1)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        attention = self._full_length_mask(attention, length)
        out = self._forward(input_ids, attention, positions[:, kept:], cache, last_only=True)
        self.stats["prefill_tokens"] += input_ids.numel()
        self.stats["resumed_tokens"] += sum(counts)
        return out.logits[:, -1, :].float(), attention, positions

    def _left_padded(self, sequences: List[List[int]]) -> Tuple[Any, Any]:
        """``(ids, mask)`` on the model's device: ``sequences`` left-padded to the longest, 1 where a token is."""
        import torch

        width = max(len(s) for s in sequences)
        input_ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, sequence in enumerate(sequences):
            input_ids[row, width - len(sequence) :] = torch.tensor(sequence, dtype=torch.long)
            mask[row, width - len(sequence) :] = 1
        return input_ids.to(self.device), mask.to(self.device)

    def _shares_prefill(self) -> bool:
        """Whether the model's attention can read a row's cache with padding between its prefix and the rest: every
        layer attends to the whole context (a sliding window counts cache slots, not positions)."""
        config = getattr(self.model, "config", None)
        get_text_config = getattr(config, "get_text_config", None)
        config = get_text_config() if callable(get_text_config) else config
        layer_types = getattr(config, "layer_types", None)
        if layer_types is not None:
            return all(kind == "full_attention" for kind in layer_types)
        return getattr(config, "sliding_window", None) is None or getattr(config, "use_sliding_window", True) is False

    def _forward(self, input_ids: Any, attention: Any, positions: Any, cache: Any, last_only: bool = False) -> Any:
        inputs = {"input_ids": input_ids, "attention_mask": attention, "position_ids": positions,
                  self._cache_keyword: cache, "use_cache": True}
        if last_only and self._accepts_logits_to_keep:
            # Only the last position's logits are needed; computing the full vocabulary for every prompt token
            # dominates the prefill of small models.
            inputs["logits_to_keep"] = 1
        return self.model(**inputs)

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache()

    # ------------------------------------------------------------------ static KV cache (accelerators)
    def _static_decoding(self) -> bool:
        """Whether batches decode with a static KV cache: ``decode_mode="static"``, or ``"auto"`` with a transformers
        whose static cache tracks its own write position (5.x)."""
        if self.decode_mode == "dynamic":
            return False
        if self.decode_mode == "static":
            if not _static_cache_supported():
                raise EngineError("decode_mode='static' needs transformers >= 5 (a StaticCache that tracks its length)")
            return True
        return _static_cache_supported()

    def _compiles(self) -> bool:
        return self.compile_decode and self._compiled_forward is not False

    def _static_cache(self, batch: int, length: int, reuse: bool) -> Tuple[int, Any]:
        """``(its length, a static cache)`` for ``batch`` rows of at least ``length`` positions (rounded up by
        :func:`cache_length`).

        With ``reuse`` (a compiled decode step reads the cache where it is: on CUDA a new cache means recording the
        step's graphs again, a new length compiling it again) the engine keeps one cache per batch size for the
        next batch, reset: a later batch that needs fewer positions reuses it (masked past its own end), one that
        needs more replaces it. So the device holds one cache for a trainer's fixed batch, not one per prompt
        length, and a new length compiles once, not per step.
        At most ``MAX_KEPT_CACHES`` batch sizes are kept (each holds rows x length keys and values per layer).
        """
        from transformers import StaticCache

        length = cache_length(length)
        if not reuse:
            return length, StaticCache(config=self.model.config, max_cache_len=length)
        # popped and put back, so the dict's order is the order of use; a shorter cache is let go before the
        # longer one that replaces it is allocated
        kept = self._static_caches.pop(batch, None)
        if kept is not None and kept[0] >= length:
            kept[1].reset()
        else:
            while len(self._static_caches) >= MAX_KEPT_CACHES:
                self._static_caches.pop(next(iter(self._static_caches)))  # the least recently used
            kept = (length, StaticCache(config=self.model.config, max_cache_len=length))
        self._static_caches[batch] = kept
        return kept

    def device_memory_bytes(self) -> Dict[str, int]:
        """What this engine holds on its device beyond a generation: its own weights (0 while it reads a trainer's,
        see :meth:`share_weights`) and the KV caches kept for compiled decoding."""
        weights = 0 if self.shares_weights() else sum(
            p.numel() * p.element_size() for p in self.model.parameters())
        caches = sum(tensor.numel() * tensor.element_size()
                     for _, cache in list(self._static_caches.values())  # the worker may change the dict meanwhile
                     for layer in cache_layers(cache)
                     for tensor in layer
                     if hasattr(tensor, "element_size"))
        return {"weights": weights, "kv_cache": caches}

    def _full_length_mask(self, attention: Any, length: int) -> Any:
        """The prompt's padding mask widened to the static cache's ``length`` (positions not yet written are 0)."""
        if attention.shape[1] == length:
            return attention
        full = attention.new_zeros((attention.shape[0], length))
        full[:, : attention.shape[1]] = attention
        return full

    def _decode_step(self, tokens: Any, attention: Any, positions: Any, cache: Any) -> Any:
        """One decode step on the static cache: compiled when ``compile_decode`` (with CUDA graphs on CUDA); if the
        compiled step fails, eager from then on, with a warning."""
        if self._compiles():
            import torch

            if self._compiled_forward is None:
                self._compiled_forward = torch.compile(self.model.forward, mode="reduce-overhead", dynamic=False)
            shape = (tokens.shape[0], attention.shape[1])
            try:
                _ready_cudagraph_thread_state()
                torch.compiler.cudagraph_mark_step_begin()
                # each batch width and cache length compiles once: more than dynamo's default of 8 per function
                with torch._dynamo.config.patch(**_recompile_limit(COMPILED_SHAPES_LIMIT)):
                    out = self._compiled_forward(input_ids=tokens, attention_mask=attention, position_ids=positions,
                                                 **{self._cache_keyword: cache}, use_cache=True)
                self._compiled_shapes.add(shape)
                return out
            except Exception as exc:
                # Compile errors come on a shape's first call; CUDA graphs record on its second (the first runs
                # them uncaptured), so a capture error comes later. Either way: eagerly from now on, without the
                # caches kept for the compiled step. A shape that ran before may have moved the cache already:
                # that batch fails.
                logger.warning("HFEngine: the compiled decode step failed (%r); decoding eagerly from now on", exc)
                self._compiled_forward = False
                self._static_caches.clear()
                if shape in self._compiled_shapes:
                    raise
        return self._forward(tokens, attention, positions, cache)

    def _stop_token_table(self, stop_token_ids: Tuple[int, ...], vocab: int, device: Any) -> Any:
        """A ``(vocab,)`` boolean table on ``device``: True for EOS and the request's stop tokens."""
        import torch

        key = (stop_token_ids, vocab, str(device))
        table = self._stop_tables.get(key)
        if table is None:
            ids = sorted(t for t in set(self.eos_token_ids) | set(stop_token_ids) if 0 <= t < vocab)
            table = torch.zeros(vocab, dtype=torch.bool)
            table[ids] = True
            table = table.to(device)
            if len(self._stop_tables) >= 32:
                self._stop_tables.clear()
            self._stop_tables[key] = table
        return table

    def _stop_strings(self, stop: Tuple[str, ...], vocab: int) -> StopStrings:
        matcher = self._stop_matchers.get((stop, vocab))
        if matcher is None:
            matcher = StopStrings(self.tokenizer, stop, vocab)
            if len(self._stop_matchers) >= 16:
                self._stop_matchers.clear()
            self._stop_matchers[(stop, vocab)] = matcher
        return matcher


@dataclass
class PrefillPlan:
    """How :meth:`HFEngine._prefill_shared` computes a batch's prompts: ``prefix`` once, each of ``suffixes`` once
    after it, and row ``i`` of the batch from ``suffixes[rows[i]]``."""

    prefix: List[int]
    suffixes: List[List[int]]
    rows: List[int]


def resumed_width(prompts: List[List[int]], resumed: List[Optional[Tuple[int, KeptCache]]], kept: bool = True) -> int:
    """The positions a batch's prompts take in the cache when rows resume kept caches (see
    :meth:`HFEngine._prefill_resumed`): the widest kept part and the longest rest (the rest alone: ``kept=False``,
    the positions each row computes)."""
    counts = [0 if item is None else item[0] for item in resumed]
    return max(counts) * kept + max(len(p) - count for p, count in zip(prompts, counts))


def prefill_cost(prompts: List[List[int]], plan: Optional["PrefillPlan"]) -> int:
    """The positions the prefill of ``prompts`` computes, with ``plan`` or left-padded."""
    if plan is None:
        return len(prompts) * max(len(p) for p in prompts)
    return len(plan.prefix) + len(plan.suffixes) * max(len(s) for s in plan.suffixes)


class WeightLoan(dict):
    """What :meth:`HFEngine.lend_weights` hands out: its parameter tensors by name, and ``recalled``, which turns
    true when the engine takes them back (:meth:`HFEngine.recall_weights`); the borrower checks it before it reads
    or writes them."""

    recalled = False


MAX_LAST_TURNS = 65536
"""How many :meth:`HFEngine.last_turn` hints an engine holds at most (a hint goes when its request ends or its session
does; a caller that never finishes its sessions would otherwise grow them without end)."""

MIN_SHARED_PREFIX = 16
"""A common prefix shorter than this is computed with each prompt: a forward pass of its own costs more."""


def plan_prefill(prompts: List[List[int]]) -> Optional[PrefillPlan]:
    """The shared prefill of ``prompts``, or None when it would compute as many positions as the left-padded batch.

    Identical prompts are computed once. The longest prefix common to every distinct prompt (at least
    ``MIN_SHARED_PREFIX`` positions; each prompt keeps at least one position of its own, whose logits start its
    row) is computed once, for the batch."""
    distinct: Dict[Tuple[int, ...], int] = {}
    rows = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
    unique = list(distinct)
    shortest = min(len(p) for p in unique)
    prefix = 0
    if len(unique) > 1:
        first, last = min(unique), max(unique)  # the common prefix of all is that of the least and the greatest
        while prefix < shortest - 1 and first[prefix] == last[prefix]:
            prefix += 1
    else:
        prefix = shortest - 1
    if prefix < MIN_SHARED_PREFIX:
        prefix = 0
    if prefix == 0 and len(unique) == len(prompts):
        return None
    return PrefillPlan(list(unique[0][:prefix]), [list(p[prefix:]) for p in unique], rows)


MAX_KEPT_CACHES = 8
"""Static KV caches an engine keeps for compiled decoding, one per batch size (see ``HFEngine._static_cache``). The
sizes are powers of two, so together they hold at most about twice the largest."""

COMPILED_SHAPES_LIMIT = 64
"""How many (batch width, cache length) shapes the decode step may compile (dynamo's own limit is 8 per function;
past the limit, dynamo runs new shapes uncompiled)."""


def cache_length(positions: int) -> int:
    """The length of a static KV cache for ``positions``: rounded up to a multiple of 128 up to 1,024 positions, of
    1/8 of the next power of two beyond (256 up to 2,048, 512 up to 4,096, ...). A compiled decode step compiles once
    per length and reads the whole cache every step: past 1,024 positions each doubling comes in four lengths, with
    less than a quarter of the cache slack, and a context growing to 8,192 positions compiles at most 20 lengths (a
    multiple of 256 throughout would be 32)."""
    granule = max(128, (1 << max(0, positions - 1).bit_length()) // 8)
    return -(-positions // granule) * granule


def compiles_by_default(device: Any) -> bool:
    """Whether an ``HFEngine`` on ``device`` compiles its decode step unless told: on CUDA (CUDA graphs take the
    per-token launch cost away), unless ``SKYRL_GYM_HF_COMPILE_DECODE`` is 0/false/no/off."""
    import torch

    wanted = os.environ.get("SKYRL_GYM_HF_COMPILE_DECODE", "1").strip().lower() not in ("0", "false", "no", "off")
    return wanted and torch.device(device).type == "cuda"


def _recompile_limit(limit: int) -> Dict[str, int]:
    """Dynamo's per-function compile limit as a ``config.patch`` argument (``recompile_limit``; ``cache_size_limit``
    before torch 2.6)."""
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            return {name: limit}
    return {}


def _ready_cudagraph_thread_state() -> None:
    """Give this thread the CUDA-graph trees' thread-local state if it has none. Each engine decodes in a worker
    thread of its own; torch before 2.13 sets that state up only in the thread that imported the module (and
    the autograd threads that inherit it), so a compiled step called from any other thread fails an assertion
    (every engine after the first in a process fell back to eager decoding). The same set-up torch 2.13 does
    for such threads."""
    import torch
    from torch._inductor import cudagraph_trees

    local = cudagraph_trees.local
    if hasattr(local, "tree_manager_containers") or torch._C._is_key_in_tls("tree_manager_containers"):
        return
    local.tree_manager_containers = {}
    local.tree_manager_locks = collections.defaultdict(threading.Lock)
    torch._C._stash_obj_in_tls("tree_manager_containers", local.tree_manager_containers)
    torch._C._stash_obj_in_tls("tree_manager_locks", local.tree_manager_locks)


@functools.lru_cache(maxsize=None)
def _static_cache_supported() -> bool:
    """transformers 5's StaticCache advances its own write position (``cumulative_length``); 4.x needs
    ``cache_position`` arguments, which this engine does not pass."""
    try:
        from transformers.cache_utils import StaticLayer
    except ImportError:
        return False
    return "cumulative_length" in inspect.getsource(StaticLayer.update)


__all__ = ["HFEngine"]
