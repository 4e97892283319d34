"""The KV cache of a conversation kept between its turns, for :class:`~skygym_adapters.engines.hf.HFEngine`.

A multi-turn trajectory sends the engine its whole context every turn: the last turn's prompt, the model's answer and
the env's observation. Computed again, the first part costs a prefill of everything said so far, turn after turn.
The engine instead keeps each session's keys and values when its row ends (:meth:`SessionCaches.put`) and, when the
session's next prompt starts with the same tokens, computes only the rest (:meth:`SessionCaches.take`).

What is kept is what the model computed, up to float rounding of one prefill against token-by-token decoding: an
entry is used only for the tokens its prompt has in common with the new one (a re-templated conversation reuses the
part that stayed the same), and only with the weights it was computed with.
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

DEFAULT_BUDGET_GIB = 2.0
"""The kept caches' default size (``SKYRL_GYM_HF_SESSION_CACHE_GIB`` overrides it, 0 turns keeping off)."""


def default_budget_bytes() -> int:
    """``SKYRL_GYM_HF_SESSION_CACHE_GIB`` (GiB, 0 for none), else :data:`DEFAULT_BUDGET_GIB`, in bytes."""
    raw = os.environ.get("SKYRL_GYM_HF_SESSION_CACHE_GIB", "").strip()
    try:
        gib = float(raw) if raw else DEFAULT_BUDGET_GIB
    except ValueError:
        raise ValueError(f"SKYRL_GYM_HF_SESSION_CACHE_GIB must be a number of GiB (0 for none), got {raw!r}") from None
    if gib < 0:
        raise ValueError(f"SKYRL_GYM_HF_SESSION_CACHE_GIB must be >= 0, got {raw!r}")
    return int(gib * 2**30)


@dataclass
class KeptCache:
    """The first ``len(tokens)`` positions of a conversation: per layer, keys and values shaped ``(heads, positions,
    head_dim)``."""

    tokens: List[int]
    layers: List[Tuple[Any, Any]]
    weight_version: int

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.layers)


class SessionCaches:
    """Each session's kept cache, least recently kept first out once they hold more than ``budget_bytes``
    (thread-safe: the engine's worker keeps and takes, a caller's thread forgets)."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError(f"SessionCaches: budget_bytes must be >= 0, got {budget_bytes}")
        self.budget_bytes = int(budget_bytes)
        self._entries: "collections.OrderedDict[str, KeptCache]" = collections.OrderedDict()
        self._bytes = 0
        self._paused = False
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, session: str, kept: KeptCache) -> None:
        """Keep ``kept`` as ``session``'s cache (replacing the one it had); one larger than the whole budget is not
        kept."""
        size = kept.nbytes
        with self._lock:
            self._forget(session)
            if size > self.budget_bytes or self._paused:
                return
            while self._bytes + size > self.budget_bytes:
                self._forget(next(iter(self._entries)))
            self._entries[session] = kept
            self._bytes += size

    def take(self, session: str, prompt: Sequence[int], weight_version: int) -> Optional[Tuple[int, KeptCache]]:
        """Remove ``session``'s cache and return ``(n, cache)``: its first ``n`` positions are ``prompt``'s first
        ``n`` tokens, ``n`` leaving at least one token of ``prompt`` to compute (its logits start the answer). None
        when the session has no cache, it was computed with other weights, or nothing of it is ``prompt``'s."""
        with self._lock:
            kept = self._forget(session)
        if kept is None or kept.weight_version != weight_version:
            return None
        shared = len(os.path.commonprefix([kept.tokens, list(prompt[: len(kept.tokens)])]))
        shared = min(shared, len(prompt) - 1)
        return (shared, kept) if shared > 0 else None

    def forget(self, session: str) -> None:
        with self._lock:
            self._forget(session)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def pause(self) -> None:
        """Let every cache go and keep none until :meth:`resume` (an engine asleep: a batch still running must
        not put its caches back on the device)."""
        with self._lock:
            self._paused = True
            self._entries.clear()
            self._bytes = 0

    def resume(self) -> None:
        with self._lock:
            self._paused = False

    def _forget(self, session: str) -> Optional[KeptCache]:
        kept = self._entries.pop(session, None)
        if kept is not None:
            self._bytes -= kept.nbytes
        return kept


def cache_layers(cache: Any) -> List[Tuple[Any, Any]]:
    """A transformers KV cache's ``(keys, values)`` per layer, each ``(batch, heads, positions, head_dim)``
    (transformers 5's ``layers``, 4.x's ``key_cache``/``value_cache``)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers if getattr(layer, "keys", None) is not None]
    return list(zip(cache.key_cache, cache.value_cache))


def keep_row(cache: Any, row: int, attention_row: Any, tokens: List[int], weight_version: int) -> KeptCache:
    """Row ``row`` of ``cache`` as a :class:`KeptCache` of ``tokens``: the row's positions that its attention mask
    marks as written (prompt, then answer, padding left out), the first ``len(tokens)`` of them, copied."""
    written = attention_row.nonzero().flatten()[: len(tokens)]
    tokens = tokens[: len(written)]
    layers = [(keys[row].index_select(1, written), values[row].index_select(1, written))
              for keys, values in cache_layers(cache)]
    return KeptCache(tokens, layers, weight_version)


def resume_into(cache: Any, resumed: List[Optional[Tuple[int, KeptCache]]], width: int) -> Any:
    """Write the kept positions of each row into the empty ``cache``, right-aligned in ``width`` positions (rows
    without any are zeros); returns the ``(rows, width)`` attention mask of what was written."""
    import torch

    template = next(item[1] for item in resumed if item is not None)
    device = template.layers[0][0].device
    mask = torch.zeros((len(resumed), width), dtype=torch.long, device=device)
    for row, item in enumerate(resumed):
        if item is not None:
            mask[row, width - item[0]:] = 1
    for index, (keys0, values0) in enumerate(template.layers):
        keys = keys0.new_zeros((len(resumed), keys0.shape[0], width, keys0.shape[2]))
        values = values0.new_zeros((len(resumed), values0.shape[0], width, values0.shape[2]))
        for row, item in enumerate(resumed):
            if item is not None:
                count, kept = item
                keys[row, :, width - count:] = kept.layers[index][0][:, :count]
                values[row, :, width - count:] = kept.layers[index][1][:, :count]
        cache.update(keys, values, index)
    return mask
