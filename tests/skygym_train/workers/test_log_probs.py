"""Response log-probs in chunks: the values, entropies and gradients of one pass over the whole micro-batch.
On an accelerator (here the emulated one, ``tests.device_emulation``) each chunk is recomputed in the backward
pass, so only one chunk's fp32 logits are alive at a time; on CPU nothing is recomputed."""

from __future__ import annotations

import contextlib

import pytest
import torch

from skygym_train.workers.fsdp_worker import response_log_probs
from tests.device_emulation import emulated_device, is_on_device, on_device


def _inputs(dtype=torch.float32):
    torch.manual_seed(0)
    B, P, T, V = 7, 3, 5, 50
    logits = torch.randn(B, T, V, dtype=dtype, requires_grad=True)
    input_ids = torch.randint(0, V, (B, P + T))
    return logits, input_ids, P


def _reference(logits, input_ids, P, temperature):
    log_softmax = torch.log_softmax(logits.float() / temperature, dim=-1)
    targets = input_ids[:, P:]
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    return log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy


@pytest.mark.parametrize("where", ["cpu", "device"])
@pytest.mark.parametrize("chunk_tokens", [1, 10, 4096])  # a row a chunk, two rows, all in one
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_chunks_give_the_whole_batchs_values_and_gradients(where, chunk_tokens, entropy_grad):
    logits, input_ids, P = _inputs()
    weights = torch.randn(logits.shape[0], logits.shape[1])
    ref_lp, ref_ent = _reference(logits, input_ids, P, 0.7)
    ref_loss = (ref_lp * weights).sum() + (ref_ent * weights).sum() * entropy_grad
    (expected,) = torch.autograd.grad(ref_loss, logits)

    with emulated_device() if where == "device" else contextlib.nullcontext():
        x = on_device(logits.detach()).requires_grad_() if where == "device" else logits
        ids, w = (on_device(t) for t in (input_ids, weights)) if where == "device" else (input_ids, weights)
        lp, ent = response_log_probs(x, ids, P, 0.7, entropy_grad, chunk_tokens=chunk_tokens)
        assert is_on_device(lp) == (where == "device")
        assert ent.requires_grad is entropy_grad  # an entropy metric adds nothing to the backward pass
        loss = (lp * w).sum() + ((ent * w).sum() if entropy_grad else 0.0)
        (got,) = torch.autograd.grad(loss, x)
        lp, ent, got = lp.detach().cpu(), ent.detach().cpu(), got.cpu()
    torch.testing.assert_close(lp, ref_lp.detach())
    torch.testing.assert_close(ent, ref_ent.detach())
    torch.testing.assert_close(got, expected)


def test_bf16_logits_are_reduced_in_fp32_without_grad():
    logits, input_ids, P = _inputs(torch.bfloat16)
    with torch.no_grad():
        lp, ent = response_log_probs(logits, input_ids, P, 1.0, chunk_tokens=10)
        ref_lp, ref_ent = _reference(logits, input_ids, P, 1.0)
    assert lp.dtype == ent.dtype == torch.float32 and not lp.requires_grad
    torch.testing.assert_close(lp, ref_lp)
    torch.testing.assert_close(ent, ref_ent)
