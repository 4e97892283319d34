"""Response log-probs and entropies, with as little of the vocabulary in memory at a time as possible.

A training micro-batch needs ``log p(token)`` and the entropy at every response position: a log-softmax over
the whole vocabulary, in fp32. Done at once, that is the biggest short-lived allocation of a step (16 answers
of 512 tokens at a 49k vocabulary: 1.5 GiB per fp32 copy, and the backward pass of a log-softmax holds
several), and it comes while the micro-batch's activations are all alive. Two ways in here:

- :func:`response_log_probs` takes the model's logits ``(B, T, V)`` and reduces them in chunks of response
  tokens.
- :func:`install_log_prob_head` gives the LM head of a causal LM a second mode: while
  :func:`log_probs_from_head` is active, the head, called by the model's own forward on the last hidden
  states, applies its weight chunk by chunk and returns ``(B, T, 2)`` (log-prob, entropy) instead of logits.
  The ``(B, T, V)`` logits never exist, nor does their gradient; in the backward pass each chunk's logits are
  recomputed from its hidden states (one more matrix product with the head's weight, about 4% of a 0.5B
  model's step).

On an accelerator each chunk is recomputed in the backward pass (``torch.utils.checkpoint``), so only one
chunk's fp32 vocabulary is alive at a time; on CPU, where memory is plentiful and compute is not, nothing is
recomputed. The values are those of one ``log_softmax`` over the whole micro-batch.
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional

import torch

LOG_PROB_CHUNK_ELEMENTS = 1 << 25
"""Vocabulary entries per chunk (tokens x vocabulary size): 128 MiB per fp32 copy; ~680 tokens at a 49k
vocabulary, ~220 at Qwen's 152k."""

PLAIN_HEAD_CAUSAL_LMS = frozenset({
    "GemmaForCausalLM", "LlamaForCausalLM", "MinistralForCausalLM", "MistralForCausalLM", "Olmo2ForCausalLM",
    "Phi3ForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "SmolLM3ForCausalLM",
})
"""transformers' causal LMs whose logits are exactly ``lm_head(hidden_states[:, logits_to_keep])``: no
softcapping (Gemma 2 and 3), no scale (Cohere, Granite) after the head.
``tests/skygym_train/workers/test_log_probs.py`` checks each one's log-probs through the head against its
logits."""


def response_log_probs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    prompt_length: int,
    temperature: float = 1.0,
    entropy_grad: bool = False,
    chunk_tokens: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities and entropies of the response tokens, ``(B, T)`` each.

    ``logits`` covers positions ``P-1 .. P+T-2`` (the ones that predict the response). Logits are divided by
    the sampling temperature so the ratio to the generator's probabilities is 1 before any update. Whole rows
    go through at a time, about ``chunk_tokens`` tokens (default: :data:`LOG_PROB_CHUNK_ELEMENTS` of the
    vocabulary) per chunk."""
    targets = input_ids[:, prompt_length:]
    if chunk_tokens is None:
        chunk_tokens = LOG_PROB_CHUNK_ELEMENTS // max(1, logits.shape[-1])
    rows = max(1, chunk_tokens // max(1, targets.shape[1]))
    recompute = torch.is_grad_enabled() and logits.requires_grad and recomputes_on(logits.device)
    temperature, with_entropy_grad = float(temperature or 1.0), entropy_grad and torch.is_grad_enabled()
    chunks = ((logits[start : start + rows], targets[start : start + rows], temperature, with_entropy_grad)
              for start in range(0, logits.shape[0], rows))
    return _in_chunks(_token_log_probs, chunks, recompute)


def head_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    targets: torch.Tensor,
    temperature: float = 1.0,
    entropy_grad: bool = False,
    chunk_tokens: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``response_log_probs`` of the logits ``linear(hidden, weight, bias)`` without making them: ``hidden``
    is ``(..., H)``, the last hidden states at the positions that predict ``targets`` (``(...)``); returns
    log-probs and entropies shaped as ``targets``. Tokens go through in chunks of ``chunk_tokens`` (default:
    :data:`LOG_PROB_CHUNK_ELEMENTS` of the vocabulary), each chunk's logits made, reduced and dropped."""
    shape = targets.shape
    flat, flat_targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    if chunk_tokens is None:
        chunk_tokens = LOG_PROB_CHUNK_ELEMENTS // max(1, weight.shape[0])
    chunk_tokens = max(1, chunk_tokens)
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    recompute = grad and recomputes_on(hidden.device)
    weight, bias = _frozen_in_autocast_dtype(hidden.device.type, weight, bias)
    temperature, with_entropy_grad = float(temperature or 1.0), entropy_grad and torch.is_grad_enabled()
    chunks = ((flat[start : start + chunk_tokens], weight, bias, flat_targets[start : start + chunk_tokens],
               temperature, with_entropy_grad) for start in range(0, flat.shape[0], chunk_tokens))
    log_probs, entropies = _in_chunks(_head_chunk, chunks, recompute)
    return log_probs.reshape(shape), entropies.reshape(shape)


