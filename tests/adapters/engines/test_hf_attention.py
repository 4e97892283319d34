"""``hf_attention``: grouped key/value heads read in place where one mask serves every head (the engine's decoding,
the trainer's forward and backward passes), with transformers' SDPA results."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, List

import pytest

from skygym_adapters.engines import hf_attention
from skygym_adapters.engines.hf import HFEngine

torch = pytest.importorskip("torch", reason="needs torch: pip install torch (the 'train' extra)")


class _Attention(torch.nn.Module):
    num_key_value_groups = 3  # 6 query heads over 2 key/value heads
    config = SimpleNamespace(num_hidden_layers=28)  # a fold's mask serves this many layers


def _folded_calls(monkeypatch: pytest.MonkeyPatch) -> List[Any]:
    """The query shapes of SDPA calls made on the folded path (``(batch, kv_heads, groups * q_len, dim)``)."""
    calls: List[Any] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(tuple(query.shape))
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_a_folded_decode_step_is_transformers_sdpa_on_repeated_heads(mask_kind: str) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator().manual_seed(0)
    batch, kv_heads, length, dim = 4, 2, 40, 16
    query = torch.randn(batch, 6, 1, dim, generator=gen)
    key, value = (torch.randn(batch, kv_heads, length, dim, generator=gen) for _ in range(2))
    allowed = torch.rand(batch, 1, 1, length, generator=gen) > 0.4  # left padding and unwritten positions alike
    allowed[..., 0] = True
    mask = allowed if mask_kind == "bool" else torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    module = _Attention()
    ours, _ = hf_attention.sdpa_grouped(module, query, key, value, mask, scaling=0.3)
    theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
    assert ours.shape == theirs.shape == (batch, 1, 6, dim)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    # every query head reads its own group's key/value head: a change to head 1 moves heads 3-5 only
    changed = value.clone()
    changed[:, 1] += 1.0
    moved = (hf_attention.sdpa_grouped(module, query, key, changed, mask, scaling=0.3)[0] - ours).abs()
    assert moved[:, :, :3].max() == 0 and moved[:, :, 3:].min() > 0


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_folded_attention_over_many_positions_is_transformers_sdpa_forward_and_backward(
        mask_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefill and training: every query position of every head, left padding and a packed row's block mask alike;
    the gradients of queries, keys and values too (the backward pass reads the folded layout)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator().manual_seed(1)
    batch, kv_heads, length, dim = 3, 2, 21, 64
    calls = _folded_calls(monkeypatch)
    inputs = [torch.randn(batch, 6, length, dim, generator=gen)] + [
        torch.randn(batch, kv_heads, length, dim, generator=gen) for _ in range(2)]
    allowed = torch.ones(length, length).tril().bool().expand(batch, 1, length, length).clone()
    allowed[0, :, :, :5] = False  # row 0: left padding (its padding queries see only themselves)
    allowed[0, :, range(5), range(5)] = True
    allowed[1, :, 12:, 4:12] = False  # row 1: a second branch that does not see the first
    mask = allowed if mask_kind == "bool" else torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo().min)
    module = _Attention()
    results = []
    for attention in (hf_attention.sdpa_grouped, sdpa_attention_forward):
        leaves = [t.clone().requires_grad_() for t in inputs]
        out, _ = attention(module, *leaves, mask, scaling=0.4)
        (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
        results.append((out.detach(), [leaf.grad for leaf in leaves]))
    (ours, our_grads), (theirs, their_grads) = results
    assert calls[0] == (batch, kv_heads, 3 * length, dim) and calls[1] == (batch, 6, length, dim)  # folded; theirs
    assert ours.shape == theirs.shape == (batch, length, 6, dim)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    for a, b in zip(our_grads, their_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_mask_is_repeated_once_per_forward_pass_and_again_when_changed() -> None:
    """Every layer gets the same mask object: the per-group mask is made once, kept on it (freed with it), additive
    in the dtype attention computes in, rows 16-element aligned; a mask written in place is made again."""
    allowed = torch.rand(2, 1, 5, 7) > 0.3
    first = hf_attention.mask_per_group(allowed, 3, torch.bfloat16)
    assert first.shape == (2, 1, 15, 7) and first.dtype == torch.bfloat16
    for member in range(3):  # rows member-major: (group member, position)
        block = first[:, :, member * 5:(member + 1) * 5]
        assert (block[allowed] == 0).all() and (block[~allowed] == torch.finfo(torch.bfloat16).min).all()
    assert all(stride % 16 == 0 for stride in first.stride()[:-1]) and first.stride(-1) == 1
    assert hf_attention.mask_per_group(allowed, 3, torch.bfloat16) is first
    assert hf_attention.mask_per_group(allowed, 2, torch.bfloat16) is not first  # another model's groups
    allowed[0, 0, 0, 0] = not allowed[0, 0, 0, 0]
    again = hf_attention.mask_per_group(allowed, 3, torch.bfloat16)
    assert again is not first and (again[0, 0, 0, 0] == 0) == bool(allowed[0, 0, 0, 0])
    additive = torch.zeros(1, 1, 2, 3).masked_fill(torch.tensor([[[[False, True, True], [False, False, True]]]]),
                                                   float("-inf"))
    torch.testing.assert_close(hf_attention.mask_per_group(additive, 2, torch.float32), additive.repeat(1, 1, 2, 1))


def test_under_autocast_the_mask_is_folded_in_the_dtype_attention_computes_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rotary embeddings leave the query in fp32 under autocast, but SDPA computes in autocast's dtype: a fold in
    fp32 would be cast again in every layer (each copy kept for the backward pass)."""
    calls = _folded_calls(monkeypatch)
    masks = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *args, **kwargs: masks.append(kwargs["attn_mask"]) or sdpa(*args, **kwargs))
    query = torch.randn(2, 6, 9, 64, requires_grad=True)
    key, value = torch.randn(2, 2, 9, 64), torch.randn(2, 2, 9, 64)
    allowed = torch.ones(9, 9).tril().bool().expand(2, 1, 9, 9)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = hf_attention.sdpa_grouped(_Attention(), query, key, value, allowed)
    assert calls == [(2, 2, 27, 64)] and masks[0].dtype == torch.bfloat16 and out.dtype == torch.bfloat16


