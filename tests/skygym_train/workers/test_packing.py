"""Sequence packing gives the padded layout's log-probabilities, values and gradients, with fewer tokens."""

from __future__ import annotations

import random

import pytest
import torch

from skygym_train.config.schema import AlgorithmConfig, OptimizerConfig
from skygym_train.algorithms import POLICY_LOSSES
from skygym_train.workers.batch import build_batch
from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec
from skygym_train.workers.packing import layout_for, pack, pack_varlen


def _grouped_batch(groups=3, samples=4, seed=0, vocab=64):
    """GRPO-shaped rows: a few prompts of different lengths, several responses of different lengths each."""
    rng = random.Random(seed)
    prompts, responses, masks, uids, rewards = [], [], [], [], []
    for g in range(groups):
        prompt = [rng.randrange(1, vocab) for _ in range(rng.randint(2, 9))]
        for _ in range(samples):
            response = [rng.randrange(1, vocab) for _ in range(rng.randint(1, 7))]
            prompts.append(prompt)
            responses.append(response)
            masks.append([1] * len(response))
            uids.append(f"g{g}")
            rewards.append(float(rng.random()))
    # one multi-turn-like row whose middle tokens are an observation (loss mask 0)
    responses[-1] = responses[-1] + [5, 6, 7]
    masks[-1] = masks[-1][: len(responses[-1]) - 3] + [0, 0, 1]
    return build_batch(prompts, responses, masks, pad_token_id=0, uids=uids, rewards=rewards)