def _frozen_in_autocast_dtype(device_type: str, *tensors: Optional[torch.Tensor]) -> tuple:
    """Each tensor that is not trained (a reference model's head, a LoRA model's) cast once to autocast's dtype,
    where autocast is on: autocast itself keeps its cast only of a trained weight, and cast a frozen one again in
    every chunk and every chunk's recomputation (at Qwen's 152k vocabulary ~40 casts of the whole head per
    micro-batch). A trained weight is left to autocast: a copy made here would stay alive through the backward
    pass, where autocast's is dropped after the forward one."""
    if not (torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)):
        return tensors
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dtype) if t is not None and not t.requires_grad and t.is_floating_point() else t
                 for t in tensors)


def recomputes_on(device: torch.device) -> bool:
    """Whether chunks on ``device`` are recomputed in the backward pass: on accelerators, not on the CPU."""
    return device.type != "cpu"


def _in_chunks(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]], chunks: Iterable[tuple],
               recompute: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``fn``'s log-probs and entropies over each chunk's arguments, joined; with ``recompute`` each chunk is
    run again in the backward pass instead of keeping what its backward needs."""
    from torch.utils.checkpoint import checkpoint

    results = [checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)  # no randomness to replay
               if recompute else fn(*args) for args in chunks]
    if len(results) == 1:
        return results[0]
    return torch.cat([lp for lp, _ in results]), torch.cat([ent for _, ent in results])


def _head_chunk(
    hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], targets: torch.Tensor,
    temperature: float, entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.nn.functional.linear(hidden, weight, bias)
    return _token_log_probs(logits, targets, temperature, entropy_grad)


def _token_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk: ``log p(target)`` and the entropy, in fp32."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_softmax = torch.log_softmax(logits, dim=-1)
    log_probs = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        # only an entropy bonus needs its gradient; as a metric it would double the backward's memory
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    return log_probs, entropy


# -------------------------------------------------------------------------------------- the LM head's mode


@dataclass
class _Request:
    gather: Callable[[torch.Tensor], torch.Tensor]
    targets: torch.Tensor
    temperature: float
    entropy_grad: bool


def install_log_prob_head(model: torch.nn.Module) -> Optional[torch.nn.Module]:
    """Give ``model``'s LM head the log-prob mode of :func:`log_probs_from_head` and return the head; None
    where the model is not a causal LM of :data:`PLAIN_HEAD_CAUSAL_LMS` (a LoRA-wrapped one counts by its base
    model) or its head is not a plain ``torch.nn.Linear`` (adapters on the head, quantized heads): such a
    model gives logits as before. The head stays the same module, with the same (possibly tied) weight, so
    FSDP2 and DeepSpeed wrap it as before; call this before wrapping."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    if type(base).__name__ not in PLAIN_HEAD_CAUSAL_LMS:
        return None
    head = base.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        return None
    head.forward = types.MethodType(_head_forward, head)
    return head


@contextlib.contextmanager
def log_probs_from_head(head: torch.nn.Module, gather: Callable[[torch.Tensor], torch.Tensor],
                        targets: torch.Tensor, temperature: float, entropy_grad: bool) -> Iterator[None]:
    """While active, the head installed by :func:`install_log_prob_head` returns, for the hidden states the
    model gives it, ``(B, T, 2)``: the log-prob of ``targets`` (``(B, T)``) and the entropy at each position,
    in fp32, where ``gather`` maps the hidden states it gets (``(R, K, H)``: the kept positions of each row)
    to the ``(B, T, H)`` that predict ``targets``. The model's ``logits`` output is that tensor."""
    head.log_prob_request = _Request(gather, targets, temperature, entropy_grad)
    try:
        yield
    finally:
        del head.log_prob_request


def _head_forward(self: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    request: Optional[_Request] = getattr(self, "log_prob_request", None)
    if request is None:
        return torch.nn.functional.linear(hidden, self.weight, self.bias)
    log_probs, entropy = head_log_probs(request.gather(hidden), self.weight, self.bias, request.targets,
                                        request.temperature, request.entropy_grad)
    return torch.stack((log_probs, entropy), dim=-1)