def test_aligned_additive_mask_is_the_boolean_one_with_rows_aligned_for_the_gpu_kernel() -> None:
    allowed = torch.rand(2, 1, 37, 37) > 0.5
    for dtype in (torch.float32, torch.bfloat16):
        mask = hf_attention.aligned_additive_mask(allowed, dtype)
        assert mask.shape == allowed.shape and mask.dtype == dtype
        assert (mask[allowed] == 0).all() and (mask[~allowed] == torch.finfo(dtype).min).all()
        # every stride but the last a multiple of 16 elements: SDPA's memory-efficient kernel uses it uncopied
        assert all(stride % 16 == 0 for stride in mask.stride()[:-1]) and mask.stride(-1) == 1


def test_the_fold_is_taken_where_it_costs_less_memory_than_the_copies() -> None:
    """Counted per row in elements: the copies of key/value heads against the fold's extra mask rows (shared by the
    layers where the mask can keep it) and, with gradients, its copy of the output."""
    def pays(heads: int, kv_heads: int, length: int, kv_len: int, dim: int, layers: int = 28, grad: bool = False,
             inference: bool = False) -> bool:
        module = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=layers))
        query = torch.zeros(1, heads, length, dim, requires_grad=grad)
        key = torch.zeros(1, kv_heads, kv_len, dim)
        if inference:
            with torch.inference_mode():
                mask = torch.ones(1, 1, length, kv_len, dtype=torch.bool)
        else:
            mask = torch.ones(1, 1, length, kv_len, dtype=torch.bool)
        with torch.set_grad_enabled(grad):
            return hf_attention._fold_pays(module, query, key, mask)

    assert pays(12, 2, 1, 640, 128, inference=True)  # a decode step: nothing to copy, always
    assert pays(12, 2, 1105, 1105, 128, grad=True)  # Qwen2.5-1.5B training on a packed row
    assert pays(14, 2, 600, 600, 64, layers=24, grad=True)  # 0.5B on padded rows
    assert pays(12, 2, 128, 640, 128, inference=True)  # a prefill of 128-token prompts
    assert not pays(12, 2, 4096, 4608, 128, inference=True)  # a long prefill: a mask per layer costs more
    assert not pays(2, 1, 40, 40, 16, layers=2, grad=True)  # two query heads a group keep what they save
    assert not pays(12, 2, 30_000, 30_000, 128, grad=True)  # a packed row of 30k: the mask outgrows the copies


