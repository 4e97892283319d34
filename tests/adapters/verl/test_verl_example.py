"""examples/verl: the GSM8K config composes on top of veRL's, its reward function loads, the dry run runs."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="needs the 'verl' extra, in a venv of its own: nox -s verl")
pytestmark = pytest.mark.verl

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "verl"


def _load(name):
    return runpy.run_path(str(EXAMPLES / name), run_name="example")


def test_example_config_extends_verl_and_loads_our_reward_function(tiny_model_dir):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from skygym_adapters.verl.local import compose_config

    config = compose_config(tiny_model_dir, config_dir=EXAMPLES, config_name="gsm8k_multi_turn")
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "skyrl_gym_agent"
    assert config.algorithm.adv_estimator == "grpo"
    reward_fn = get_custom_reward_fn(config)  # veRL's own loader of reward.custom_reward_function
    assert reward_fn(data_source="openai/gsm8k", solution_str="... #### 18", ground_truth="18", extra_info={}) == 1.0


def test_example_config_passes_verls_own_check(tiny_model_dir):
    """A cold run: run_gsm8k.sh stopped in veRL's check of its config (no micro-batch size), on any hardware; the
    test composed the config but never let veRL check it as main_ppo does first."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from skygym_adapters.verl.local import compose_config

    config = compose_config(tiny_model_dir, ["trainer.n_gpus_per_node=1"], config_dir=EXAMPLES,
                            config_name="gsm8k_multi_turn")
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def test_prepare_and_dry_run_on_local_gsm8k(tmp_path, gsm8k_test_file, tiny_model_dir, capsys):
    data = tmp_path / "gsm8k"
    assert _load("prepare_gsm8k.py")["main"](
        ["--train_file", str(gsm8k_test_file), "--test_file", str(gsm8k_test_file), "--output_dir", str(data),
         "--limit", "4", "--max_turns", "2"]
    ) == 0
    assert (data / "train.parquet").exists() and (data / "test.parquet").exists()
    assert _load("dry_run.py")["main"](
        ["--rows", str(data / "test.parquet"), "--limit", "2", "--model", str(tiny_model_dir), "--max_tokens_per_turn", "8",
         "--response_length", "128"]
    ) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("row ")]
    assert len(lines) == 2
    assert sorted(p.name for p in data.iterdir()) == ["test.parquet", "train.parquet"]  # nothing left beside them
    for line in lines:
        assert "env=gsm8k_multi_turn" in line and "turns=2" in line and "stop=env_done" in line