def test_layout_stores_each_prompt_once_and_is_causal_in_positions():
    batch = _grouped_batch(groups=2, samples=3)
    packed = pack(batch.tensors, batch.prompt_length)
    attention = batch.tensors["attention_mask"]
    prompt_lengths = attention[:, : batch.prompt_length].sum(1).tolist()
    response_lengths = attention[:, batch.prompt_length :].sum(1).tolist()
    # each distinct prompt once (its last token once per response), each response token once
    distinct = {i // 3: prompt_lengths[i] for i in range(batch.size)}
    expected = sum(p - 1 for p in distinct.values()) + sum(1 + r for r in response_lengths)
    assert packed.num_real_tokens == expected
    assert packed.num_tokens < batch.tensors["input_ids"].numel()
    mask = packed.attention_mask[:, 0]
    assert mask.shape[-1] == mask.shape[-2] == packed.input_ids.shape[1]
    pos = packed.position_ids
    assert not (mask & (pos[:, None, :] > pos[:, :, None])).any(), "a token attends to a later position"


def test_varlen_layout_is_every_row_end_to_end_with_positions_restarting():
    batch = _grouped_batch(groups=2, samples=2)
    packed = pack_varlen(batch.tensors, batch.prompt_length)
    attention = batch.tensors["attention_mask"]
    assert packed.attention_mask is None and packed.input_ids.shape == (1, int(attention.sum()))
    starts = (packed.position_ids[0] == 0).nonzero().flatten().tolist()
    lengths = [b - a for a, b in zip(starts, starts[1:] + [packed.input_ids.shape[1]])]
    assert lengths == attention.sum(1).tolist()
    # the kept columns are exactly the positions that predict a response token
    assert len(packed.keep) == int(attention[:, batch.prompt_length :].sum())


def test_attention_implementations_get_their_layout():
    assert layout_for("sdpa") == layout_for("eager") == layout_for("skyrl_gym_sdpa") == "shared_prefix"
    assert layout_for("flash_attention_2") == "varlen"
    assert layout_for("flex_attention") == layout_for("sdpa", enabled=False) == "padded"


@pytest.mark.parametrize("packer", [pack, pack_varlen])
def test_rejects_an_empty_prompt(packer):
    tensors = build_batch([[1, 2], [3]], [[4], [5]], [[1], [1]], pad_token_id=0).tensors
    tensors["attention_mask"][1, :2] = 0
    with pytest.raises(ValueError, match="row 1 has an empty prompt"):
        packer(tensors, 2)


def _worker(model_dir, role="policy", layout="shared_prefix", device=None, **spec_fields):
    spec = WorkerSpec(
        **spec_fields,
        role=role,
        model_path=str(model_dir),
        optimizer=OptimizerConfig(lr=1e-3),
        micro_train_batch_size=64,
        micro_forward_batch_size=64,
        sample_packing=layout != "padded",
    )
    worker = TrainingWorker(spec)
    if device is not None:
        worker.device = torch.device(device)
    worker.load_model()
    assert worker.layout == ("shared_prefix" if layout != "padded" else "padded")  # what sdpa gets
    worker.layout = layout  # varlen is flash attention's layout; under sdpa transformers masks it the same way
    if role == "policy":
        worker.configure_algorithm(AlgorithmConfig(), POLICY_LOSSES.get("regular"), 1.0)
    return worker


@pytest.mark.parametrize("layout", ["shared_prefix", "varlen"])
@pytest.mark.parametrize("role", ["policy", "critic"])
def test_packed_forward_equals_padded(tiny_lm_dir, role, layout):
    batch = _grouped_batch()
    padded, packed = _worker(tiny_lm_dir, role, "padded"), _worker(tiny_lm_dir, role, layout)
    a, b = padded.forward(batch), packed.forward(batch)
    mask = batch.tensors["response_mask"].bool() | (batch.tensors["attention_mask"][:, batch.prompt_length :] > 0)
    for key in a:
        assert torch.allclose(a[key][mask], b[key][mask], atol=1e-5), key
    assert packed.tokens_run < (0.7 if layout == "shared_prefix" else 0.9) * padded.tokens_run


def _assert_same_update(a, b):
    """The two workers' updated weights agree, on the CPU. On a GPU the layouts run different attention kernels
    whose rounding differs, and Adam turns the rounding noise of a gradient that is 0 in exact arithmetic (the key
    biases') into up to half a step either way: there the loss and gradient norm carry the comparison."""
    for (name, p), q in zip(a.model.named_parameters(), b.model.parameters()):
        if p.device.type == "cpu":
            assert torch.allclose(p, q, atol=1e-6), name


@pytest.mark.parametrize("layout", ["shared_prefix", "varlen"])
def test_packed_training_step_equals_padded(tiny_lm_dir, layout):
    batch = _grouped_batch(seed=3)
    T = batch.response_length
    batch = batch.with_tensors(advantages=torch.linspace(-1, 1, batch.size)[:, None].expand(-1, T).contiguous())
    padded, packed = _worker(tiny_lm_dir, layout="padded"), _worker(tiny_lm_dir, layout=layout)
    ma, mb = padded.train_step(batch), packed.train_step(batch)
    assert abs(ma["policy/loss"] - mb["policy/loss"]) < 1e-5
    assert abs(ma["policy/grad_norm"] - mb["policy/grad_norm"]) < 1e-4 * max(1.0, ma["policy/grad_norm"])
    _assert_same_update(padded, packed)


@pytest.mark.parametrize("cuda", [False, True])
def test_an_attention_the_model_config_keys_name_is_kept_on_a_gpu_too(cuda, monkeypatch):
    """On a GPU the worker picked flash attention or SDPA over ``model_config_kwargs={"attn_implementation":
    "eager"}``: a run (and the test below) that asked for eager attention got SDPA there. The trainer's own keys
    (``flash_attn``) still decide where they are set."""
    import importlib.util

    from skygym_train.workers.fsdp_worker import attention_for

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    spec = WorkerSpec(role="policy", model_path="unused")
    eager = WorkerSpec(role="policy", model_path="unused", model_config_kwargs={"attn_implementation": "eager"})
    assert attention_for(spec, cuda) == ("sdpa" if cuda else None)
    assert attention_for(eager, cuda) is None  # the config keys' "eager" reaches from_pretrained
    assert attention_for(WorkerSpec(role="policy", model_path="unused", flash_attn=False), cuda) == "sdpa"
    assert attention_for(WorkerSpec(role="policy", model_path="unused", flash_attn=True), cuda) == "flash_attention_2"


def test_flash_attention_is_the_gpu_default_only_where_the_worker_computes_in_16_bits(monkeypatch):
    """flash-attn has no fp32 kernel: a GPU run with ``trainer.bf16=false`` or an fp32 ``param_dtype`` computes in
    fp32, and with flash attention picked by default its first forward pass raised. It gets SDPA."""
    import importlib.util

    from skygym_train.config.schema import MixedPrecisionConfig
    from skygym_train.workers.fsdp_worker import attention_for, gpu_compute_dtype

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: real("torch") if name == "flash_attn" else real(name, *a))

    def spec(**kw):
        return WorkerSpec(role="policy", model_path="unused", **kw)

    bf16 = spec(mixed_precision=MixedPrecisionConfig())  # the trainer's default: bf16
    assert (gpu_compute_dtype(bf16), attention_for(bf16, True)) == (torch.bfloat16, "flash_attention_2")
    half = spec(mixed_precision=MixedPrecisionConfig(param_dtype="fp16"))
    assert (gpu_compute_dtype(half), attention_for(half, True)) == (torch.float16, "flash_attention_2")
    for fp32 in (spec(mixed_precision=MixedPrecisionConfig(), bf16=False),
                 spec(mixed_precision=MixedPrecisionConfig(param_dtype="fp32")), spec()):
        assert (gpu_compute_dtype(fp32), attention_for(fp32, True)) == (torch.float32, "sdpa")
    assert attention_for(bf16, False) is None  # the CPU: transformers' own choice