def test_what_the_fold_cannot_serve_goes_to_transformers_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.integrations import sdpa_attention

    seen: List[Any] = []

    def recording(module: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(tuple(query.shape))
        return "theirs", None

    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward", recording)
    module, key = _Attention(), torch.zeros(1, 2, 8, 4)
    prefill = torch.zeros(1, 6, 5, 4)
    step = torch.zeros(1, 6, 1, 4)
    per_head = torch.ones(1, 6, 1, 8, dtype=torch.bool)
    one_row_for_five = torch.ones(1, 1, 1, 8, dtype=torch.bool)
    for query, mask in ((prefill, None), (prefill, one_row_for_five), (step, None), (step, per_head)):
        assert hf_attention.sdpa_grouped(module, query, key, key, mask)[0] == "theirs"
    one_row = torch.ones(1, 1, 1, 8, dtype=torch.bool)
    for extra in ({"softcap": 30.0}, {"sinks": torch.zeros(6)}, {"s_aux": torch.zeros(6)}, {"dropout": 0.1},
                  {"position_bias": torch.zeros(1, 6, 1, 8)}):
        assert hf_attention.sdpa_grouped(module, step, key, key, one_row, **extra)[0] == "theirs", extra
    assert seen == [(1, 6, 5, 4)] * 2 + [(1, 6, 1, 4)] * 7
    ungrouped = _Attention()
    ungrouped.num_key_value_groups = 1
    assert hf_attention.sdpa_grouped(ungrouped, prefill, prefill, prefill, torch.ones(1, 1, 5, 5).bool())[0] == "theirs"


class _PerLayerConfig:
    """transformers' configs with per-layer head counts raise on the global names (a RuntimeError)."""

    model_type, _attn_implementation, num_attention_heads = "qwen2", "sdpa", 4

    @property
    def num_key_value_heads(self) -> int:
        raise RuntimeError("num_key_value_heads differs per layer")


def test_only_sdpa_models_with_grouped_heads_of_known_types_are_switched(tiny_model_dir: Any) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    grouped = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")  # 2 heads over 1
    assert hf_attention.use_grouped_attention(grouped)
    assert grouped.config._attn_implementation == hf_attention.NAME
    assert hf_attention.use_grouped_attention(grouped)  # already switched: still says so
    # a type whose modeling code may ask for "sdpa" by name stays on it
    unknown = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    unknown.config.model_type = "minimax_m3_vl"
    assert not hf_attention.use_grouped_attention(unknown) and unknown.config._attn_implementation == "sdpa"
    assert not hf_attention.use_grouped_attention(SimpleNamespace(config=_PerLayerConfig()))
    eager = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager")
    assert not hf_attention.use_grouped_attention(eager) and eager.config._attn_implementation == "eager"
    config = AutoConfig.from_pretrained(tiny_model_dir, num_key_value_heads=2)  # a key/value head per query head
    ungrouped = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    assert not hf_attention.use_grouped_attention(ungrouped)
    assert ungrouped.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("decode_mode", ["static", "dynamic"])
async def test_the_engine_decodes_what_repeated_heads_decode(tokenizer: Any, tiny_model_dir: Any,
                                                                 decode_mode: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Padded prompts of different lengths, seeded and greedy, with log-probs: the same tokens and log-probs as the
    same model on transformers' eager attention (which repeats the heads); and the decode steps did take the folded
    path."""
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False)
               for text in ("short", "a much longer prompt, with more tokens in it", "x")]
    ours = HFEngine(str(tiny_model_dir), device="cpu", decode_mode=decode_mode, compile_decode=False)
    theirs = HFEngine(str(tiny_model_dir), device="cpu", decode_mode=decode_mode, compile_decode=False)
    theirs.model.set_attn_implementation("eager")
    folded: List[Any] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query: Any, *args: Any, **kwargs: Any) -> Any:
        if query.shape[1] == 1 and query.shape[2] == 2:  # (batch, 1 key/value head, 2 grouped heads, dim)
            folded.append(query.shape[0])
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    try:
        assert ours.grouped_attention and ours.model.config._attn_implementation == hf_attention.NAME
        for params in ({"max_generate_length": 10, "temperature": 1.0, "seed": 4, "logprobs": True},
                       {"max_generate_length": 10, "temperature": 0.0, "logprobs": True}):
            folded.clear()
            got = await ours.generate(prompts, params)
            assert len(folded) >= 9 * 2, "the decode steps did not take the folded path"  # 9 steps x 2 layers
            want = await theirs.generate(prompts, params)
            assert got["response_ids"] == want["response_ids"] and got["stop_reasons"] == want["stop_reasons"]
            for a, b in zip(got["response_logprobs"], want["response_logprobs"]):
                assert a == pytest.approx(b, abs=1e-5)
    finally:
        ours.close()
        theirs.close()


async def test_a_model_handed_to_the_engine_keeps_its_attention_unless_opted_in(tokenizer: Any,
                                                                               tiny_model_dir: Any) -> None:
    """A model handed in may be a trainer's policy, whose code may check the attention's name (HF Trainer's context
    parallelism asks for "sdpa"): the engine leaves it as it is. A model opted in decodes on the folded path."""
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    engine = HFEngine(policy, tokenizer, device="cpu", compile_decode=False)
    try:
        assert not engine.grouped_attention and policy.config._attn_implementation == "sdpa"
        before = await engine.generate([[5, 6, 7]], {"max_generate_length": 6, "temperature": 0.0, "logprobs": True})
    finally:
        engine.close()
    assert hf_attention.use_grouped_attention(policy)
    opted = HFEngine(policy, tokenizer, device="cpu", compile_decode=False)
    try:
        assert opted.grouped_attention
        after = await opted.generate([[5, 6, 7]], {"max_generate_length": 6, "temperature": 0.0, "logprobs": True})
        assert after["response_ids"] == before["response_ids"]
        assert after["response_logprobs"][0] == pytest.approx(before["response_logprobs"][0], abs=1e-5)
    finally:
        opted.close()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU (this machine has none): checks the fused kernels the GPU runs; the CPU "
                    "tests above check the same results on the CPU's kernels")
@pytest.mark.parametrize("length", [1, 300])
def test_on_a_gpu_the_folded_call_runs_a_fused_kernel_and_matches_transformers_in_bf16(length: int) -> None:
    """Training's shape (a packed row's block mask, bf16, head_dim 128, grads) and a decode step's, under an SDPA
    context without the math kernel (whose (rows, heads, L, S) scores would not fit at the trainer's sizes): the
    folded call must find a fused kernel (memory-efficient or cuDNN), and agree with transformers' repeated heads."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator(device="cuda").manual_seed(0)
    batch, kv_heads, keys, dim = 2, 2, 300, 128
    query = torch.randn(batch, 6, length, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    key, value = (torch.randn(batch, kv_heads, keys, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
                  for _ in range(2))
    allowed = torch.ones(keys, keys, device="cuda").tril().bool()[keys - length:].expand(batch, 1, length, keys)
    allowed = allowed.clone()
    allowed[1, :, :, :37] = False  # the second row is left-padded (its queries start further in)
    allowed[1, :, :, 36] = True
    module = _Attention()
    results = []
    for attention in (hf_attention.sdpa_grouped, sdpa_attention_forward):
        leaves = [t.clone().requires_grad_() for t in (query, key, value)]
        fused = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]
        with sdpa_kernel(fused if attention is hf_attention.sdpa_grouped else fused + [SDPBackend.MATH]):
            out, _ = attention(module, *leaves, allowed, scaling=dim ** -0.5)
            out.float().square().mean().backward()
        results.append((out.float(), [leaf.grad.float() for leaf in leaves]))
    (ours, our_grads), (theirs, their_grads) = results
    torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)
    for a, b in zip(our_grads, their_grads):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=2e-3)
