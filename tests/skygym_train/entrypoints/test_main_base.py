"""The command lines: ``python -m skygym_train.entrypoints.main_base`` and ``skyrl-gym train``."""

from __future__ import annotations

import pytest

from skyrl_gym.cli import main as skyrl_gym_main
from skygym_train.entrypoints.main_base import main
from tests.tiny_models import CHAT_MODEL


def test_check_and_print_config(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "hi"}], "env_class": "multiply"}\n')
    keys = [f"data.train_data=[{data}]", f"trainer.policy.model.path={CHAT_MODEL}", "trainer.use_ray=false"]
    assert main(["--check", *keys]) == 0
    assert main(["--print-config", *keys, "trainer.algorithm.advantage_estimator=rloo"]) == 0
    out = capsys.readouterr().out
    assert "advantage_estimator: rloo" in out and str(data) in out


def test_bad_config_exits_2_before_loading_anything(capsys):
    assert main(["trainer.train_batch_size=10", "trainer.policy_mini_batch_size=4"]) == 2
    err = capsys.readouterr().err
    assert "trainer.train_batch_size=10 is not a multiple of trainer.policy_mini_batch_size=4" in err


def test_skyrl_gym_train_subcommand(capsys):
    pytest.importorskip("omegaconf", reason="`skyrl-gym train` needs the 'train' extra: pip install torch==2.13.0 "
                                            "&& pip install 'skyrl-gym[train]'")
    assert skyrl_gym_main(["train", "--check", "trainer.algoritm.advantage_estimator=grpo"]) == 2
    assert "did you mean 'algorithm'" in capsys.readouterr().err
