"""SDPA attention that reads each key/value head once, for the engine's decoding and the trainer's forward passes.

With grouped-query attention (Qwen2.5-0.5B: 14 query heads over 2 key/value heads; 1.5B: 12 over 2), transformers'
SDPA path copies every key and value head to each query head of its group (``repeat_kv``) whenever there is an
attention mask, because SDPA's masked GPU kernels take no grouped heads. Masks are the common case here:

* a batched decode step always has one (left padding, the unwritten end of a static cache), so each step writes and
  reads the whole KV cache once per query head rather than once: at 1.5B's shape, 128 rows and 640 positions, ~31 GB
  of memory traffic per step against ~3 GB for the weights (transformers >= 5.24 avoids the copy when decoding
  eagerly, not in a compiled step);
* a training forward pass on left-padded rows, or on the trainer's packed rows (``skygym_train.workers.packing``),
  keeps the copies for the backward pass: at 1.5B's shape ~0.14 MB per token, ~1.3 GiB for a micro-batch of 16
  answers of 512 tokens.

The copy is not needed when one mask serves every head: the query heads of a group become the query-length axis of
their key/value head, ``(batch, kv_heads, group * q_len, head_dim)``, and the mask's rows are repeated once per
group member (made once per forward pass and shared by every layer). The result is the same attention, computed
from the keys and values in place. Every other call (masks per head, dropout, position biases, softcap, sinks) goes
to transformers' own SDPA function unchanged, as do calls without a mask (SDPA reads grouped heads there itself).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

NAME = "skyrl_gym_sdpa"
"""The attention implementation given to a model that uses ``"sdpa"``: SDPA, with grouped heads folded where one
mask serves every head. (transformers checks an implementation's support by the substring ``"sdpa"``: keep it.)"""

MODEL_TYPES = frozenset({
    "cohere", "gemma", "gemma2", "gemma3_text", "glm4", "granite", "llama", "ministral", "mistral", "mixtral",
    "olmo2", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "smollm3", "starcoder2",
})
"""Model types switched: their attention layers call the registered function and nothing else. Some modeling code
asks ``config._attn_implementation == "sdpa"`` and behaves differently under any other name (MiniMax-M3's sparse
mask, Gemma 4's shared KV layers), so a model type is added here only once its code is known not to."""

_EXTRAS = ("position_bias", "softcap", "sinks", "s_aux")
"""Keyword arguments of attention functions that only transformers' own function knows how to apply."""


def sdpa_grouped(module: Any, query: Any, key: Any, value: Any, attention_mask: Optional[Any],
                 dropout: float = 0.0, scaling: Optional[float] = None, **kwargs: Any) -> Tuple[Any, None]:
    """transformers' attention-function signature: ``query`` is ``(batch, heads, q_len, head_dim)``, ``key`` and
    ``value`` ``(batch, kv_heads, kv_len, head_dim)``, ``attention_mask`` ``(batch, 1, q_len, kv_len)`` (boolean or
    additive); returns ``((batch, q_len, heads, head_dim), None)``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, length, head_dim = query.shape
    foldable = (groups > 1 and attention_mask is not None and attention_mask.dim() == 4
                and attention_mask.shape[1] == 1 and attention_mask.shape[2] == length
                and not dropout and not kwargs.get("output_attentions", False)
                and all(kwargs.get(name) is None for name in _EXTRAS))
    if not foldable or not _fold_pays(module, query, key, attention_mask):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    import torch

    # query head h reads key/value head h // groups (as repeat_kv lays them out): heads are kv-major, so a group's
    # heads are consecutive and fold onto the query axis as (group member, position)
    folded = query.reshape(batch, heads // groups, groups * length, head_dim)
    # one query position: the mask's one row covers the whole group (broadcast); more: one copy of the rows per member
    mask = attention_mask if length == 1 else mask_per_group(attention_mask, groups, _attention_dtype(query))
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=mask, scale=scaling,
                                                           is_causal=False)
    return out.reshape(batch, heads, length, value.shape[-1]).transpose(1, 2).contiguous(), None


def _attention_dtype(query: Any) -> Any:
    """The dtype SDPA computes in: autocast's where it is on (the query may be fp32 there: rotary embeddings compute
    in fp32), else the query's. A mask in any other dtype would be cast again in every layer, each copy kept for the
    backward pass."""
    import torch

    try:
        device = query.device.type
        return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype
    except RuntimeError:  # a device type autocast does not know has no autocast
        return query.dtype


def _fold_pays(module: Any, query: Any, key: Any, mask: Any) -> bool:
    """Whether folding costs less memory than transformers' copies, counted in elements per row of the batch.

    The copies: every key and value head repeated to the group's query heads, ``2 * (heads - kv_heads) * kv_len *
    head_dim``, kept for the backward pass when gradients flow. The fold: its mask's extra rows, ``(groups - 1) *
    q_len * kv_len``, made once per forward pass and shared by the model's layers where it can be kept on the mask
    (:func:`mask_per_group`), else per call; and, when gradients flow, a copy of the output in the heads' order
    (SDPA keeps its folded output for the backward pass, and the output projection keeps its own input). One query
    position always pays (the mask row is broadcast, nothing is copied). Long prompts without gradients (an
    engine's prefill of thousands of tokens) and very long packed rows do not."""
    import torch

    heads, length, head_dim = query.shape[1], query.shape[2], query.shape[3]
    kv_heads, kv_len = key.shape[1], key.shape[2]
    if length == 1:
        return True
    shared_by = 1
    if _keeps_fold(mask):
        shared_by = max(1, int(getattr(getattr(module, "config", None), "num_hidden_layers", 1) or 1))
    extra = (heads // kv_heads - 1) * length * kv_len / shared_by
    if torch.is_grad_enabled() and query.requires_grad:
        extra += heads * length * head_dim
    return extra < 2 * (heads - kv_heads) * kv_len * head_dim


def _keeps_fold(mask: Any) -> bool:
    """Whether a mask's fold can be kept on it for the model's other layers: where a change to the mask would show,
    so not in a traced graph (which makes it once per run anyway), nor on an inference tensor (no version counter;
    the engine's prefill, once per batch)."""
    import torch

    return not torch.compiler.is_compiling() and not mask.is_inference()


def mask_per_group(mask: Any, groups: int, dtype: Any) -> Any:
    """``mask`` ``(batch, 1, q_len, kv_len)`` with its query rows repeated ``groups`` times, member-major
    ``(batch, 1, groups * q_len, kv_len)``, as an additive mask in ``dtype`` (the dtype attention computes in).

    Every layer of a forward pass gets the same mask object, so the result is kept on it (and freed with it) and made
    once; a mask changed in place is made again. (An inference-mode mask has no version counter to tell: its fold is
    made per call.) Additive and 16-element aligned (:func:`aligned_additive_mask`),
    SDPA uses it as it is: given a boolean mask it would make and keep, per layer, an additive copy ``groups`` times
    the size of the mask it was given."""
    import torch

    keeps = _keeps_fold(mask)
    key = (groups, dtype, mask._version) if keeps else None
    kept = getattr(mask, "_skyrl_gym_per_group", None) if keeps else None
    if kept is not None and kept[0] == key:
        return kept[1]
    batch, _, length, width = mask.shape
    rows = mask.unsqueeze(2).expand(batch, 1, groups, length, width).reshape(batch, 1, groups * length, width)
    if mask.dtype == torch.bool:
        out = aligned_additive_mask(rows, dtype)
    else:
        out = aligned_empty(rows.shape, dtype, rows.device).copy_(rows)
    if key is not None:
        mask._skyrl_gym_per_group = (key, out)
    return out


def aligned_empty(shape: Tuple[int, ...], dtype: Any, device: Any) -> Any:
    """An uninitialised tensor of ``shape`` whose rows start 16-element aligned: SDPA's memory-efficient GPU kernel
    takes such a mask as it is, where it pads any other (one more copy per call, kept for the backward pass)."""
    import torch

    *lead, width = shape
    return torch.empty((*lead, -(-width // 16) * 16), dtype=dtype, device=device)[..., :width]


def aligned_additive_mask(allowed: Any, dtype: Any) -> Any:
    """A boolean ``(..., L)`` attention mask as the additive one attention applies, 16-element aligned
    (:func:`aligned_empty`): 0 where allowed, ``dtype``'s lowest value elsewhere (the same softmax as -inf where a
    row allows anything; a row that allows nothing averages instead of giving NaN)."""
    import torch

    mask = aligned_empty(tuple(allowed.shape), dtype, allowed.device).fill_(torch.finfo(dtype).min)
    return mask.masked_fill_(allowed, 0)


def has_grouped_attention(model: Any) -> bool:
    """Whether ``model`` runs on :data:`NAME`."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == NAME


def use_grouped_attention(model: Any) -> bool:
    """Give ``model`` :data:`NAME` as its attention when it uses transformers' ``"sdpa"``, groups its key/value heads
    and is of a type in :data:`MODEL_TYPES`; returns whether the model now has it. Outputs are unchanged (up to float
    reordering); only calls with one mask for every head take the folded path. Other models (another attention,
    per-layer head counts, transformers without attention registries) keep theirs. Saved configs do not name it.

    :class:`~skygym_adapters.engines.hf.HFEngine` calls this on the models it loads itself, and the bundled trainer
    on the models it trains, not on one they are handed (a TRL policy, say, whose code may check the attention's
    name); call it on such a model to opt in."""
    if has_grouped_attention(model):
        return True
    config = getattr(model, "config", None)
    try:  # a config with per-layer head counts raises (a RuntimeError) on the global names
        implementation, model_type = config._attn_implementation, config.model_type
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    except Exception:
        return False
    if (implementation != "sdpa" or model_type not in MODEL_TYPES or not hasattr(model, "set_attn_implementation")
            or not heads or not kv_heads or kv_heads >= heads):
        return False
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        return False
    AttentionInterface.register(NAME, sdpa_grouped)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks SDPA takes
    model.set_attn_implementation(NAME)
    return True
