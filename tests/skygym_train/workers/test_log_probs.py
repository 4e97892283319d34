"""Response log-probs in chunks: the values, entropies and gradients of one pass over the whole micro-batch.
On an accelerator (here the emulated one, ``tests.device_emulation``) each chunk is recomputed in the backward
pass, so only one chunk's fp32 logits are alive at a time; on CPU nothing is recomputed."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from skygym_train.workers import log_probs as log_probs_module
from skygym_train.workers.log_probs import (
    PLAIN_HEAD_CAUSAL_LMS, head_log_probs, install_log_prob_head, log_probs_from_head, response_log_probs,
)
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


# ---------------------------------------------------------------------------------- log-probs from the head


class _Largest(TorchDispatchMode):
    """The most elements any one tensor an op made had (what a chunking bounds)."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


@pytest.mark.parametrize("where", ["cpu", "device"])
@pytest.mark.parametrize("chunk_tokens", [1, 7, None])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_log_probs_through_the_head_are_those_of_its_logits(where, chunk_tokens, entropy_grad):
    """``head_log_probs`` gives the values and the gradients (to the hidden states and to the head's weight
    and bias) of ``response_log_probs`` over ``linear(hidden, weight, bias)``, chunk by chunk."""
    torch.manual_seed(0)
    B, T, H, V, P = 4, 5, 8, 50, 2
    hidden = torch.randn(B, T, H, requires_grad=True)
    weight, bias = torch.randn(V, H, requires_grad=True), torch.randn(V, requires_grad=True)
    input_ids = torch.randint(0, V, (B, P + T))
    w = torch.randn(B, T)
    ref_lp, ref_ent = response_log_probs(torch.nn.functional.linear(hidden, weight, bias), input_ids, P, 0.7,
                                         entropy_grad)
    ref_loss = (ref_lp * w).sum() + ((ref_ent * w).sum() if entropy_grad else 0.0)
    expected = torch.autograd.grad(ref_loss, (hidden, weight, bias))

    with emulated_device() if where == "device" else contextlib.nullcontext():
        move = on_device if where == "device" else (lambda t: t)
        leaves = [move(x.detach()).requires_grad_() for x in (hidden, weight, bias)]
        lp, ent = head_log_probs(leaves[0], leaves[1], leaves[2], move(input_ids[:, P:]), 0.7, entropy_grad,
                                 chunk_tokens=chunk_tokens)
        assert lp.shape == ent.shape == (B, T) and is_on_device(lp) == (where == "device")
        assert ent.requires_grad is entropy_grad
        loss = (lp * move(w)).sum() + ((ent * move(w)).sum() if entropy_grad else 0.0)
        got = [g.cpu() for g in torch.autograd.grad(loss, leaves)]
        lp, ent = lp.detach().cpu(), ent.detach().cpu()
    torch.testing.assert_close(lp, ref_lp.detach())
    torch.testing.assert_close(ent, ref_ent.detach())
    for name, a, b in zip(("hidden", "weight", "bias"), got, expected, strict=True):
        torch.testing.assert_close(a, b, msg=lambda m: f"{name}: {m}")


def test_the_head_makes_one_chunk_of_the_vocabulary_at_a_time_forward_and_backward():
    """On an accelerator (emulated) no tensor of the whole ``(tokens, vocabulary)`` exists in the forward or
    the backward pass, only chunks; over the logits, the same reduction makes them whole (the control: the
    measure can see them)."""
    torch.manual_seed(0)
    N, H, V, chunk = 64, 8, 100, 16
    with emulated_device():
        hidden = on_device(torch.randn(N, H)).requires_grad_()
        weight = on_device(torch.randn(V, H)).requires_grad_()
        targets = on_device(torch.randint(0, V, (N,)))
        with _Largest() as largest:
            lp, _ = head_log_probs(hidden, weight, None, targets, chunk_tokens=chunk)
            lp.sum().backward()
        assert largest.numel <= chunk * V
        with _Largest() as whole:
            logits = torch.nn.functional.linear(hidden, weight)
            lp, _ = response_log_probs(logits[:, None], targets[:, None], 0, chunk_tokens=chunk)
            lp.sum().backward()
        assert whole.numel >= N * V


