"""Sequence packing with shared prompts: a micro-batch without padding and with each prompt computed once.

The padded layout (``batch.py``) spends compute on padding and, in GRPO-style groups, runs the same
prompt once per sample. Packing lays the micro-batch out differently and tells attention what may see
what with an explicit mask, so every response token still sees exactly what it saw in its padded row:

* rows of the micro-batch with identical prompts form a *segment*: the prompt once, then one *branch*
  per response;
* a segment's prompt body (all prompt tokens but the last) is shared; each branch starts with its own
  copy of the last prompt token followed by the response, at the positions the padded row gave them;
* a token attends to tokens of its own segment with a lower or equal position, either in the prompt
  body or in its own branch; a padding token attends only to itself;
* segments are packed into rows no longer than the longest segment (first fit, longest first); prompt
  bodies go on the left of a row and branches on the right, and rows are left-padded, so all the
  positions whose logits are needed sit in the last ``keep`` columns of every row;
* attention computes every query of a row against every key, masked or not, so a row's cost grows with the
  square of its length: given the model's break-even (:func:`break_even_keys`), a prompt with many long
  branches is cut into segments of fewer branches each, its prompt body repeated, where that costs less
  (eight 512-token branches of Qwen2.5-1.5B: two per segment).

The copy of the last prompt token is what makes the last property hold: the logit that predicts a
response's first token comes from the branch, not from the shared prompt in the middle of the row.
Attention implementations that take a 4D mask (``sdpa``, ``eager``) run this layout. Flash attention
takes no mask; for it, :func:`pack_varlen` lays every row out end to end in one row with position ids
restarting at 0 per sequence and no mask, which transformers turns into variable-length attention
(``cu_seqlens``). That removes the padding but not the repeated prompts.

The result is exact (the same log-probabilities up to float reordering). On ``bench/train_step.py``'s
batch (8 prompts x 4 samples, ~50-token chat prompts, answers of up to 16 tokens) the shared-prefix layout
runs about half of the padded tokens. :func:`layout` builds a micro-batch in the layout that
:func:`layout_for` picks for the model's attention implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from skygym_adapters.engines.hf_attention import NAME as GROUPED_SDPA
from skygym_adapters.engines.hf_attention import aligned_additive_mask

PACKABLE_ATTENTION = ("sdpa", GROUPED_SDPA, "eager")
"""Attention implementations that take the shared-prefix layout's 4D mask."""
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")
"""Attention implementations that read packed sequences from position ids (:func:`pack_varlen`)."""


