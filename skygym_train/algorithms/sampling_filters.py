"""DAPO's batch filters: dynamic sampling (groups whose rewards all agree teach nothing) and
overlong filtering (truncated answers are masked out of the loss rather than punished)."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence


def group_scores(rewards: Sequence[float], uids: Sequence[Any]) -> Dict[Any, List[float]]:
    groups: Dict[Any, List[float]] = defaultdict(list)
    for reward, uid in zip(rewards, uids):
        groups[uid].append(float(reward))
    return groups


def informative_groups(rewards: Sequence[float], uids: Sequence[Any], tol: float = 1e-6) -> List[Any]:
    """Group ids (in first-seen order) whose rewards are not all equal."""
    groups = group_scores(rewards, uids)
    return [uid for uid, scores in groups.items() if len(scores) > 1 and max(scores) - min(scores) > tol]


@dataclass
class DynamicSamplingDecision:
    keep_rows: List[int]
    """Rows of the batch to train on, in order (may repeat rows under ``replace``)."""
    need_more: bool
    """``filter``: not enough informative groups yet; sample another batch and call again."""
    kept_groups: int
    dropped_groups: int
    uids: List[Any] = field(default_factory=list)
    """The group of each kept row. Under ``replace`` a copy of a group is a group of its own (``<uid>#copy<k>``):
    sharing the original's id would make one group of twice the rows, whose standard deviation (unbiased) differs,
    and so change the advantages of the copy and of the original both."""


def dynamic_sampling(
    rewards: Sequence[float],
    uids: Sequence[Any],
    *,
    kind: str,
    target_groups: int,
    min_replace_ratio: float = 0.3,
    rng: random.Random | None = None,
) -> DynamicSamplingDecision:
    """Decide which rows to keep.

    - ``filter``: keep only rows of informative groups; ask for more batches until ``target_groups``
      groups are kept, then truncate to exactly that many.
    - ``replace``: keep the batch size by replacing each uninformative group with a copy of a random
      informative one, provided at least ``min_replace_ratio`` of the groups are informative (else
      keep the batch as it is).
    """
    rows_of: Dict[Any, List[int]] = defaultdict(list)
    for row, uid in enumerate(uids):
        rows_of[uid].append(row)
    good = informative_groups(rewards, uids)
    all_groups = list(rows_of)
    dropped = len(all_groups) - len(good)
    if kind == "filter":
        kept = good[:target_groups]
        rows = [r for uid in kept for r in rows_of[uid]]
        return DynamicSamplingDecision(rows, len(good) < target_groups, len(kept), dropped, [uids[r] for r in rows])
    if kind == "replace":
        if not good or len(good) < min_replace_ratio * len(all_groups):
            return DynamicSamplingDecision(list(range(len(uids))), False, len(all_groups), 0, list(uids))
        rng = rng or random.Random(0)
        good_set = set(good)
        rows: List[int] = []
        kept_uids: List[Any] = []
        copies: Dict[Any, int] = defaultdict(int)
        for uid in all_groups:
            if uid in good_set:
                source, group = uid, uid
            else:
                source = rng.choice(good)
                copies[source] += 1
                group = f"{source}#copy{copies[source]}"
            rows.extend(rows_of[source])
            kept_uids.extend([group] * len(rows_of[source]))
        return DynamicSamplingDecision(rows, False, len(all_groups), dropped, kept_uids)
    raise ValueError(f"trainer.algorithm.dynamic_sampling.type must be null, 'filter' or 'replace', got {kind!r}")


def overlong_filter(loss_masks: List[List[int]], stop_reasons: Sequence[str]) -> List[List[int]]:
    """Zero the loss mask of every trajectory cut off by the length limit (stop reason ``length``)."""
    return [[0] * len(mask) if reason == "length" else list(mask) for mask, reason in zip(loss_masks, stop_reasons)]
