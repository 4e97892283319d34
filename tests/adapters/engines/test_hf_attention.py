"""The engine's decode attention (``hf_attention``): grouped key/value heads read in place, with transformers' SDPA
results."""

from __future__ import annotations

from typing import Any, List

import pytest

from skygym_adapters.engines import hf_attention
from skygym_adapters.engines.hf import HFEngine

torch = pytest.importorskip("torch")


class _Attention(torch.nn.Module):
    num_key_value_groups = 3  # 6 query heads over 2 key/value heads


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
    ours, _ = hf_attention.sdpa_grouped_decode(module, query, key, value, mask, scaling=0.3)
    theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
    assert ours.shape == theirs.shape == (batch, 1, 6, dim)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    # every query head reads its own group's key/value head: a change to head 1 moves heads 3-5 only
    changed = value.clone()
    changed[:, 1] += 1.0
    moved = (hf_attention.sdpa_grouped_decode(module, query, key, changed, mask, scaling=0.3)[0] - ours).abs()
    assert moved[:, :, :3].max() == 0 and moved[:, :, 3:].min() > 0


def test_prefill_and_unmasked_steps_go_to_transformers_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
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
    for query, mask in ((prefill, torch.ones(1, 1, 5, 8, dtype=torch.bool)), (step, None), (step, per_head)):
        assert hf_attention.sdpa_grouped_decode(module, query, key, key, mask)[0] == "theirs"
    one_row = torch.ones(1, 1, 1, 8, dtype=torch.bool)
    for extra in ({"softcap": 30.0}, {"sinks": torch.zeros(6)}, {"s_aux": torch.zeros(6)}, {"dropout": 0.1}):
        assert hf_attention.sdpa_grouped_decode(module, step, key, key, one_row, **extra)[0] == "theirs", extra
    assert seen == [(1, 6, 5, 4)] + [(1, 6, 1, 4)] * 6


class _PerLayerConfig:
    """transformers' configs with per-layer head counts raise on the global names (a RuntimeError)."""

    model_type, _attn_implementation, num_attention_heads = "qwen2", "sdpa", 4

    @property
    def num_key_value_heads(self) -> int:
        raise RuntimeError("num_key_value_heads differs per layer")


def test_only_sdpa_models_with_grouped_heads_of_known_types_are_switched(tiny_model_dir: Any) -> None:
    from types import SimpleNamespace

    from transformers import AutoConfig, AutoModelForCausalLM

    grouped = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")  # 2 heads over 1
    assert hf_attention.use_grouped_decode_attention(grouped)
    assert grouped.config._attn_implementation == hf_attention.NAME
    assert hf_attention.use_grouped_decode_attention(grouped)  # already switched: still says so
    # a type whose modeling code may ask for "sdpa" by name stays on it
    unknown = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    unknown.config.model_type = "minimax_m3_vl"
    assert not hf_attention.use_grouped_decode_attention(unknown) and unknown.config._attn_implementation == "sdpa"
    assert not hf_attention.use_grouped_decode_attention(SimpleNamespace(config=_PerLayerConfig()))
    eager = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager")
    assert not hf_attention.use_grouped_decode_attention(eager) and eager.config._attn_implementation == "eager"
    config = AutoConfig.from_pretrained(tiny_model_dir, num_key_value_heads=2)  # a key/value head per query head
    ungrouped = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    assert not hf_attention.use_grouped_decode_attention(ungrouped)
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
        assert ours.grouped_decode_attention and ours.model.config._attn_implementation == hf_attention.NAME
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
        assert not engine.grouped_decode_attention and policy.config._attn_implementation == "sdpa"
        before = await engine.generate([[5, 6, 7]], {"max_generate_length": 6, "temperature": 0.0, "logprobs": True})
    finally:
        engine.close()
    assert hf_attention.use_grouped_decode_attention(policy)
    opted = HFEngine(policy, tokenizer, device="cpu", compile_decode=False)
    try:
        assert opted.grouped_decode_attention
        after = await opted.generate([[5, 6, 7]], {"max_generate_length": 6, "temperature": 0.0, "logprobs": True})
        assert after["response_ids"] == before["response_ids"]
        assert after["response_logprobs"][0] == pytest.approx(before["response_logprobs"][0], abs=1e-5)
    finally:
        opted.close()