@dataclass
class PackedBatch:
    input_ids: torch.Tensor
    """(R, L) token ids, left-padded."""
    position_ids: torch.Tensor
    """(R, L) the position each token had in its padded row."""
    segment_ids: Optional[torch.Tensor]
    """(R, L) the segment each token belongs to within its row, -1 for padding; None for varlen rows."""
    branch_ids: Optional[torch.Tensor]
    """(R, L) 0 for a segment's prompt body, k for its k-th branch; None for varlen rows."""
    keep: Union[int, torch.Tensor]
    """The columns whose outputs are needed: the last ``keep`` of each row, or these column indices
    (``logits_to_keep`` in transformers takes either)."""
    gather_index: torch.Tensor
    """(B, T) for each padded row and response slot, the index into the flattened ``(R, K)`` kept outputs
    of the position that predicts that response token (a valid dummy index where the slot is padding)."""

    num_real_tokens: int
    """Tokens that are not padding."""

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def attention_mask(self) -> Optional[torch.Tensor]:
        """(R, 1, L, L) boolean, True where a query (row) may attend to a key (column); None for varlen rows."""
        return self.mask_on(self.input_ids.device)

    def mask_on(self, device: torch.device) -> Optional[torch.Tensor]:
        """:attr:`attention_mask` made on ``device`` from the ``(R, L)`` ids: ``R * L * L`` booleans, which take the
        host ~0.2 s at two rows of 3,000 columns and an accelerator a fraction of a millisecond."""
        if self.segment_ids is None:
            return None
        segment, branch, position = (t.to(device) for t in (self.segment_ids, self.branch_ids, self.position_ids))
        same_segment = segment[:, :, None] == segment[:, None, :]
        visible_branch = (branch[:, None, :] == 0) | (branch[:, :, None] == branch[:, None, :])
        mask = same_segment & visible_branch & (position[:, None, :] <= position[:, :, None])
        real = segment >= 0
        mask &= real[:, None, :] & real[:, :, None]
        mask |= torch.eye(mask.shape[-1], dtype=torch.bool, device=device)  # padding sees itself (no empty softmax)
        return mask.unsqueeze(1)

    def model_inputs(self, device: torch.device, mask_dtype: Optional[torch.dtype] = None) -> Dict[str, Any]:
        """The model's inputs on ``device``; with ``mask_dtype`` (the dtype attention computes in) the mask is
        additive, made once for every layer: given a boolean mask, SDPA would make the additive one in every layer
        and keep each copy for the backward pass (~0.1 GiB per layer at ``(R, 1, L, L)`` with L in the thousands).

        The indices :meth:`kept` and :meth:`gather` use go to ``device`` now too: copied from the host's memory during
        the forward pass, each would make the host wait for every layer queued before it."""
        self.gather_index = self.gather_index.to(device)
        if not isinstance(self.keep, int):
            self.keep = self.keep.to(device)
        inputs = {"input_ids": self.input_ids.to(device), "position_ids": self.position_ids.to(device)}
        mask = self.mask_on(device)
        if mask is not None and mask_dtype is not None:
            mask = aligned_additive_mask(mask, mask_dtype)
        inputs["attention_mask"] = mask
        return inputs

    def logits_to_keep(self, device: torch.device) -> Union[int, torch.Tensor]:
        return self.keep if isinstance(self.keep, int) else self.keep.to(device)

    def kept(self, outputs: torch.Tensor) -> torch.Tensor:
        """The kept columns of per-position outputs ``(R, L, ...)`` (what ``logits_to_keep`` does to logits)."""
        if isinstance(self.keep, int):
            return outputs[:, outputs.shape[1] - self.keep :]
        return outputs[:, self.keep.to(outputs.device)]

    def gather(self, kept: torch.Tensor) -> torch.Tensor:
        """Outputs of the kept columns, ``(R, keep, ...)``, rearranged to the padded ``(B, T, ...)``."""
        flat = kept.reshape(kept.shape[0] * kept.shape[1], *kept.shape[2:])
        B, T = self.gather_index.shape
        index = self.gather_index.reshape(-1).to(flat.device)  # on the outputs' device already after model_inputs
        return flat.index_select(0, index).reshape(B, T, *kept.shape[2:])


@dataclass
class _Segment:
    prompt: List[int]
    responses: List[Tuple[int, List[int]]]
    """(padded row, response tokens) for each row that shares this prompt."""

    @property
    def length(self) -> int:
        return len(self.prompt) - 1 + sum(1 + len(r) for _, r in self.responses)


def _rows(tensors: Dict[str, torch.Tensor], prompt_length: int) -> List[Tuple[List[int], List[int]]]:
    """The (prompt, response) token lists of each padded row, padding removed."""
    ids = tensors["input_ids"].tolist()
    attention = tensors["attention_mask"].tolist()
    rows = []
    for row_ids, row_mask in zip(ids, attention):
        prompt = [t for t, m in zip(row_ids[:prompt_length], row_mask[:prompt_length]) if m]
        response_len = sum(row_mask[prompt_length:])
        rows.append((prompt, row_ids[prompt_length : prompt_length + response_len]))
    return rows


def _first_fit(segments: List[_Segment]) -> Tuple[List[List[_Segment]], int]:
    """The segments in rows (first fit, longest first) as long as the longest segment: ``(rows, that length)``."""
    capacity = max(s.length for s in segments)
    bins: List[List[_Segment]] = []
    room: List[int] = []
    for seg in sorted(segments, key=lambda s: s.length, reverse=True):
        for b, free in enumerate(room):
            if seg.length <= free:
                bins[b].append(seg)
                room[b] -= seg.length
                break
        else:
            bins.append([seg])
            room.append(capacity - seg.length)
    return bins, capacity


