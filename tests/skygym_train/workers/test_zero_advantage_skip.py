"""Rows whose advantages are all 0 add nothing to the policy's gradient: the worker skips their passes, and the
update equals the one the full passes give (weight decay and Adam's moments included).

The workers run on the CPU, GPU or not: bit-for-bit equality needs deterministic kernels, and on CUDA some backward
kernels add with atomics in no fixed order (Adam then turns a tiny gradient's flipped sign into a whole step). The
last test runs the skip on a GPU where there is one."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from skygym_train.algorithms import POLICY_LOSSES
from skygym_train.algorithms.policy_losses import register_policy_loss
from skygym_train.config.schema import AlgorithmConfig, OptimizerConfig
from skygym_train.workers.batch import build_batch
from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec


def _batch(advantages):
    """Four rows of two prompts, each row with one advantage for all its tokens."""
    prompts = [[3, 4, 5], [3, 4, 5], [9, 8], [9, 8]]
    responses = [[11, 12, 13], [14, 15], [16, 17, 18, 19], [20]]
    batch = build_batch(prompts, responses, [[1] * len(r) for r in responses], pad_token_id=0,
                        uids=["a", "a", "b", "b"], rewards=[0.0] * 4)
    adv = torch.tensor(advantages, dtype=torch.float32)[:, None].expand(-1, batch.response_length).contiguous()
    return batch.with_tensors(advantages=adv * batch.tensors["response_mask"])


def _worker(model_dir, skips: bool, algorithm=None, loss="regular", device="cpu"):
    spec = WorkerSpec(role="policy", model_path=str(model_dir), optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.1),
                      micro_train_batch_size=1, micro_forward_batch_size=1)
    worker = TrainingWorker(spec)
    worker.device = torch.device(device)
    worker.load_model()
    worker.skips_rows_without_advantage = skips
    worker.configure_algorithm(algorithm or AlgorithmConfig(), POLICY_LOSSES.get(loss), 1.0)
    return worker


def _assert_same_weights(a, b):
    for (name, p), q in zip(a.model.named_parameters(), b.model.parameters()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("loss", ["regular", "dual_clip", "gspo", "cispo"])
def test_skipping_zero_advantage_rows_gives_the_same_update(tiny_lm_dir, loss):
    skipping, full = _worker(tiny_lm_dir, True, loss=loss), _worker(tiny_lm_dir, False, loss=loss)
    steps = [
        [0.0, 0.0, 1.0, -1.0],  # one group agrees (skipped), one does not
        [0.0, 0.0, 0.0, 0.0],  # every group agrees: no pass at all, yet decay and momentum still move the weights
    ]
    for advantages in steps:
        before = skipping.tokens_run
        a, b = skipping.train_step(_batch(advantages)), full.train_step(_batch(advantages))
        zeros = sum(1 for x in advantages if x == 0)
        assert a["policy/skipped_rows"] == zeros / 4 and b["policy/skipped_rows"] == 0.0
        assert a["policy/grad_norm"] == pytest.approx(b["policy/grad_norm"], rel=1e-6, abs=1e-12)
        _assert_same_weights(skipping, full)
        if zeros == 4:
            assert skipping.tokens_run == before, "a batch without advantage ran the model"
            assert "policy/loss" not in a and b["policy/loss"] == 0.0
        else:
            assert skipping.tokens_run - before < full.tokens_run / len(steps)
    # the last step, which skipped everything, still moved the weights (weight decay, Adam's first moment)
    fresh = _worker(tiny_lm_dir, True, loss=loss)
    assert any(not torch.equal(p, q) for p, q in zip(fresh.model.parameters(), skipping.model.parameters()))


def test_metrics_describe_the_rows_trained(tiny_lm_dir):
    skipping, full = _worker(tiny_lm_dir, True), _worker(tiny_lm_dir, False)
    a = skipping.train_step(_batch([0.0, 0.0, 1.0, -1.0]))
    trained_only = _worker(tiny_lm_dir, False).train_step(_batch([0.0, 0.0, 1.0, -1.0]).select([2, 3]))
    assert a["policy/entropy"] == pytest.approx(trained_only["policy/entropy"], rel=1e-5)
    assert full.train_step(_batch([0.0, 0.0, 1.0, -1.0]))["policy/skipped_rows"] == 0.0


@pytest.mark.parametrize("change", [
    {"use_entropy_loss": True},  # the entropy term has a gradient whatever the advantage
    {"use_kl_loss": True},  # so has the KL term, when reference log-probs are given
])
def test_rows_are_not_skipped_when_another_term_has_a_gradient(tiny_lm_dir, change):
    algorithm = dataclasses.replace(AlgorithmConfig(), **change)
    worker = _worker(tiny_lm_dir, True, algorithm=algorithm)
    batch = _batch([0.0, 0.0, 0.0, 0.0])
    if change.get("use_kl_loss"):
        batch = batch.with_tensors(ref_log_probs=torch.full_like(batch.tensors["advantages"], -3.0))
    metrics = worker.train_step(batch)
    assert metrics["policy/skipped_rows"] == 0.0 and metrics["policy/grad_norm"] > 0


def test_a_user_loss_is_run_unless_it_declares_it_vanishes(tiny_lm_dir):
    @register_policy_loss("test_zero_skip_undeclared", override=True)
    def undeclared(log_probs, old_log_probs, advantages, loss_mask, config, **_):
        return -(log_probs * loss_mask).sum() / loss_mask.sum(), {}  # a gradient whatever the advantage

    @register_policy_loss("test_zero_skip_declared", override=True, vanishes_without_advantage=True)
    def declared(log_probs, old_log_probs, advantages, loss_mask, config, **_):
        return -(advantages * log_probs * loss_mask).sum() / loss_mask.sum(), {}

    batch = _batch([0.0, 0.0, 0.0, 0.0])
    ran = _worker(tiny_lm_dir, True, loss="test_zero_skip_undeclared").train_step(batch)
    assert ran["policy/skipped_rows"] == 0.0 and ran["policy/grad_norm"] > 0
    assert _worker(tiny_lm_dir, True, loss="test_zero_skip_declared").train_step(batch)["policy/skipped_rows"] == 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (this machine has none): it runs the "
                    "skip on the device; the CPU tests above check that it is exact")
def test_on_cuda_skipped_rows_leave_the_model_unrun_and_zero_gradients_on_the_device(tiny_lm_dir):
    skipping, full = _worker(tiny_lm_dir, True, device="cuda"), _worker(tiny_lm_dir, False, device="cuda")
    mixed = _batch([0.0, 0.0, 1.0, -1.0])
    a, b = skipping.train_step(mixed), full.train_step(mixed)
    assert a["policy/skipped_rows"] == 0.5 and b["policy/skipped_rows"] == 0.0
    assert a["policy/grad_norm"] == pytest.approx(b["policy/grad_norm"], rel=1e-3)  # CUDA kernels round in no fixed order
    before, weights = skipping.tokens_run, [p.detach().clone() for p in skipping.model.parameters()]
    nothing = skipping.train_step(_batch([0.0] * 4))
    assert nothing["policy/skipped_rows"] == 1.0 and skipping.tokens_run == before
    assert all(p.grad is None or (p.grad.device.type == "cuda" and not p.grad.any())
               for p in skipping.model.parameters())
    assert any(not torch.equal(p, q) for p, q in zip(skipping.model.parameters(), weights))  # decay, momentum
