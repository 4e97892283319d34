"""The training batch: generator output turned into padded tensors, and how it is split.

Layout of one row: ``[pad ... pad, prompt, response, pad ... pad]`` with prompts left-padded to ``P`` and
responses right-padded to ``T``, so response token ``t`` always sits at position ``P + t`` and its
log-probability comes from the logits at ``P + t - 1``, whatever the prompt length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import torch

TensorDict = Dict[str, torch.Tensor]


@dataclass
class TrainingBatch:
    tensors: TensorDict
    """input_ids, attention_mask, position_ids (B, P+T); response_mask, and per-token fields (B, T)."""
    prompt_length: int
    uids: List[str] = field(default_factory=list)
    """The group (prompt) id of each row."""

    @property
    def size(self) -> int:
        return int(self.tensors["input_ids"].shape[0])

    @property
    def response_length(self) -> int:
        return int(self.tensors["response_mask"].shape[1])

    def select(self, rows: Sequence[int]) -> "TrainingBatch":
        index = torch.as_tensor(list(rows), dtype=torch.long)
        return TrainingBatch(
            {k: v.index_select(0, index.to(v.device)) for k, v in self.tensors.items()},
            self.prompt_length,
            [self.uids[i] for i in rows] if self.uids else [],
        )

    def chunk(self, parts: int) -> List["TrainingBatch"]:
        if self.size % parts:
            raise ValueError(f"a batch of {self.size} rows cannot be split into {parts} equal parts")
        step = self.size // parts
        return [self.select(range(i * step, (i + 1) * step)) for i in range(parts)]

    def with_tensors(self, **new: torch.Tensor) -> "TrainingBatch":
        return TrainingBatch({**self.tensors, **new}, self.prompt_length, self.uids)


def build_batch(
    prompt_token_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    loss_masks: Sequence[Sequence[int]],
    pad_token_id: int,
    uids: Optional[Sequence[str]] = None,
    rewards: Optional[Sequence[Any]] = None,
) -> TrainingBatch:
    """Pad prompts (left) and responses (right); place rewards on token positions.

    ``rewards`` holds a float per trajectory (put on its last response token) or a list of per-token
    rewards (as long as the response).
    """
    batch = len(prompt_token_ids)
    if not (len(response_ids) == len(loss_masks) == batch):
        raise ValueError("prompt_token_ids, response_ids and loss_masks must have the same length")
    prompt_len = max(1, max(len(p) for p in prompt_token_ids))
    resp_len = max(1, max(len(r) for r in response_ids))
    input_ids = torch.full((batch, prompt_len + resp_len), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, prompt_len + resp_len), dtype=torch.long)
    response_mask = torch.zeros((batch, resp_len), dtype=torch.float32)
    token_rewards = torch.zeros((batch, resp_len), dtype=torch.float32)
    for i, (prompt, response, mask) in enumerate(zip(prompt_token_ids, response_ids, loss_masks)):
        if len(mask) != len(response):
            raise ValueError(f"row {i}: loss mask has {len(mask)} entries for {len(response)} response tokens")
        start = prompt_len - len(prompt)
        input_ids[i, start:prompt_len] = torch.as_tensor(list(prompt), dtype=torch.long)
        attention[i, start:prompt_len] = 1
        if response:
            input_ids[i, prompt_len : prompt_len + len(response)] = torch.as_tensor(list(response), dtype=torch.long)
            attention[i, prompt_len : prompt_len + len(response)] = 1
            response_mask[i, : len(response)] = torch.as_tensor(list(mask), dtype=torch.float32)
        if rewards is not None:
            reward = rewards[i]
            if isinstance(reward, (list, tuple)):
                if len(reward) != len(response):
                    raise ValueError(f"row {i}: {len(reward)} per-token rewards for {len(response)} tokens")
                token_rewards[i, : len(reward)] = torch.as_tensor(list(reward), dtype=torch.float32)
            elif response:
                token_rewards[i, len(response) - 1] = float(reward)
    if not torch.isfinite(token_rewards).all():  # a generator that let one through: it would NaN its whole group
        row = int((~torch.isfinite(token_rewards)).any(-1).nonzero()[0])
        raise ValueError(f"row {row}: its reward is not a finite number ({rewards[row]!r:.80}); the generator "
                         "should have failed that trajectory (a masked row with reward 0)")
    position_ids = (attention.cumsum(-1) - 1).clamp_min(0)
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention,
        "position_ids": position_ids,
        "response_mask": response_mask,
        "token_level_scores": token_rewards,
    }
    return TrainingBatch(tensors, prompt_len, list(uids) if uids is not None else [])