def _cheapest_rows(segments: List[_Segment], attention_break_even: Optional[float],
                   max_tokens: Optional[int] = None) -> Tuple[List[List[_Segment]], int]:
    """Rows for the segments, each segment cut into parts of at most ``k`` branches (its prompt body repeated in
    each part), with the ``k`` whose rows cost least: ``R * (L + L**2 / attention_break_even)`` token-equivalents
    for R rows of L columns. Attention runs every query of a row against every key, masked or not, so one long row
    of eight 512-token branches costs ~L**2 where its branches need ~1/8 of that; ``None`` keeps whole segments.
    With ``max_tokens`` (a micro-batch token budget, which counts a shared prompt once) no cut runs more tokens than
    that, or than whole segments do."""
    best = _first_fit(segments)
    if attention_break_even is None:
        return best
    allowed = max(max_tokens, sum(s.length for s in segments)) if max_tokens else float("inf")

    def cost(rows: Tuple[List[List[_Segment]], int]) -> float:
        return len(rows[0]) * (rows[1] + rows[1] ** 2 / attention_break_even)

    best_cost = cost(best)
    for k in range(max(len(s.responses) for s in segments) - 1, 0, -1):
        parts = [_Segment(s.prompt, s.responses[i : i + k]) for s in segments for i in range(0, len(s.responses), k)]
        if sum(p.length for p in parts) > allowed:
            break  # smaller parts repeat the prompts more
        rows = _first_fit(parts)
        rows_cost = cost(rows)
        if rows_cost < best_cost:
            best, best_cost = rows, rows_cost
    return best


def break_even_keys(model: torch.nn.Module) -> Optional[float]:
    """How many keys a query attends to before its attention costs as much as the token's matrix products, per
    decoder layer: the layer's weights (2 FLOPs each per token; a mixture of experts' at the share a token uses) over
    ``2 * heads * (query/key dim + value dim)`` FLOPs per key (scores and the weighted sum). ~15,200 for
    Qwen2.5-1.5B's shape, ~8,300 for 0.5B's. The last layer is counted (the first may be dense in a mixture of
    experts). None where the model does not say (no heads in its config, per-layer head counts, no decoder layers to
    count): the layout then keeps whole segments."""
    try:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # under a LoRA wrapper
        config = base.config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        qk_dim = getattr(config, "qk_head_dim", None) or head_dim  # multi-head latent attention: nope + rope dims
        v_dim = getattr(config, "v_head_dim", None) or head_dim
        experts = next((getattr(config, name) for name in ("num_experts", "num_local_experts", "n_routed_experts")
                        if getattr(config, name, None)), None)
        used = getattr(config, "num_experts_per_tok", None)
    except Exception:  # no config, or a config with per-layer head counts (which raises on the global names)
        return None
    share = used / experts if experts and used else 1.0
    # a causal LM's decoder (``model.model``) or a bare decoder (a critic's body)
    layers = getattr(base, "layers", None) or getattr(getattr(base, "model", None), "layers", None)
    if not heads or not qk_dim or not v_dim or not layers:
        return None
    weights = sum(p.numel() * (share if "experts" in name.split(".") else 1.0)  # matrices: norms and biases are noise
                  for name, p in layers[-1].named_parameters() if p.dim() > 1)
    return weights / (heads * (qk_dim + v_dim)) if weights else None


PACKABLE_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "attention", "mlp", "moe")
"""``config.layer_types`` (or ``layers_block_type``) entries whose layers read the packed layouts' masks or position
ids, or see one position at a time."""


def packs_every_layer(config: Any) -> bool:
    """Whether every layer of a model with this config runs a packed row as it runs the padded rows. A hybrid
    model's recurrent layers (linear attention, Mamba, ``"hybrid"`` blocks) run along the whole packed row and ignore
    the mask: such a model trains on padded rows."""
    for name in ("layer_types", "layers_block_type"):
        try:
            types = getattr(config, name, None)
        except Exception:  # a config that raises on the name holds no list of layer types there
            continue
        if types and any(t not in PACKABLE_LAYER_TYPES for t in types):
            return False
    return True


