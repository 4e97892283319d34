"""Stop strings for :class:`~skygym_adapters.engines.hf.HFEngine`, checked on the host without decoding every row
at every token.

The engine hands over a window of newly generated ids per row now and then; only positions whose token can complete a
stop string are decoded (a token that completes one shows the stop's last character, or part of a multi-byte
character, in its own text), with the same tail the per-token check used: the stop must appear in the last
``len(stop) + 8`` tokens' text. The answer is the position the per-token check would have stopped at.
"""

from __future__ import annotations

from typing import Any, FrozenSet, List, Optional, Tuple

_LOOKBACK_SLACK = 8  # tokens of context beyond the stop's length (a stop can span more tokens than characters)


class StopStrings:
    """Finds the first position where a row's text comes to contain one of ``stops``."""

    def __init__(self, tokenizer: Any, stops: Tuple[str, ...], vocab_size: int) -> None:
        if not stops:
            raise ValueError("StopStrings needs at least one stop string")
        self.tokenizer = tokenizer
        self.stops = stops
        self.lookback = max(len(s) for s in stops) + _LOOKBACK_SLACK
        self.candidates = _candidate_tokens(tokenizer, stops, vocab_size)

    def first_stop(self, ids: List[int], start: int, end: Optional[int] = None) -> Optional[int]:
        """The first position ``j`` in ``[start, end)`` (``end``: ``len(ids)``) whose tail
        ``ids[j + 1 - lookback : j + 1]`` contains a stop string, or None. ``ids[:start]`` is known to hold none."""
        end = len(ids) if end is None else min(end, len(ids))
        for j in range(start, end):
            if self.candidates is not None and ids[j] not in self.candidates:
                continue
            tail = self.tokenizer.decode(ids[max(0, j + 1 - self.lookback) : j + 1], skip_special_tokens=False)
            if any(stop in tail for stop in self.stops):
                return j
        return None


def _candidate_tokens(tokenizer: Any, stops: Tuple[str, ...], vocab_size: int) -> Optional[FrozenSet[int]]:
    """The token ids that can complete a stop string, or None (every token) where a token's own text does not tell:
    a stop that ends in whitespace (tokenizers drop a token's leading space when it is decoded alone)."""
    last_chars = {stop[-1] for stop in stops}
    if any(ch.isspace() for ch in last_chars):
        return None
    known = min(vocab_size, len(tokenizer))
    texts = tokenizer.batch_decode([[i] for i in range(known)], skip_special_tokens=False)
    candidates = {
        i for i, text in enumerate(texts) if "\ufffd" in text or not text or any(ch in text for ch in last_chars)
    }
    return frozenset(candidates | set(range(known, vocab_size)))  # ids the tokenizer does not know: always checked


__all__ = ["StopStrings"]