@pytest.mark.parametrize("layout", ["padded", "shared_prefix"])
def test_the_policy_trains_on_grouped_attention_as_on_repeated_heads(tmp_path, layout, monkeypatch):
    """The trainer gives a policy on "sdpa" with grouped key/value heads (here 8 query heads of 64 over 2, where
    folding pays: hf_attention._fold_pays) the attention that reads each key/value head in place: the same loss,
    gradient and update as transformers' eager attention, which repeats the heads, on left-padded rows and on
    packed rows alike."""
    from skygym_adapters.engines.hf_attention import NAME
    from tests.skygym_train.conftest import write_tiny_lm

    model_dir = write_tiny_lm(tmp_path, hidden_size=512, num_attention_heads=8, num_key_value_heads=2)
    batch = _grouped_batch(seed=5)
    T = batch.response_length
    batch = batch.with_tensors(advantages=torch.linspace(-1, 1, batch.size)[:, None].expand(-1, T).contiguous())
    grouped = _worker(model_dir, layout=layout)
    eager = _worker(model_dir, layout=layout, model_config_kwargs={"attn_implementation": "eager"})
    assert grouped.model.config._attn_implementation == NAME and eager.model.config._attn_implementation == "eager"
    assert grouped.layout == eager.layout == layout
    from skygym_adapters.engines import hf_attention

    folds = []
    fold = hf_attention.mask_per_group
    monkeypatch.setattr(hf_attention, "mask_per_group", lambda *args: folds.append(fold(*args)) or folds[-1])
    ma = grouped.train_step(batch)
    assert folds and all(f is folds[0] for f in folds[:2]), "the masked layers did not share one folded mask"
    mb = eager.train_step(batch)
    assert abs(ma["policy/loss"] - mb["policy/loss"]) < 1e-5
    assert abs(ma["policy/grad_norm"] - mb["policy/grad_norm"]) < 1e-4 * max(1.0, ma["policy/grad_norm"])
    # the gradients themselves (kept until the next step); the updates would differ where Adam normalises a
    # gradient that is 0 but for rounding, which eager and SDPA kernels round differently
    for (name, p), q in zip(grouped.model.named_parameters(), eager.model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-7, msg=lambda m: f"{name}: {m}")


def _groups_of(prompt_tokens, samples, response_tokens, groups=2):
    prompts = [[1 + g] * prompt_tokens for g in range(groups) for _ in range(samples)]
    responses = [[50] * response_tokens] * (groups * samples)
    return build_batch(prompts, responses, [[1] * response_tokens] * len(responses), pad_token_id=0)


def test_long_branches_are_split_where_attention_over_one_long_row_costs_more_than_repeated_prompts():
    """Eight 512-token answers to an 80-token prompt, at Qwen2.5-1.5B's break-even (~15,200 keys): two branches a
    segment (rows of 1,105 columns, not one row of 4,183). At 0.5B's (~8,300) with 128-token answers, or with no
    break-even given, a prompt's branches stay in one segment."""
    long = _groups_of(80, 8, 512)
    whole = pack(long.tensors, long.prompt_length)
    assert tuple(whole.input_ids.shape) == (2, 79 + 8 * 513)
    split = pack(long.tensors, long.prompt_length, attention_break_even=15_200)
    assert tuple(split.input_ids.shape) == (8, 79 + 2 * 513)
    assert split.num_real_tokens == whole.num_real_tokens + 2 * 3 * 79  # each prompt body three more times
    # a part sees its own prompt body and branch only: per query, at most the keys its padded row had
    mask = split.attention_mask[:, 0]
    assert int(mask.sum(-1).max()) == 80 + 512  # the last answer token: its whole padded row
    short = _groups_of(80, 8, 128)
    assert tuple(pack(short.tensors, short.prompt_length, attention_break_even=8_300).input_ids.shape) == (2, 79 + 8 * 129)


