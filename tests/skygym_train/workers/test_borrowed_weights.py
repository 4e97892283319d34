"""The policy computing with its engine's bf16 weights (``borrowed_weights``): one bf16 copy of the model, not two.

- the forward and backward passes give bitwise autocast's values and gradients, and autocast casts no weight;
- in training (bf16 autocast on this CPU, as on one GPU, and a bf16 HF engine in the process), the engine lends
  its tensors from the start: they never move, the policy writes them after each update, the sync moves
  nothing, and the run is the one the copying sync gives;
- what cannot lend or borrow says why, and an engine whose weights are lent refuses writes of its own.
"""

from __future__ import annotations

import pytest
import torch

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from skygym_train.workers.borrowed_weights import BorrowedWeights, WeightCasts, linear_parameter_names
from skygym_train.workers.fsdp_worker import TrainingWorker
from tests.skygym_train.toy_envs import toy_overrides

# PyTorch's own linear, which the suite's DeepSpeed tests replace for the rest of the process
pytestmark = pytest.mark.usefixtures("native_linear")


def _tiny_qwen2(tied: bool = True) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def _gradients(model, input_ids, borrowed=None):
    model.zero_grad(set_to_none=True)
    with WeightCasts(model.parameters()) as casts, torch.autocast("cpu", dtype=torch.bfloat16):
        kwargs = {"input_ids": input_ids, "use_cache": False}
        out = borrowed.call(model, **kwargs) if borrowed is not None else model(**kwargs)
        out.logits.float().log_softmax(-1).mean().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}, out.logits.detach(), casts.casts


@pytest.mark.parametrize("tied,checkpointing", [(True, None), (False, None), (True, False), (True, True)],
                         ids=["tied-head", "own-head", "checkpointed", "checkpointed-reentrant"])
def test_the_borrowed_copy_gives_autocasts_values_and_gradients_and_no_weight_is_cast(tied, checkpointing):
    model = _tiny_qwen2(tied)
    if checkpointing is not None:  # the recomputed layers run after the borrowed forward pass has returned
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": checkpointing})
    input_ids = torch.randint(0, 96, (3, 17), generator=torch.Generator().manual_seed(1))
    expected_grads, expected_logits, autocast_casts = _gradients(model, input_ids)
    assert autocast_casts >= len(linear_parameter_names(model)) - 1  # the control: autocast casts every weight

    engine = {name: torch.zeros_like(p, dtype=torch.bfloat16)
              for name, p in model.named_parameters(remove_duplicate=False)}
    if tied:
        engine["lm_head.weight"] = engine["model.embed_tokens.weight"]  # the engine ties them too
    borrowed = BorrowedWeights.check(model, engine, torch.bfloat16)
    borrowed.write()
    for name, p in model.named_parameters():
        assert torch.equal(engine[name], p.detach().to(torch.bfloat16)), name
    grads, logits, casts = _gradients(model, input_ids, borrowed)

    if checkpointing is None:  # (a recomputed layer casts its weights again, one layer at a time)
        assert casts == 0, "autocast cast a weight the engine's copy holds"
    assert torch.equal(logits, expected_logits)
    for name, grad in grads.items():
        assert grad.dtype == torch.float32 and torch.equal(grad, expected_grads[name]), name
    # the embedding reads its fp32 weight, the head the bf16 copy, even where they are one parameter
    assert model.lm_head.weight.dtype == torch.float32 and ("lm_head.weight" in borrowed.compute)
    assert "model.embed_tokens.weight" not in borrowed.compute