def pack(tensors: Dict[str, torch.Tensor], prompt_length: int, pad_token_id: int = 0,
         attention_break_even: Optional[float] = None, max_tokens: Optional[int] = None) -> PackedBatch:
    """Pack the padded rows of one micro-batch (see the module docstring for the layout). With
    ``attention_break_even`` (:func:`break_even_keys`), a prompt's branches may be split over several segments
    where one long row would cost more in attention than the repeated prompt costs in tokens, within
    ``max_tokens`` (the micro-batch's token budget) where one is set."""
    rows = _rows(tensors, prompt_length)
    response_slots = int(tensors["input_ids"].shape[1]) - prompt_length
    for i, (prompt, _) in enumerate(rows):
        if not prompt:
            raise ValueError(f"row {i} has an empty prompt; packing needs at least one prompt token")

    segments: Dict[Tuple[int, ...], _Segment] = {}
    for i, (prompt, response) in enumerate(rows):
        segments.setdefault(tuple(prompt), _Segment(prompt, [])).responses.append((i, response))

    bins, capacity = _cheapest_rows(list(segments.values()), attention_break_even, max_tokens)
    R, L = len(bins), capacity
    input_ids = torch.full((R, L), pad_token_id, dtype=torch.long)
    position_ids = torch.zeros((R, L), dtype=torch.long)
    segment_ids = torch.full((R, L), -1, dtype=torch.long)  # -1: padding
    branch_ids = torch.zeros((R, L), dtype=torch.long)  # 0: prompt body, k: k-th branch of its segment
    # (bin, column, length): the positions predicting a padded row's response tokens, one run of columns
    predictors: List[Tuple[int, int, int]] = [(0, 0, 0)] * len(rows)
    branch_widths: List[int] = []

    for b, segs in enumerate(bins):
        pad = L - sum(s.length for s in segs)
        tokens: List[int] = []
        positions: List[int] = []
        seg_of: List[int] = []
        branch_of: List[int] = []
        for s, seg in enumerate(segs):  # prompt bodies first
            body = seg.prompt[:-1]
            tokens += body
            positions += range(len(body))
            seg_of += [s] * len(body)
            branch_of += [0] * len(body)
        branch_start = pad + len(tokens)
        for s, seg in enumerate(segs):  # then the branches: last prompt token + response
            p = len(seg.prompt)
            for k, (row, response) in enumerate(seg.responses, start=1):
                column = pad + len(tokens)
                predictors[row] = (b, column, len(response))
                tokens += [seg.prompt[-1], *response]
                positions += range(p - 1, p + len(response))
                seg_of += [s] * (1 + len(response))
                branch_of += [k] * (1 + len(response))
        input_ids[b, pad:] = torch.as_tensor(tokens, dtype=torch.long)
        position_ids[b, pad:] = torch.as_tensor(positions, dtype=torch.long)
        segment_ids[b, pad:] = torch.as_tensor(seg_of, dtype=torch.long)
        branch_ids[b, pad:] = torch.as_tensor(branch_of, dtype=torch.long)
        branch_widths.append(L - branch_start)

    keep = max(1, max(branch_widths))
    first_kept = L - keep
    gather_index = torch.zeros((len(rows), response_slots), dtype=torch.long)
    for row, (b, column, length) in enumerate(predictors):
        gather_index[row, :length] = torch.arange(length) + (b * keep + column - first_kept)
    return PackedBatch(input_ids, position_ids, segment_ids, branch_ids, keep, gather_index,
                       int((segment_ids >= 0).sum()))


def pack_varlen(tensors: Dict[str, torch.Tensor], prompt_length: int) -> PackedBatch:
    """All rows end to end in a single row, positions restarting at 0 per row, no padding and no mask.

    Transformers reads the sequence boundaries from the position ids (a position that does not follow its
    predecessor starts a sequence) and runs variable-length attention; under sdpa it builds the matching
    block-diagonal causal mask, which is how this layout is tested on CPU.
    """
    rows = _rows(tensors, prompt_length)
    response_slots = int(tensors["input_ids"].shape[1]) - prompt_length
    tokens: List[int] = []
    positions: List[int] = []
    needed: List[torch.Tensor] = []  # the columns that predict response tokens, row after row (so in order)
    gather_index = torch.zeros((len(rows), response_slots), dtype=torch.long)
    kept = 0
    for i, (prompt, response) in enumerate(rows):
        if not prompt:
            raise ValueError(f"row {i} has an empty prompt; packing needs at least one prompt token")
        start = len(tokens) + len(prompt) - 1  # the last prompt token predicts the first response token
        needed.append(torch.arange(start, start + len(response)))
        gather_index[i, : len(response)] = torch.arange(kept, kept + len(response))
        kept += len(response)
        tokens += prompt + response
        positions += range(len(prompt) + len(response))
    return PackedBatch(
        torch.as_tensor([tokens], dtype=torch.long),
        torch.as_tensor([positions], dtype=torch.long),
        None,
        None,
        torch.cat(needed) if kept else torch.zeros(1, dtype=torch.long),
        gather_index,
        len(tokens),
    )


