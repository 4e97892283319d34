"""DAPO written as a user plug-in (examples/algorithms/dapo/main_dapo.py): new config keys and a trainer hook."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from skygym_train.config import ConfigError, load_config
from tests.skygym_train.toy_envs import toy_overrides

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "algorithms" / "dapo" / "main_dapo.py"


@pytest.fixture(scope="module")
def dapo():
    spec = importlib.util.spec_from_file_location("main_dapo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_soft_overlong_punishment_by_hand(dapo):
    rewards = dapo.soft_overlong_punishment([1.0, 1.0, 1.0, 1.0], [10, 14, 16, 17], max_length=16, buffer_len=4, factor=1.0)
    assert rewards == [1.0, 0.5, 0.0, 0.0]


def test_dapo_keys_exist_only_with_the_plugin_config(dapo, tiny_chat_model, toy_data, tmp_path):
    keys = toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.algorithm.overlong_buffer_len": 4})
    assert load_config(keys, schema=dapo.DAPOConfig).trainer.algorithm.overlong_buffer_len == 4
    with pytest.raises(ConfigError, match="overlong_buffer_len"):
        load_config(keys)


@pytest.mark.slow
def test_dapo_trainer_runs_with_dynamic_sampling_and_overlong_filtering(dapo, tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(
        toy_overrides(
            tiny_chat_model,
            toy_data,
            tmp_path,
            **{
                "trainer.max_training_steps": 2,
                "trainer.algorithm.policy_loss_type": "dual_clip",
                "trainer.algorithm.eps_clip_high": 0.28,
                "trainer.algorithm.clip_ratio_c": 10.0,
                "trainer.algorithm.dynamic_sampling.type": "filter",
                "trainer.algorithm.overlong_buffer_len": 4,
                "generator.apply_overlong_filtering": "true",
                "generator.sampling_params.max_generate_length": 8,
            },
        ),
        schema=dapo.DAPOConfig,
    )
    with dapo.DAPOTrainer(cfg) as trainer:
        result = trainer.fit()
    steps = [h for h in result["history"] if "reward/mean" in h]
    assert len(steps) == 2
    # a random model always runs to the 8-token limit: penalty (8 - 4) / 4 = 1 on a share in [0, 1]
    assert all(-1.0 <= h["reward/mean"] < 0 for h in steps)
    assert all(h["generate/truncated_fraction"] == 1.0 for h in steps)
    # overlong filtering masked every truncated answer out of the loss
    assert all(h["policy/grad_norm"] == 0.0 for h in steps)