def test_a_mismatch_between_policy_and_engine_is_named():
    model = _tiny_qwen2()
    engine = {name: torch.zeros_like(p, dtype=torch.bfloat16)
              for name, p in model.named_parameters(remove_duplicate=False)}
    engine["lm_head.weight"] = engine["model.embed_tokens.weight"]
    missing = dict(engine)
    del missing["model.norm.weight"]
    with pytest.raises(ValueError, match="model.norm.weight: the engine has no such parameter"):
        BorrowedWeights.check(model, missing, torch.bfloat16)
    wrong = {**engine, "model.layers.0.mlp.up_proj.weight": torch.zeros(160, 64, dtype=torch.float16)}
    with pytest.raises(ValueError, match=r"up_proj.weight: the engine's is \(160, 64\) torch.float16"):
        BorrowedWeights.check(model, wrong, torch.bfloat16)
    untied = {**engine, "lm_head.weight": engine["lm_head.weight"].clone()}
    with pytest.raises(ValueError, match="the policy ties it to another parameter, the engine does not"):
        BorrowedWeights.check(model, untied, torch.bfloat16)
    untied_policy = _tiny_qwen2(tied=False)
    with pytest.raises(ValueError, match="the engine ties parameters the policy keeps apart"):
        BorrowedWeights.check(untied_policy, engine, torch.bfloat16)


def _bf16_overrides(model, data, tmp, **extra):
    # bf16 autocast on this CPU (as on one GPU) and a bf16 engine beside the policy
    return toy_overrides(model, data, tmp, **{"trainer.bf16": "true", "generator.model_dtype": "bfloat16",
                                              "trainer.max_training_steps": 2, **extra})


def _engine(trainer):
    return trainer.engine.engines[0]


def _train(cfg):
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        engine = _engine(trainer)
        pointers = [p.data_ptr() for p in engine.model.parameters()]
        lent_from_the_start = trainer._weight_sync is not None and trainer._weight_sync.lent
        result = trainer.fit()
        sync = trainer._weight_sync
        policy = {k: v.detach().clone() for k, v in trainer.policy.worker.model.named_parameters()}
        state = {
            "lent_from_the_start": lent_from_the_start,
            "lent": sync.lent,
            "bytes": [h["weight_sync/bytes"] for h in result["history"] if "timing/step" in h],
            "moved": pointers != [p.data_ptr() for p in engine.model.parameters()],
            "engine": {k: v.detach().clone() for k, v in engine.model.named_parameters()},
            "describe": trainer.weight_sync_backend(),
        }
    training = [{k: v for k, v in h.items() if k.startswith(("policy/", "reward/")) and k != "policy/lr"}
                for h in result["history"] if "timing/step" in h]
    return state, policy, training


def test_a_bf16_policy_trains_with_its_engines_weights_and_the_run_is_the_copying_one(
        tiny_chat_model, toy_data, tmp_path, monkeypatch, deterministic_kernels):
    cfg = load_config(_bf16_overrides(tiny_chat_model, toy_data, tmp_path / "lent"))
    lent, policy, training = _train(cfg)
    assert lent["lent_from_the_start"] and lent["lent"]
    assert lent["bytes"] == [0.0, 0.0] and not lent["moved"]
    assert "compute copy" in lent["describe"]
    for name, value in policy.items():  # the engine holds the policy's weights after its last update
        assert torch.equal(lent["engine"][name], value.to(torch.bfloat16)), name

    monkeypatch.setattr(TrainingWorker, "borrowing_refusal", lambda self: "the copying sync, for the comparison")
    cfg = load_config(_bf16_overrides(tiny_chat_model, toy_data, tmp_path / "copied"))
    copied, copied_policy, copied_training = _train(cfg)
    assert not copied["lent"] and all(b > 0 for b in copied["bytes"])
    # generation, rewards, losses and gradient norms: the same run (bitwise on the CPU; on a GPU, kernels that add in
    # no fixed order, such as an embedding's backward, may differ in the last bits between any two runs)
    if torch.cuda.is_available():
        assert training == [pytest.approx(step, rel=1e-3, abs=1e-5) for step in copied_training]
        for name, value in policy.items():
            torch.testing.assert_close(value, copied_policy[name], msg=lambda m: f"{name}: {m}")
        return
    assert training == copied_training
    for name, value in policy.items():
        assert torch.equal(value, copied_policy[name]), name