@dataclass
class PaddedBatch:
    """The padded rows as they are, behind the same interface as :class:`PackedBatch`."""

    tensors: Dict[str, torch.Tensor]
    response_length: int

    @property
    def num_tokens(self) -> int:
        return int(self.tensors["input_ids"].numel())

    def model_inputs(self, device: torch.device, mask_dtype: Optional[torch.dtype] = None) -> Dict[str, Any]:
        """The padded rows on ``device`` (their 2D mask is the model's to expand; ``mask_dtype`` is not needed)."""
        return {k: self.tensors[k].to(device) for k in ("input_ids", "attention_mask", "position_ids")}

    def logits_to_keep(self, device: torch.device) -> int:
        return self.response_length + 1

    def kept(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs[:, outputs.shape[1] - self.response_length - 1 :]

    def gather(self, kept: torch.Tensor) -> torch.Tensor:
        return kept[:, :-1]  # positions P-1 .. P+T-2 predict the response tokens


LAYOUTS = ("shared_prefix", "varlen", "padded")


def layout(mode: str, tensors: Dict[str, torch.Tensor], prompt_length: int,
           attention_break_even: Optional[float] = None,
           max_tokens: Optional[int] = None) -> Union[PackedBatch, PaddedBatch]:
    """A micro-batch in the given layout (one of :data:`LAYOUTS`); ``attention_break_even`` and ``max_tokens`` as
    :func:`pack` takes them."""
    if mode == "shared_prefix":
        return pack(tensors, prompt_length, attention_break_even=attention_break_even, max_tokens=max_tokens)
    if mode == "varlen":
        return pack_varlen(tensors, prompt_length)
    if mode == "padded":
        return PaddedBatch(tensors, int(tensors["input_ids"].shape[1]) - prompt_length)
    raise ValueError(f"unknown layout {mode!r}; expected one of {LAYOUTS}")


def layout_for(attention: Optional[str], enabled: bool = True) -> str:
    """The best layout an attention implementation can run."""
    if enabled and attention in PACKABLE_ATTENTION:
        return "shared_prefix"
    if enabled and attention in VARLEN_ATTENTION:
        return "varlen"
    return "padded"


def plan_micro_batches(
    tensors: Dict[str, torch.Tensor], prompt_length: int, max_tokens: int, share_prompts: bool
) -> List[List[int]]:
    """Split the rows into micro-batches of consecutive rows holding at most ``max_tokens`` tokens each.

    Tokens are counted as the layout runs them: with ``share_prompts`` a prompt already in the micro-batch
    costs nothing more than its last token (each branch's copy; :func:`pack` cuts a long segment only within the
    budget). A row longer than the budget goes alone.
    Consecutive rows keep a GRPO group together, so its prompt is shared.
    """
    attention = tensors["attention_mask"]
    prompt_lengths = attention[:, :prompt_length].sum(1).tolist()
    response_lengths = attention[:, prompt_length:].sum(1).tolist()
    rows = _rows(tensors, prompt_length) if share_prompts else None
    parts: List[List[int]] = []
    current: List[int] = []
    used = 0
    seen: set = set()
    for i, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        key = tuple(rows[i][0]) if rows is not None else None
        alone = int(p + r)  # the row's cost in a micro-batch that does not yet hold its prompt
        cost = alone if rows is None or key not in seen else int(r + 1)
        if current and used + cost > max_tokens:
            parts.append(current)
            current, used, seen = [], 0, set()
            cost = alone
        used += cost
        current.append(i)
        seen.add(key)
    if current:
        parts.append(current)
    return parts