class _HeadCasts(TorchDispatchMode):
    """How many copies an op made of a tensor shaped as the head's weight (autocast's casts, the gradient's)."""

    def __init__(self, shape):
        super().__init__()
        self.shape, self.casts = tuple(shape), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.casts += func is torch.ops.aten._to_copy.default and tuple(args[0].shape) == self.shape
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("trained", [True, False])
def test_under_autocast_a_frozen_head_is_cast_once_for_all_chunks(trained, monkeypatch):
    """Left to autocast, a frozen head (a reference model's, a LoRA model's) was cast again for every chunk and
    every chunk's recomputation in the backward pass (the accelerator's way, forced here on the CPU's autocast).
    Cast once, the values and gradients are the same; a trained head stays autocast's (its one kept cast)."""
    monkeypatch.setattr(log_probs_module, "recomputes_on", lambda device: True)
    torch.manual_seed(0)
    N, H, V, chunk = 64, 8, 100, 8
    hidden = torch.randn(N, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=trained)
    bias = torch.randn(V, requires_grad=trained)
    targets = torch.randint(0, V, (N,))

    def run():
        hidden.grad = weight.grad = bias.grad = None
        with _HeadCasts(weight.shape) as casts:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lp, ent = head_log_probs(hidden, weight, bias, targets, chunk_tokens=chunk)
            (lp.sum() + ent.sum()).backward()
        return casts.casts, [lp.detach(), ent.detach(), hidden.grad, weight.grad, bias.grad]

    casts, got = run()
    monkeypatch.setattr(log_probs_module, "_frozen_in_autocast_dtype", lambda device_type, *tensors: tensors)
    control, expected = run()
    if trained:  # autocast's own casts, and the gradient's back to fp32 (10 here)
        assert casts == control
    # autocast casts a frozen head in every chunk, and in its recomputation: 16; 8 once DeepSpeed ZeRO-3 ran in the
    # process (its memory_efficient_linear replaces torch.nn.functional.linear for good, and its linear keeps the
    # uncast weight, so a recomputation casts nothing)
    else:
        assert casts == 1 and control >= N // chunk
    for a, b in zip(got, expected):
        assert (a is None and b is None) or torch.equal(a, b)


def _tiny_causal_lm(class_name, **overrides):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = next(t for t, name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items() if name == class_name)
    config = AutoConfig.for_model(model_type, vocab_size=96, hidden_size=32, intermediate_size=48,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  head_dim=8,
                                  num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                  shared_expert_intermediate_size=16, pad_token_id=0, **overrides)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    assert type(model).__name__ == class_name
    return model


def _log_probs_both_ways(model, head):
    torch.manual_seed(1)
    ids = torch.randint(1, 96, (3, 9))
    keep, P = 5, 5  # the last 5 positions are kept; the first 4 of them predict the last 4 tokens
    targets = ids[:, P:]
    with torch.no_grad():
        logits = model(input_ids=ids, logits_to_keep=keep).logits
        expected, _ = response_log_probs(logits[:, :-1], ids, P)
        with log_probs_from_head(head, lambda kept: kept[:, :-1], targets, 1.0, False):
            got = model(input_ids=ids, logits_to_keep=keep).logits[..., 0]
    return got, expected


@pytest.mark.parametrize("class_name", sorted(PLAIN_HEAD_CAUSAL_LMS))
def test_every_listed_causal_lm_gives_its_logits_log_probs_through_its_head(class_name):
    model = _tiny_causal_lm(class_name)
    head = install_log_prob_head(model)
    assert head is model.get_output_embeddings()
    got, expected = _log_probs_both_ways(model, head)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # outside the mode: logits again
    assert model(input_ids=torch.ones(1, 3, dtype=torch.long)).logits.shape == (1, 3, 96)


@pytest.mark.parametrize("class_name, overrides", [
    ("CohereForCausalLM", {"logit_scale": 4.0}),
    ("Gemma2ForCausalLM", {"final_logit_softcapping": 1.0}),
    ("GraniteForCausalLM", {"logits_scaling": 4.0}),
])
def test_a_model_that_changes_its_logits_after_the_head_is_not_given_the_mode(class_name, overrides):
    """Cohere scales the logits, Gemma 2 softcaps them, Granite divides them: log-probs from their heads alone
    would be wrong, so they keep their logits. (Forced onto them, the mode gives other values: the check above
    can fail.)"""
    model = _tiny_causal_lm(class_name, **overrides)
    assert install_log_prob_head(model) is None
    head = model.get_output_embeddings()
    head.forward = types.MethodType(log_probs_module._head_forward, head)
    got, expected = _log_probs_both_ways(model, head)
    assert not torch.allclose(got, expected, atol=1e-3)


def test_a_lora_model_gets_the_mode_on_its_base_models_head_and_adapters_on_the_head_keep_logits(tiny_lm_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    def with_lora(targets):
        model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
        return get_peft_model(model, LoraConfig(r=2, target_modules=targets))

    model = with_lora(["q_proj"])
    assert install_log_prob_head(model) is model.get_base_model().lm_head
    on_head = with_lora(["lm_head"])
    assert install_log_prob_head(on_head) is None
