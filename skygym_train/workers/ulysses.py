"""Ulysses sequence parallelism (``trainer.<role>.sequence_parallel_size``): long sequences split across ranks.

The ranks of one sequence-parallel group get the same rows and each runs the model on its own slice of every
sequence. Everything but attention is per token, so only attention needs the other slices: before it, one
all-to-all turns "my tokens, all heads" into "all tokens, my heads"; SDPA runs on whole sequences for a share of
the heads; a second all-to-all turns the result back (DeepSpeed-Ulysses). Each rank then has its tokens'
log-probs (or values); ``gather_sequence`` joins them, so every rank of the group computes the same loss.

Gradients: the gather's backward keeps each rank's own slice (every rank computed the same loss), so a rank's
parameter gradients are its tokens' share. FSDP averages over all ranks, so the worker scales the loss by the
group size: the sum over the group's shares is the sequence's gradient, and the mean runs over data-parallel
groups only. Runs over gloo on CPU and NCCL on CUDA (``all_to_all_single``); needs the attention head count to
be a multiple of the group size (key/value heads are repeated to the query heads first).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

ATTENTION = "skygym_ulysses"
"""The attention implementation name registered with transformers' ``AttentionInterface``."""


def _all_to_all(x: torch.Tensor, group: Any, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Split ``x`` along ``scatter_dim`` into one piece per rank, exchange, and join what arrives on ``gather_dim``."""
    size = dist.get_world_size(group)
    send = torch.stack([piece.contiguous() for piece in x.chunk(size, dim=scatter_dim)])
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=group)
    return torch.cat(list(received.unbind(0)), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, scatter_dim: int, gather_dim: int) -> torch.Tensor:
        ctx.group, ctx.dims = group, (scatter_dim, gather_dim)
        return _all_to_all(x, group, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad, ctx.group, gather_dim, scatter_dim), None, None, None


class _GatherSequence(torch.autograd.Function):
    """Every rank's slice joined along dim 1; the backward keeps this rank's slice (all ranks share the loss)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        size, rank = dist.get_world_size(group), dist.get_rank(group)
        pieces = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(pieces, x.contiguous(), group=group)
        ctx.rank, ctx.length = rank, x.shape[1]
        return torch.cat(pieces, dim=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        start = ctx.rank * ctx.length
        return grad[:, start : start + ctx.length], None


def gather_sequence(x: torch.Tensor, group: Any) -> torch.Tensor:
    """``(B, S/n)`` per rank -> ``(B, S)`` on every rank of ``group``."""
    return _GatherSequence.apply(x, group)


def left_aligned(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> tuple:
    """The padded rows shifted left so each starts with its first real token and all padding is on the
    right; returns ``(input_ids, position_ids, shift)`` with ``shift`` the columns each row moved. Plain
    causal attention over such rows is exact: a real token's earlier keys are all real, and padding only ever
    comes after it (its own outputs are never read). So no ``(B, S, S)`` mask is needed, whatever the
    length."""
    length = input_ids.shape[1]
    shift = (attention_mask.cumsum(1) == 0).sum(1)  # leading padding of each row
    source = torch.arange(length, device=input_ids.device)[None] + shift[:, None]
    inside = source < length
    source = source.clamp(max=length - 1)
    ids = torch.where(inside, input_ids.gather(1, source), torch.zeros_like(input_ids))
    positions = torch.where(inside, position_ids.gather(1, source), torch.zeros_like(position_ids))
    return ids, positions, shift


def causal_marker(batch: int, device: torch.device) -> torch.Tensor:
    """What the model is given as its attention mask: a ``(B, 1, 1, 1)`` tensor (transformers passes a 4D mask
    through as it is) telling :func:`ulysses_attention` to run plain causal attention over whole sequences."""
    return torch.ones(batch, 1, 1, 1, dtype=torch.bool, device=device)


def ulysses_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    scaling: Optional[float] = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple:
    """transformers' attention interface: ``(B, H, S/n, D)`` in, ``(B, S/n, H, D)`` out. Causal over the whole
    sequences (rows laid out by :func:`left_aligned`); ``attention_mask`` is :func:`causal_marker`'s or a full
    ``(B, 1, S, S)`` mask."""
    group = module.sequence_parallel_group
    heads = query.shape[1]
    if key.shape[1] != heads:  # grouped-query attention: each query head takes its key/value head along
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)
    query, key, value = (_AllToAll.apply(x, group, 1, 2) for x in (query, key, value))
    if attention_mask is None or attention_mask.shape[-2:] == (1, 1):
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, dropout_p=dropout,
                                             scale=scaling)
    else:
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
        )
    out = _AllToAll.apply(out, group, 2, 1)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Register ``ulysses_attention`` with transformers (idempotent); returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, ulysses_attention)
    return ATTENTION


def attach(model: torch.nn.Module, group: Any, size: int) -> int:
    """Give every attention layer of ``model`` the group to exchange heads over; returns how many it found.
    Refuses head counts the group size does not divide."""
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    if heads is not None and heads % size:
        raise ValueError(f"sequence_parallel_size={size} must divide the model's {heads} attention heads")
    found = 0
    for module in model.modules():
        if type(module).__name__.endswith("Attention") and hasattr(module, "num_key_value_groups"):
            module.sequence_parallel_group = group
            found += 1
    if not found:
        raise ValueError(f"sequence parallelism found no attention layers in {type(model).__name__}")
    return found


def new_groups(world_size: int, size: int, rank: int) -> tuple:
    """Every rank creates every group (torch.distributed requires it); returns this rank's group and its place
    in it. Groups are consecutive ranks: ``[0 .. size-1]``, ``[size .. 2*size-1]``, ..."""
    groups = [dist.new_group(list(range(start, start + size))) for start in range(0, world_size, size)]
    return groups[rank // size], rank % size