def test_the_break_even_counts_a_decoder_layers_matrices_against_its_attention_per_key(tiny_lm_dir):
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from skygym_train.workers.packing import break_even_keys

    config = AutoConfig.from_pretrained(tiny_lm_dir)
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    hidden, kv = config.hidden_size, config.num_key_value_heads * head_dim
    weights = hidden * hidden * 2 + hidden * kv * 2 + 3 * hidden * config.intermediate_size  # q, o; k, v; MLP
    expected = weights / (2 * heads * head_dim)  # 2 FLOPs a weight per token; 4 * heads * head_dim per key
    assert break_even_keys(AutoModelForCausalLM.from_pretrained(tiny_lm_dir)) == expected
    assert break_even_keys(AutoModel.from_pretrained(tiny_lm_dir)) == expected  # a critic's body
    assert break_even_keys(torch.nn.Linear(2, 2)) is None


def test_the_break_even_counts_the_experts_a_token_uses_and_gives_up_on_per_layer_heads():
    from types import SimpleNamespace

    from transformers import AutoConfig, AutoModelForCausalLM

    from skygym_train.workers.packing import break_even_keys

    config = AutoConfig.for_model("qwen3_moe", vocab_size=64, hidden_size=32, intermediate_size=64,
                                  moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    moe = AutoModelForCausalLM.from_config(config)
    layer = moe.model.layers[-1]
    dense = sum(p.numel() for n, p in layer.named_parameters() if p.dim() > 1 and "experts" not in n.split("."))
    experts = sum(p.numel() for n, p in layer.named_parameters() if p.dim() > 1 and "experts" in n.split("."))
    assert experts > dense  # what counting every expert would get wrong
    assert break_even_keys(moe) == pytest.approx((dense + experts * 2 / 8) / (2 * (16 + 16)))

    class PerLayer:  # transformers' configs with per-layer head counts raise on the global names
        @property
        def num_attention_heads(self):
            raise RuntimeError("differs per layer")

    assert break_even_keys(SimpleNamespace(config=PerLayer(), model=moe.model)) is None


def test_hybrid_models_with_recurrent_layers_train_on_padded_rows(tmp_path):
    """A recurrent layer (linear attention, Mamba) runs along the whole packed row and ignores its mask: a later
    branch would read its sibling's state. MLP-only layers see one position at a time and pack fine."""
    from types import SimpleNamespace

    from transformers import AutoConfig, AutoModelForCausalLM

    from skygym_train.workers.packing import packs_every_layer

    assert packs_every_layer(SimpleNamespace(layer_types=["sliding_attention", "full_attention"]))
    assert packs_every_layer(SimpleNamespace(layer_types=["full_attention", "mlp", "moe"]))
    assert packs_every_layer(SimpleNamespace())
    assert not packs_every_layer(SimpleNamespace(layer_types=["linear_attention", "full_attention"]))
    assert not packs_every_layer(SimpleNamespace(layers_block_type=["mamba", "attention"]))
    assert not packs_every_layer(SimpleNamespace(layer_types=["hybrid"]))
    config = AutoConfig.for_model("qwen3_next", vocab_size=64, hidden_size=64, intermediate_size=64,
                                  moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=2,
                                  num_experts_per_tok=1, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
                                  linear_key_head_dim=16, linear_value_head_dim=16,
                                  layer_types=["linear_attention", "full_attention"])
    AutoModelForCausalLM.from_config(config).save_pretrained(str(tmp_path))
    worker = TrainingWorker(WorkerSpec(role="policy", model_path=str(tmp_path), optimizer=OptimizerConfig(lr=1e-3),
                                       sample_packing=True))
    worker.load_model()
    assert worker.layout == "padded"


def test_a_cut_stays_within_the_micro_batch_token_budget():
    """The token budget counts a shared prompt once: a cut that repeats prompts beyond it is not taken."""
    long = _groups_of(80, 8, 512)
    whole = pack(long.tensors, long.prompt_length).num_real_tokens  # 2 x (79 + 8 x 513)
    cut = pack(long.tensors, long.prompt_length, attention_break_even=15_200).num_real_tokens
    assert cut > whole
    assert pack(long.tensors, long.prompt_length, attention_break_even=15_200, max_tokens=cut).num_real_tokens == cut
    within = pack(long.tensors, long.prompt_length, attention_break_even=15_200, max_tokens=whole + 2 * 79)
    assert whole < within.num_real_tokens <= whole + 2 * 79  # four answers a segment: each prompt once more
    assert pack(long.tensors, long.prompt_length, attention_break_even=15_200,
                max_tokens=whole).num_real_tokens == whole


def test_a_split_layout_gives_the_padded_log_probs_and_update(tiny_lm_dir):
    batch = _grouped_batch(seed=3)
    T = batch.response_length
    batch = batch.with_tensors(advantages=torch.linspace(-1, 1, batch.size)[:, None].expand(-1, T).contiguous())
    tiny = 1.0  # attention dominates: every prompt's branches split
    assert (pack(batch.tensors, batch.prompt_length, attention_break_even=tiny).num_real_tokens
            > pack(batch.tensors, batch.prompt_length).num_real_tokens)
    padded, packed = _worker(tiny_lm_dir, layout="padded"), _worker(tiny_lm_dir)
    assert packed._attention_break_even is not None
    packed._attention_break_even = tiny
    a, b = padded.forward(batch), packed.forward(batch)
    mask = batch.tensors["response_mask"].bool()
    assert torch.allclose(a["log_probs"][mask], b["log_probs"][mask], atol=1e-5)
    ma, mb = padded.train_step(batch), packed.train_step(batch)
    assert abs(ma["policy/loss"] - mb["policy/loss"]) < 1e-5
    _assert_same_update(padded, packed)


@pytest.mark.parametrize("bf16", [False, True])
def test_every_layer_attends_with_one_mask_in_the_dtype_attention_computes_in(tiny_lm_dir, bf16):
    """The packed mask is made once per micro-batch (SDPA would convert a boolean one in every layer and keep
    each copy for the backward pass), in autocast's dtype under autocast (here the CPU's, GPU or not)."""
    worker = _worker(tiny_lm_dir, device="cpu", cpu_bf16_autocast=bf16)
    seen = []
    layers = worker.model.model.layers
    for layer in layers:
        layer.self_attn.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["attention_mask"]),
                                                  with_kwargs=True)
    worker.forward(_grouped_batch())
    assert len(seen) == len(layers) >= 2 and all(mask is seen[0] for mask in seen)
    assert seen[0].dtype == (torch.bfloat16 if bf16 else torch.float32) and seen[0].dim() == 4


