"""KL estimators and controllers; dynamic sampling and overlong filtering."""

from __future__ import annotations

import math

import pytest
import torch

from skygym_train.algorithms import dynamic_sampling, kl_estimate, make_kl_controller, overlong_filter
from skygym_train.algorithms.kl import apply_kl_penalty
from skygym_train.config.schema import AlgorithmConfig, KLCtrlConfig


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert float(kl_estimate(logp, ref, "k1")) == pytest.approx(1.0)
    assert float(kl_estimate(logp, ref, "k2")) == pytest.approx(0.5)
    assert float(kl_estimate(logp, ref, "k3")) == pytest.approx(math.exp(-1) + 1 - 1)
    assert float(kl_estimate(ref, ref, "k3")) == 0.0
    with pytest.raises(ValueError, match="k4"):
        kl_estimate(logp, ref, "k4")


def test_fixed_and_adaptive_kl_coefficients():
    fixed = make_kl_controller(AlgorithmConfig(kl_loss_coef=0.1))
    fixed.update(5.0, n_steps=10)
    assert fixed.value == 0.1
    adaptive = make_kl_controller(AlgorithmConfig(kl_loss_coef=0.1, kl_ctrl=KLCtrlConfig("adaptive", 0.1, 100)))
    adaptive.update(0.15, n_steps=10)  # error clipped to +0.2 -> x (1 + 0.2 * 10 / 100)
    assert adaptive.value == pytest.approx(0.102)
    adaptive.update(0.0, n_steps=10)  # error -1 clipped to -0.2
    assert adaptive.value == pytest.approx(0.102 * 0.98)


def test_kl_in_reward_subtracts_per_token():
    rewards = torch.tensor([[0.0, 1.0]])
    new, mean_kl = apply_kl_penalty(rewards, torch.tensor([[-1.0, -1.0]]), torch.tensor([[-2.0, -1.0]]), torch.ones(1, 2), 0.5, "k1")
    torch.testing.assert_close(new, torch.tensor([[-0.5, 1.0]]))
    assert mean_kl == pytest.approx(0.5)


def test_dynamic_sampling_filter_drops_agreeing_groups():
    rewards = [1, 1, 0, 1, 0, 0]
    uids = ["a", "a", "b", "b", "c", "c"]
    decision = dynamic_sampling(rewards, uids, kind="filter", target_groups=2)
    assert decision.keep_rows == [2, 3] and decision.need_more and decision.dropped_groups == 2
    decision = dynamic_sampling(rewards, uids, kind="filter", target_groups=1)
    assert decision.keep_rows == [2, 3] and not decision.need_more


def test_dynamic_sampling_replace_keeps_batch_size():
    rewards = [1, 1, 0, 1, 0, 0]
    uids = ["a", "a", "b", "b", "c", "c"]
    decision = dynamic_sampling(rewards, uids, kind="replace", target_groups=3, min_replace_ratio=0.3)
    assert decision.keep_rows == [2, 3, 2, 3, 2, 3]
    decision = dynamic_sampling(rewards, uids, kind="replace", target_groups=3, min_replace_ratio=0.5)
    assert decision.keep_rows == [0, 1, 2, 3, 4, 5]  # too few informative groups: leave the batch alone
    with pytest.raises(ValueError, match="dynamic_sampling.type"):
        dynamic_sampling(rewards, uids, kind="drop", target_groups=1)


def test_overlong_filter_masks_truncated():
    assert overlong_filter([[1, 1], [1, 0, 1]], ["stop", "length"]) == [[1, 1], [0, 0, 0]]


def test_a_replaced_group_is_a_group_of_its_own_and_leaves_the_originals_advantages_alone():
    """``replace`` copies an informative group in place of one that teaches nothing. Under the original's id the
    two would be one group of twice the rows, and the unbiased standard deviation of [1, 0, 1, 0] is not that of
    [1, 0]: the original's advantages would change too (+-0.866 for +-0.707)."""
    from skygym_train.algorithms.advantages import compute_advantages

    rewards, uids = [1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"]
    decision = dynamic_sampling(rewards, uids, kind="replace", target_groups=2)
    assert decision.keep_rows == [0, 1, 0, 1] and decision.uids == ["a", "a", "a#copy1", "a#copy1"]
    kept = torch.tensor([[rewards[r]] for r in decision.keep_rows])
    advantages, _ = compute_advantages("grpo", token_level_rewards=kept, response_mask=torch.ones_like(kept),
                                       index=decision.uids)
    alone, _ = compute_advantages("grpo", token_level_rewards=kept[:2], response_mask=torch.ones(2, 1), index=["a", "a"])
    torch.testing.assert_close(advantages, torch.cat([alone, alone]))