def test_a_float32_policy_keeps_the_copying_sync_and_says_why(tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(_bf16_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.bf16": "false"}))
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        assert trainer.policy.worker.borrowing_refusal() == (
            "the policy computes in its parameters' dtype (float32), not autocast's")
        assert trainer._weight_sync.lent is False and not _engine(trainer).lends_weights()


def test_a_replaced_linear_keeps_the_copying_sync_and_says_why(tiny_chat_model, toy_data, tmp_path, monkeypatch):
    """A linear that keeps its weight as given (DeepSpeed ZeRO-3's, which replaces PyTorch's for the rest of the
    process) would keep the engine's copy in the forward pass and the parameter in a recomputed layer."""
    native = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *args, **kwargs: native(*args, **kwargs))
    cfg = load_config(_bf16_overrides(tiny_chat_model, toy_data, tmp_path))
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        assert "torch.nn.functional.linear was replaced" in trainer.policy.worker.borrowing_refusal()
        assert trainer._weight_sync.lent is False and not _engine(trainer).lends_weights()


def test_an_engine_that_lends_its_weights_keeps_them_in_place_and_refuses_other_writes(tiny_chat_model):
    import asyncio

    from skygym_adapters.engines.hf import HFEngine

    engine = HFEngine(str(tiny_chat_model), dtype="bfloat16")
    try:
        lent = engine.lend_weights()
        assert set(lent) == {name for name, _ in engine.model.named_parameters(remove_duplicate=False)}
        assert engine.lends_weights()
        with pytest.raises(ValueError, match="lent already"):
            engine.lend_weights()
        # a tied head is one tensor under two names, and autograd sees a write through either (its version moves)
        head, embedding = lent["lm_head.weight"], lent["model.embed_tokens.weight"]
        version = head._version
        embedding.add_(0)
        assert head.data_ptr() == embedding.data_ptr() and head._version > version
        asyncio.run(engine.sleep())
        asyncio.run(engine.wake_up())
        assert engine.lends_weights()
        zeros = {k: torch.zeros_like(v) for k, v in engine.model.named_parameters()}
        with pytest.raises(RuntimeError, match="lent to a trainer"):
            asyncio.run(engine.update_weights(zeros))
        with pytest.raises(ValueError, match="lent to a trainer"):
            engine.share_weights(zeros)
        version = engine.weight_version
        engine.weights_changed()
        assert engine.weight_version == version + 1
        engine.recall_weights()
        assert not engine.lends_weights() and lent.recalled  # the borrower sees it
        asyncio.run(engine.update_weights(zeros))
        assert all(not p.any() for p in engine.model.parameters())
    finally:
        engine.close()


def test_a_recalled_loan_ends_the_borrowing_and_the_sync_copies_from_then_on(tiny_chat_model, toy_data, tmp_path,
                                                                             caplog):
    cfg = load_config(_bf16_overrides(tiny_chat_model, toy_data, tmp_path))
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        worker, engine = trainer.policy.worker, _engine(trainer)
        assert trainer._weight_sync.lent and worker.write_borrowed_weights()
        engine.recall_weights()
        with caplog.at_level("WARNING"):
            assert worker.write_borrowed_weights() is False  # it neither writes nor reads them any more
            zeros = {k: torch.zeros_like(v) for k, v in engine.model.named_parameters()}
            trainer._runner.run(engine.update_weights(zeros))  # the engine's own write again
            assert all(p.abs().sum() > 0 for p in worker.model.parameters() if p.dim() > 1)
            trainer.sync_weights()
        assert "recalled the weights it lent" in caplog.text and "copying them from now on" in caplog.text
        sync = trainer._weight_sync
        assert not sync.lent and sync.bytes_last > 0
        for name, value in worker.model.named_parameters():  # the copy brought the policy's weights back
            assert torch.equal(engine.model.get_parameter(name), value.detach().to(torch.bfloat16)), name
