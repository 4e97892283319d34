"""Advantage estimators against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from skygym_train.algorithms import ADVANTAGE_ESTIMATORS, compute_advantages, register_advantage_estimator
from skygym_train.config.schema import AlgorithmConfig


def _outcome(scores, length=3):
    """Rewards on the last token of full-length responses."""
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    return rewards, torch.ones(len(scores), length)


def test_grpo_normalises_by_group_std():
    # group a: [1, 0, 0] -> mean 1/3, unbiased std sqrt(1/3); group b: [0.5, 0.5] -> all 0
    rewards, mask = _outcome([1.0, 0.0, 0.0, 0.5, 0.5])
    adv, ret = compute_advantages(
        "grpo", token_level_rewards=rewards, response_mask=mask, index=["a", "a", "a", "b", "b"], config=AlgorithmConfig()
    )
    std = math.sqrt(1 / 3)
    expected = torch.tensor([(2 / 3) / std, (-1 / 3) / std, (-1 / 3) / std, 0.0, 0.0])
    torch.testing.assert_close(adv[:, 0], expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(adv, ret)
    assert torch.allclose(adv[:, 0], adv[:, 2])  # the same advantage on every token


def test_grpo_without_std_normalisation_only_centres():
    rewards, mask = _outcome([1.0, 0.0, 0.0])
    adv, _ = compute_advantages(
        "grpo", token_level_rewards=rewards, response_mask=mask, index=["a"] * 3,
        config=AlgorithmConfig(grpo_norm_by_std=False),
    )
    torch.testing.assert_close(adv[:, 1], torch.tensor([2 / 3, -1 / 3, -1 / 3]))


def test_grpo_masks_padding_and_env_tokens():
    rewards, _ = _outcome([1.0, 0.0])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    adv, _ = compute_advantages("grpo", token_level_rewards=rewards, response_mask=mask, index=["a", "a"])
    assert adv[0, 1] == 0 and adv[1, 2] == 0
    assert adv[0, 0] > 0 > adv[1, 0]


def test_rloo_uses_leave_one_out_baseline():
    rewards, mask = _outcome([1.0, 0.0, 0.0])
    adv, _ = compute_advantages("rloo", token_level_rewards=rewards, response_mask=mask, index=["a"] * 3)
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0, -0.5, -0.5]))


def test_reinforce_plus_plus_whitens_returns_over_the_batch():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = compute_advantages(
        "reinforce++", token_level_rewards=rewards, response_mask=mask, index=["a", "b"], config=AlgorithmConfig()
    )
    torch.testing.assert_close(ret[0], torch.tensor([1.0, 1.0, 1.0]))
    # masked returns 1,1,1,0,0: mean 0.6, unbiased var 0.3
    std = math.sqrt(0.3)
    torch.testing.assert_close(adv[0], torch.full((3,), 0.4 / std), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(adv[1, :2], torch.full((2,), -0.6 / std), atol=1e-4, rtol=1e-4)
    assert adv[1, 2] == 0


def test_reinforce_plus_plus_discounts_with_gamma():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    _, ret = compute_advantages(
        "reinforce++", token_level_rewards=rewards, response_mask=torch.ones(1, 3), index=["a"],
        config=AlgorithmConfig(gamma=0.5),
    )
    torch.testing.assert_close(ret[0], torch.tensor([0.25, 0.5, 1.0]))


@pytest.mark.parametrize(
    "gamma,lam,adv,ret",
    [(1.0, 1.0, [0.5, 0.2], [1.0, 1.0]), (0.9, 0.5, [0.31, 0.2], [0.81, 1.0])],
)
def test_gae_by_hand(gamma, lam, adv, ret):
    rewards = torch.tensor([[0.0, 1.0]])
    values = torch.tensor([[0.5, 0.8]])
    a, r = compute_advantages(
        "gae", token_level_rewards=rewards, response_mask=torch.ones(1, 2), index=["a"], values=values,
        config=AlgorithmConfig(gamma=gamma, lambd=lam), whiten=False,
    )
    torch.testing.assert_close(a[0], torch.tensor(adv))
    torch.testing.assert_close(r[0], torch.tensor(ret))


def test_gae_needs_values():
    rewards, mask = _outcome([1.0])
    with pytest.raises(ValueError, match="critic"):
        compute_advantages("gae", token_level_rewards=rewards, response_mask=mask, index=["a"])


def test_user_registered_estimator_and_unknown_names():
    @register_advantage_estimator("test_constant_one")
    def constant(*, token_level_rewards, response_mask, **_):
        return response_mask.clone(), response_mask.clone()

    try:
        rewards, mask = _outcome([0.0, 0.0])
        adv, _ = compute_advantages("test_constant_one", token_level_rewards=rewards, response_mask=mask, index=["a", "a"])
        assert torch.equal(adv, mask)
        with pytest.raises(ValueError, match="already registered"):
            register_advantage_estimator("test_constant_one")(constant)
    finally:
        ADVANTAGE_ESTIMATORS.unregister("test_constant_one")
    with pytest.raises(KeyError, match="did you mean 'grpo'"):
        ADVANTAGE_ESTIMATORS.get("grop")
