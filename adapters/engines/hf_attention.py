"""Decode-step attention for :class:`~skygym_adapters.engines.hf.HFEngine` that reads each key/value head once.

With grouped-query attention (Qwen2.5-0.5B: 14 query heads over 2 key/value heads; 1.5B: 12 over 2), transformers'
SDPA path copies every cached key and value head to each query head of its group (``repeat_kv``) whenever there is
an attention mask, because SDPA's masked GPU kernels take no grouped heads. A batched decode step always has one:
left padding, and the unwritten end of a static cache. So each step writes and reads the whole KV cache once per
query head rather than once: at 1.5B's shape, 128 rows and 640 positions, ~31 GB of memory traffic per step
against ~3 GB for the weights. (transformers >= 5.24 avoids the copy when decoding eagerly, not in a compiled step.)

With one query position per row the copy is not needed: the heads of a group become the query-length axis of one
key/value head, ``(batch, kv_heads, group, head_dim)``, and the row's one mask row covers them all. The result is the
same attention, computed from the cache in place. Every other call (prefill, training, masks per head, dropout,
position biases) goes to transformers' own SDPA function unchanged.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

NAME = "skyrl_gym_sdpa"
"""The attention implementation the engine gives a model that uses ``"sdpa"``: SDPA, with grouped heads folded in
one-token decode steps. (transformers checks an implementation's support by the substring ``"sdpa"``: keep it.)"""

MODEL_TYPES = frozenset({
    "cohere", "gemma", "gemma2", "gemma3_text", "glm4", "granite", "llama", "ministral", "mistral", "mixtral",
    "olmo2", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "smollm3", "starcoder2",
})
"""Model types switched: their attention layers call the registered function and nothing else. Some modeling code
asks ``config._attn_implementation == "sdpa"`` and behaves differently under any other name (MiniMax-M3's sparse
mask, Gemma 4's shared KV layers), so a model type is added here only once its code is known not to."""


def sdpa_grouped_decode(module: Any, query: Any, key: Any, value: Any, attention_mask: Optional[Any],
                        dropout: float = 0.0, scaling: Optional[float] = None, **kwargs: Any) -> Tuple[Any, None]:
    """transformers' attention-function signature: ``query`` is ``(batch, heads, q_len, head_dim)``, ``key`` and
    ``value`` ``(batch, kv_heads, kv_len, head_dim)``; returns ``((batch, q_len, heads, head_dim), None)``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    foldable = (query.shape[2] == 1 and groups > 1 and attention_mask is not None and attention_mask.shape[1] == 1
                and not dropout and not kwargs.get("output_attentions", False)
                and all(kwargs.get(name) is None for name in ("position_bias", "softcap", "sinks", "s_aux")))
    if not foldable:  # without a mask transformers already lets SDPA read grouped heads (enable_gqa)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    import torch

    batch, heads, _, head_dim = query.shape
    # query head h reads key/value head h // groups (as repeat_kv lays them out): heads are kv-major
    folded = query.reshape(batch, heads // groups, groups, head_dim)
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=attention_mask,
                                                           scale=scaling, is_causal=False)
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def has_grouped_decode_attention(model: Any) -> bool:
    """Whether ``model`` runs on :data:`NAME`."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == NAME


def use_grouped_decode_attention(model: Any) -> bool:
    """Give ``model`` :data:`NAME` as its attention when it uses transformers' ``"sdpa"``, groups its key/value heads
    and is of a type in :data:`MODEL_TYPES`; returns whether the model now has it. Outputs are unchanged; only
    one-token steps with a mask take the folded path. Other models (another attention, per-layer head counts,
    transformers without attention registries) keep theirs.

    :class:`~skygym_adapters.engines.hf.HFEngine` calls this on the models it loads itself, not on one it is handed
    (a trainer's policy, say, whose code may check the attention's name); call it on such a model to opt in."""
    if has_grouped_decode_attention(model):
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
    AttentionInterface.register(NAME, sdpa_grouped_decode)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks SDPA takes
    model.set_attn_implementation(NAME)
    return True
