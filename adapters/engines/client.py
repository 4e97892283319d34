"""``EngineClient``: one engine interface over several engines, with per-trajectory affinity.

Every turn of a trajectory goes to the same engine (its prefix cache holds the conversation so far); new
trajectories go to the engine with the fewest requests in flight. Weight updates and sleep/wake fan out to all
engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from skygym_adapters.engines.base import BaseInferenceEngine, EngineError, validate_prompts
from skygym_adapters.types import InferenceEngine, InferenceEngineOutput, SamplingParams


class EngineClient(BaseInferenceEngine):
    """Spreads ``generate`` calls over ``engines``; is itself an :class:`~skygym_adapters.types.InferenceEngine`.

    ``session_ids`` (one per prompt, e.g. a trajectory id) pin a trajectory to one engine: the first request of a
    session picks the least-loaded engine, later ones reuse it. Without session ids prompts go to the least-loaded
    engine. Call :meth:`finish_session` when a trajectory ends to forget its pin.
    """

    def __init__(self, engines: Sequence[Any]) -> None:
        if not engines:
            raise ValueError("EngineClient needs at least one engine")
        for i, engine in enumerate(engines):
            if not isinstance(engine, InferenceEngine):
                raise TypeError(
                    f"engine {i} ({type(engine).__name__}) does not implement the InferenceEngine interface "
                    "(subclass skygym_adapters.engines.base.BaseInferenceEngine)"
                )
        self.engines: List[InferenceEngine] = list(engines)
        self.needs_messages = any(engine.needs_messages for engine in self.engines)
        self._in_flight = [0] * len(self.engines)
        self._affinity: Dict[str, int] = {}
        self.requests_per_engine = [0] * len(self.engines)

    @property
    def tokenizer(self) -> Any:
        return getattr(self.engines[0], "tokenizer", None)

    def engine_for(self, session_id: Optional[str]) -> int:
        """The index of the engine that serves ``session_id`` (assigned on first use)."""
        if session_id is not None and session_id in self._affinity:
            return self._affinity[session_id]
        least = min(self._in_flight)
        candidates = [i for i, n in enumerate(self._in_flight) if n == least]
        # Among equally loaded engines, a stable hash spreads sessions evenly and reproducibly.
        index = candidates[zlib.crc32(str(session_id).encode()) % len(candidates)] if session_id else candidates[0]
        if session_id is not None:
            self._affinity[session_id] = index
        return index

    def expect_sessions(self, count: int) -> None:
        """Announce ``count`` sessions to the engine (one engine only: with several, which engine serves a session is
        decided by its first request, so the engines batch by their time window)."""
        if len(self.engines) == 1:
            call_if_present(self.engines[0], "expect_sessions", count)

    def last_turn(self, session_id: str) -> None:
        """Tell the engine that serves ``session_id`` (pinned now if it has none yet) that its next request is its
        last."""
        call_if_present(self.engines[self.engine_for(session_id)], "last_turn", session_id)

    def finish_session(self, session_id: str) -> None:
        index = 0 if len(self.engines) == 1 else self._affinity.get(session_id)
        self._affinity.pop(session_id, None)
        if index is not None:
            call_if_present(self.engines[index], "finish_session", session_id)

    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[SamplingParams] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput:
        """Route each prompt to an engine; ``messages`` go along (engines that template by themselves need them)."""
        prompts = validate_prompts(prompt_token_ids)
        if messages is not None and len(messages) != len(prompts):
            raise ValueError(f"got {len(messages)} conversations for {len(prompts)} prompts")
        if session_ids is not None and len(session_ids) != len(prompts):
            raise ValueError(f"got {len(session_ids)} session ids for {len(prompts)} prompts")
        if len(self.engines) == 1:
            return await self._call(0, prompts, sampling_params, messages, session_ids)
        by_engine: Dict[int, List[int]] = {}
        for i in range(len(prompts)):
            index = self.engine_for(session_ids[i] if session_ids else None)
            by_engine.setdefault(index, []).append(i)
            self._in_flight[index] += 1  # counted now so the next prompt of this batch sees the load
        for index, rows in by_engine.items():
            self._in_flight[index] -= len(rows)
        parts = await asyncio.gather(
            *(
                self._call(index, [prompts[i] for i in rows], sampling_params,
                           [messages[i] for i in rows] if messages is not None else None,
                           [session_ids[i] for i in rows] if session_ids is not None else None)
                for index, rows in by_engine.items()
            )
        )
        merged: Dict[str, List[Any]] = {"response_ids": [None] * len(prompts), "responses": [None] * len(prompts),
                                        "stop_reasons": [None] * len(prompts)}
        logprobs: Optional[List[Any]] = [None] * len(prompts)
        for (index, rows), part in zip(by_engine.items(), parts):
            for j, i in enumerate(rows):
                merged["response_ids"][i] = part["response_ids"][j]
                merged["responses"][i] = part.get("responses", [None] * len(rows))[j]
                merged["stop_reasons"][i] = part["stop_reasons"][j]
                if logprobs is not None:
                    part_logprobs = part.get("response_logprobs")
                    if part_logprobs is None:
                        logprobs = None
                    else:
                        logprobs[i] = part_logprobs[j]
        return {**merged, "response_logprobs": logprobs}  # type: ignore[typeddict-item]

    async def _call(
        self,
        index: int,
        prompts: List[List[int]],
        sampling_params: Optional[SamplingParams],
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> Any:
        self._in_flight[index] += len(prompts)
        self.requests_per_engine[index] += len(prompts)
        engine = self.engines[index]
        try:
            if engine.needs_messages and messages is None:
                raise ValueError(f"engine {index} ({type(engine).__name__}) needs the conversations (messages=)")
            # the sessions too: an engine orders a batch's rows by them and keeps their KV caches between turns
            output = await engine.generate(prompts, sampling_params, messages=messages, session_ids=session_ids)
        finally:
            self._in_flight[index] -= len(prompts)
        if len(output["response_ids"]) != len(prompts):
            raise EngineError(
                f"engine {index} ({type(self.engines[index]).__name__}) returned {len(output['response_ids'])} "
                f"sequences for {len(prompts)} prompts"
            )
        return output

    async def update_weights(self, named_tensors: Any) -> None:
        """Send the same weights to every engine (a state dict is materialised once so each engine can read it)."""
        if not isinstance(named_tensors, (dict, str)) and not hasattr(named_tensors, "__fspath__"):
            named_tensors = dict(named_tensors)
        await asyncio.gather(*(engine.update_weights(named_tensors) for engine in self.engines))

    async def sleep(self) -> None:
        await asyncio.gather(*(e.sleep() for e in self.engines))

    async def wake_up(self) -> None:
        await asyncio.gather(*(e.wake_up() for e in self.engines))

    async def aclose(self) -> None:
        await asyncio.gather(*(e.aclose() for e in self.engines))

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


@contextlib.contextmanager
def progress_to(engine: Any, callback: Callable[[int, int], None]) -> Iterator[bool]:
    """For the duration, the engines behind ``engine`` (an :class:`EngineClient`'s, a list's, or itself) that report
    decode progress (an ``on_progress`` attribute, as :class:`~skygym_adapters.engines.hf.HFEngine` has) call
    ``callback(positions, rows)`` with the token positions settled and the rows ended since the last call. Yields
    whether any engine reports.

    >>> with progress_to(engine, lambda positions, rows: bar.update(positions)) as reporting:   # doctest: +SKIP
    ...     output = await generator.generate(batch)
    """
    reporting = _reporting_engines(engine)
    previous = [e.on_progress for e in reporting]
    for e in reporting:
        e.on_progress = callback
    try:
        yield bool(reporting)
    finally:
        for e, before in zip(reporting, previous):
            e.on_progress = before


def reports_progress(engine: Any) -> bool:
    """Whether some engine behind ``engine`` reports decode progress (see :func:`progress_to`)."""
    return bool(_reporting_engines(engine))


def engines_behind(engine: Any) -> List[Any]:
    """The engines an :class:`EngineClient` (or anything with an ``engines`` list, or a list) spreads requests
    over, or ``[engine]`` for a single one."""
    if isinstance(engine, (list, tuple)):
        return list(engine)
    return list(getattr(engine, "engines", None) or [engine])


def _reporting_engines(engine: Any) -> List[Any]:
    return [e for e in engines_behind(engine) if hasattr(e, "on_progress")]


def call_if_present(engine: Any, method: str, *args: Any) -> None:
    """Engines written against the bare protocol may lack the optional session hooks."""
    hook = getattr(engine, method, None)
    if callable(hook):
        hook(*args)


__all__ = ["EngineClient", "progress_to", "reports_progress"]