def test_packing_with_a_real_chat_model_and_shared_prompts(tiny_chat_model):
    """The embedded SmolLM2 tokenizer's chat prompts, four samples each, on the tiny chat model."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_chat_model))
    prompts, responses = [], []
    for question in ("What is 3 * 4?", "What is 7 * 8? Think first."):
        ids = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        for answer in ("12", "The answer is \\boxed{56}.", "I do not know", "56"):
            prompts.append(ids)
            responses.append(tok(answer + "<|im_end|>", add_special_tokens=False)["input_ids"])
    batch = build_batch(prompts, responses, [[1] * len(r) for r in responses], tok.pad_token_id)
    padded, packed = _worker(tiny_chat_model, layout="padded"), _worker(tiny_chat_model)
    a, b = padded.forward(batch), packed.forward(batch)
    mask = batch.tensors["response_mask"].bool()
    assert torch.allclose(a["log_probs"][mask], b["log_probs"][mask], atol=1e-5)
    assert packed.tokens_run < 0.5 * padded.tokens_run


def test_token_budget_micro_batches_keep_rows_in_order_and_count_shared_prompts_once():
    from skygym_train.workers.packing import plan_micro_batches

    # two groups of two rows: prompts of 5 and 3 tokens, responses of 2-4 tokens
    batch = build_batch([[1, 2, 3, 4, 5]] * 2 + [[6, 7, 8]] * 2, [[9, 9], [9, 9, 9], [9] * 4, [9]], [[1] * 2, [1] * 3, [1] * 4, [1]], 0)
    plain = plan_micro_batches(batch.tensors, batch.prompt_length, max_tokens=8, share_prompts=False)
    assert plain == [[0], [1], [2], [3]]  # rows of 7, 8, 7 and 4 tokens: no two fit in 8
    shared = plan_micro_batches(batch.tensors, batch.prompt_length, max_tokens=12, share_prompts=True)
    # a group's second row costs its response and one prompt token: 7 + 4 = 11, then 7 + 2 = 9
    assert shared == [[0, 1], [2, 3]]
    assert plan_micro_batches(batch.tensors, batch.prompt_length, 1, share_prompts=True) == [[0], [1], [2], [3]]
    whole = plan_micro_batches(batch.tensors, batch.prompt_length, 10_000, share_prompts=True)
    assert whole == [[0, 1, 2, 3]]


def test_token_budget_micro_batches_give_the_whole_batch_update(tiny_lm_dir):
    """Under sequence_mean each micro-batch's loss weighs its share of the rows: the step is the full batch's."""
    batch = _grouped_batch(seed=5)
    T = batch.response_length
    batch = batch.with_tensors(advantages=torch.linspace(-1, 1, batch.size)[:, None].expand(-1, T).contiguous())
    results = []
    for budget in (-1, 20):
        spec = WorkerSpec(role="policy", model_path=str(tiny_lm_dir), optimizer=OptimizerConfig(lr=1e-3),
                          micro_train_batch_size=64, micro_forward_batch_size=64, max_tokens_per_microbatch=budget)
        worker = TrainingWorker(spec)
        worker.load_model()
        worker.configure_algorithm(AlgorithmConfig(loss_reduction="sequence_mean"), POLICY_LOSSES.get("regular"), 1.0)
        results.append((worker.train_step(batch), worker))
    (whole, w1), (budgeted, w2) = results
    assert len(w2._micro_batches(batch, 64)) > 2  # the budget really split the batch
    assert budgeted["policy/loss"] == pytest.approx(whole["policy/loss"], abs=1e-5)
    assert budgeted["policy/grad_norm"] == pytest.approx(whole["policy/grad_norm"], rel=1e-4)
    _assert_same_update(w1, w2)


def test_a_packed_forward_lets_the_models_own_logits_go_before_the_log_probs(tiny_lm_dir, monkeypatch):
    """The packed layout gathers the kept logits into a copy; the model's own logits (nothing keeps them for the
    backward pass) are freed before the log-probs are computed, not held beside the copy through them. (A model
    whose head gives log-probs, ``log_probs.install_log_prob_head``, makes no logits: here the head is left plain,
    as for an architecture outside ``PLAIN_HEAD_CAUSAL_LMS``.)"""
    import weakref

    from skygym_train.workers import fsdp_worker

    worker = _worker(tiny_lm_dir, layout="shared_prefix")
    worker._log_prob_head = None
    own = []
    worker.model.register_forward_hook(lambda module, args, out: own.append(weakref.ref(out.logits)))
    alive = []
    log_probs = fsdp_worker.response_log_probs
    monkeypatch.setattr(fsdp_worker, "response_log_probs",
                        lambda *args, **kwargs: alive.append(own[-1]() is not None) or log_probs(*args, **kwargs))
    batch = _grouped_batch(seed=7)
    T = batch.response_length
    worker.train_step(batch.with_tensors(advantages=torch.ones(batch.size, T)))
    assert alive == [False]


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), [0.0, float("nan")]])
def test_a_reward_that_is_not_finite_is_refused_naming_its_row(bad):
    """One NaN reward would make its whole GRPO group's advantages NaN; generators fail such a trajectory (a masked
    row with reward 0), and a batch that still holds one is refused."""
    with pytest.raises(ValueError, match=r"row 1: its reward is not a finite number"):
        build_batch([[1, 2], [1, 2]], [[3, 4], [5, 6]], [[1, 1], [1, 1]], pad_token_id=0, rewards=[1.0, bad])
