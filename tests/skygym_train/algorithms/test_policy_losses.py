"""Policy losses and reductions against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from skygym_train.algorithms import POLICY_LOSSES, reduce_loss, value_loss
from skygym_train.config.schema import AlgorithmConfig

E5 = math.exp(0.5)
EM5 = math.exp(-0.5)


def _tokens(log_ratios, advantages):
    old = torch.full((1, len(log_ratios)), -1.0)
    logp = (old + torch.tensor([log_ratios])).requires_grad_(True)
    return logp, old, torch.tensor([advantages]), torch.ones(1, len(log_ratios))


def test_reductions_by_hand():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert float(reduce_loss(per_token, mask, "token_mean")) == pytest.approx(10 / 4)
    assert float(reduce_loss(per_token, mask, "sequence_mean")) == pytest.approx((2 + 4) / 2)
    assert float(reduce_loss(per_token, mask, "seq_mean_token_sum_norm", max_seq_len=4)) == pytest.approx((6 / 4 + 4 / 4) / 2)
    with pytest.raises(ValueError, match="max_seq_len"):
        reduce_loss(per_token, mask, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="unknown loss_reduction"):
        reduce_loss(per_token, mask, "mean")


def test_ppo_clip_by_hand():
    logp, old, adv, mask = _tokens([0.5, -0.5, 0.5, -0.5], [1.0, 1.0, -1.0, -1.0])
    loss, metrics = POLICY_LOSSES.get("regular")(logp, old, adv, mask, AlgorithmConfig())
    # per token: max(-A r, -A clip(r)) = -1.2 (clipped), -e^-.5, e^.5, 0.8 (clipped)
    expected = (-1.2 - EM5 + E5 + 0.8) / 4
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert metrics["clip_fraction"] == pytest.approx(0.5)
    loss.backward()
    # clipped tokens get no gradient; unclipped ones get -A * r / 4
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -EM5 / 4, E5 / 4, 0.0]]))


def test_asymmetric_clip_higher():
    logp, old, adv, mask = _tokens([0.5], [1.0])
    loss, _ = POLICY_LOSSES.get("regular")(logp, old, adv, mask, AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.28))
    assert float(loss) == pytest.approx(-1.28)
    logp, old, adv, mask = _tokens([-0.5], [-1.0])
    loss, _ = POLICY_LOSSES.get("regular")(logp, old, adv, mask, AlgorithmConfig(eps_clip_low=0.2, eps_clip_high=0.28))
    assert float(loss) == pytest.approx(0.8)


def test_dual_clip_bounds_negative_advantages():
    logp, old, adv, mask = _tokens([2.0, 2.0], [-1.0, 1.0])
    cfg = AlgorithmConfig(clip_ratio_c=3.0)
    loss, metrics = POLICY_LOSSES.get("dual_clip")(logp, old, adv, mask, cfg)
    # A=-1: PPO gives max(e^2, 1.2) = 7.389, dual clip caps at 3; A=1: -1.2 (clipped)
    assert float(loss) == pytest.approx((3.0 - 1.2) / 2)
    assert metrics["dual_clip_fraction"] == pytest.approx(0.5)
    regular, _ = POLICY_LOSSES.get("regular")(logp, old, adv, mask, cfg)
    assert float(regular) == pytest.approx((math.exp(2) - 1.2) / 2, rel=1e-5)


def test_gspo_uses_one_ratio_per_sequence():
    logp, old, adv, mask = _tokens([0.2, 0.4], [-1.0, -1.0])
    loss, _ = POLICY_LOSSES.get("gspo")(logp, old, adv, mask, AlgorithmConfig())
    seq_ratio = math.exp(0.3)  # geometric mean of the token ratios
    assert float(loss) == pytest.approx(seq_ratio, rel=1e-5)
    loss.backward()
    # each token's gradient is the sequence ratio (times -A = 1), over 2 tokens
    torch.testing.assert_close(logp.grad, torch.full((1, 2), seq_ratio / 2))
    logp, old, adv, mask = _tokens([0.2, 0.4], [1.0, 1.0])
    loss, metrics = POLICY_LOSSES.get("gspo")(logp, old, adv, mask, AlgorithmConfig())
    assert float(loss) == pytest.approx(-1.2) and metrics["clip_fraction"] == 1.0


def test_cispo_keeps_gradient_of_clipped_tokens():
    logp, old, adv, mask = _tokens([0.5], [2.0])  # logp = -0.5, ratio e^0.5 clamped to 1.2
    cfg = AlgorithmConfig()
    cfg.cispo.cispo_eps_clip_high = 0.2
    loss, metrics = POLICY_LOSSES.get("cispo")(logp, old, adv, mask, cfg)
    assert float(loss) == pytest.approx(-2.0 * 1.2 * -0.5)
    loss.backward()
    assert float(logp.grad) == pytest.approx(-2.4)  # PPO would give 0 here
    assert metrics["clip_fraction"] == 1.0


def test_sequence_mean_reduction_in_a_loss():
    old = torch.full((2, 2), -1.0)
    logp = old.clone()
    adv = torch.tensor([[1.0, 1.0], [3.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, _ = POLICY_LOSSES.get("regular")(logp, old, adv, mask, AlgorithmConfig(loss_reduction="sequence_mean"))
    assert float(loss) == pytest.approx((-1.0 + -3.0) / 2)
    loss, _ = POLICY_LOSSES.get("regular")(logp, old, adv, mask, AlgorithmConfig(loss_reduction="token_mean"))
    assert float(loss) == pytest.approx(-5.0 / 3)


def test_value_loss_clipping():
    values = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.5, 0.0]])
    returns = torch.tensor([[0.0, 1.0]])
    loss, metrics = value_loss(values, old, returns, torch.ones(1, 2), value_clip=0.2)
    # token 1: unclipped (1-0)^2=1, clipped v=0.7 -> 0.49 -> max 1; token 2: 1 -> 0.5 * (1 + 1) / 2
    assert float(loss) == pytest.approx(0.5)
    assert metrics["vf_clip_fraction"] == 0.0


def test_response_log_probs_and_entropy_by_hand():
    from skygym_train.workers.fsdp_worker import response_log_probs

    # vocab of 2, prompt length 1, one response token (id 1); logits [0, ln 3] -> p = [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)]]], requires_grad=True)
    input_ids = torch.tensor([[0, 1]])
    log_probs, entropy = response_log_probs(logits, input_ids, prompt_length=1)
    assert float(log_probs) == pytest.approx(math.log(0.75))
    assert float(entropy) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    assert not entropy.requires_grad
    _, entropy = response_log_probs(logits, input_ids, prompt_length=1, entropy_grad=True)
    assert entropy.requires_grad
    # temperature 2 halves the logits: p = softmax([0, ln 3 / 2]) = [1, sqrt 3] / (1 + sqrt 3)
    log_probs, _ = response_log_probs(logits, input_ids, prompt_length=1, temperature=2.0)
    assert float(log_probs) == pytest.approx(math.log(math.sqrt(3) / (1 + math.sqrt(3))))
