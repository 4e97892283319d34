"""SkyRL-train's tutorial names under skygym_train: BasePPOExp, config_dir, validate_cfg, hydra_main, initialize_ray;
and a run whose trajectories all fail stops with the first error."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Dict, List

import pytest
from omegaconf import OmegaConf

from skygym_train.config import ConfigError, SkyRLTrainConfig
from skygym_train.entrypoints.main_base import BasePPOExp, config_dir, hydra_main, main, validate_cfg
from skygym_train.utils import initialize_ray  # noqa: F401  (the name the tutorial imports)
from tests.tiny_models import CHAT_MODEL

HAS_HYDRA = importlib.util.find_spec("hydra") is not None


@pytest.fixture
def data_file(tmp_path: Path) -> str:
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply"}\n')
    return str(path)


def test_validate_cfg_takes_the_dictconfig_hydra_builds_from_config_dir(data_file):
    assert (Path(config_dir) / "ppo_base_config.yaml").is_file()
    cfg = OmegaConf.load(Path(config_dir) / "ppo_base_config.yaml")
    cfg.data.train_data = [data_file]
    cfg.trainer.policy.model.path = CHAT_MODEL
    cfg.trainer.use_ray = False
    typed = validate_cfg(cfg)
    assert isinstance(typed, SkyRLTrainConfig) and typed.data.train_data == [data_file]
    cfg.trainer.train_batch_size = 10
    cfg.trainer.policy_mini_batch_size = 4
    with pytest.raises(ConfigError, match="trainer.train_batch_size=10 is not a multiple"):
        validate_cfg(cfg)


@pytest.mark.skipif(HAS_HYDRA, reason="Hydra is installed, so hydra_main is hydra.main itself")
def test_hydra_main_without_hydra_reads_the_same_overrides(data_file, capsys):
    seen: List[Any] = []

    @hydra_main(config_path=config_dir, config_name="ppo_base_config", version_base=None)
    def entry(cfg: Any) -> None:
        seen.append(validate_cfg(cfg))

    entry([f"data.train_data=[{data_file}]", f"trainer.policy.model.path={CHAT_MODEL}",
           "trainer.use_ray=false",
           "+environment.skyrl_gym.text2sql.db_path=/data/sql"])
    assert seen[0].environment.skyrl_gym["text2sql"] == {"db_path": "/data/sql"}
    assert seen[0].environment.skyrl_gym["search"]["topk"] is None  # null: the env's own default
    with pytest.raises(SystemExit) as info:
        entry(["trainer.algoritm.use_kl_loss=true"])
    assert info.value.code == 2 and "did you mean 'algorithm'" in capsys.readouterr().err


class _Rows(BasePPOExp):
    """A custom dataset and generator, as the tutorial's subclasses do."""

    def __init__(self, cfg: Any, rows: List[Dict[str, Any]]):
        super().__init__(cfg)
        self.rows = rows
        self.generator_args: List[Any] = []

    def get_train_dataset(self) -> List[Dict[str, Any]]:
        return self.rows

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
        self.generator_args.append((tokenizer, inference_engine_client))
        return super().get_generator(cfg, tokenizer, inference_engine_client)


def _tiny_overrides(model: Path, data: str, tmp: Path, *extra: str) -> List[str]:
    return [
        f"trainer.policy.model.path={model}", f"data.train_data=[{data}]", "trainer.use_ray=false",
        "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2", "generator.n_samples_per_prompt=2",
        "trainer.micro_train_batch_size_per_gpu=4", "trainer.micro_forward_batch_size_per_gpu=4",
        "generator.sampling_params.max_generate_length=4", "trainer.ckpt_interval=-1", "trainer.resume_mode=none",
        "trainer.logger=console", "trainer.progress_bar=false", "trainer.eval_interval=-1",
        "trainer.eval_before_train=false", f"trainer.log_path={tmp / 'logs'}", f"trainer.ckpt_path={tmp / 'ck'}",
        "trainer.gradient_checkpointing=false", *extra,
    ]


def test_base_ppo_exp_hooks_reach_the_trainer_and_all_failing_trajectories_stop_the_run(tiny_chat_model, tmp_path,
                                                                                         data_file):
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    class Broken(BaseTextEnv):
        def step(self, action: str) -> Any:
            raise RuntimeError("the sandbox is down")

    skyrl_gym.register("test_broken_env", entry_point=Broken)
    try:
        rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "env_class": "test_broken_env"} for i in range(4)]
        from skygym_train.config import load_config

        cfg = load_config(_tiny_overrides(tiny_chat_model, data_file, tmp_path, "trainer.max_failed_steps=2"))
        exp = _Rows(cfg, rows)
        from skygym_train.trainer import TrajectoriesFailed

        with exp._setup_trainer() as trainer:
            with pytest.raises(TrajectoriesFailed) as info:
                trainer.fit()
            assert trainer.train_rows == rows
            assert exp.generator_args and exp.generator_args[0][1] is trainer.engine
            assert trainer.global_step == 1  # the first all-failed step ran; the second stopped the run
        assert "2 consecutive step(s) (trainer.max_failed_steps=2)" in str(info.value)
        assert "the sandbox is down" in str(info.value)
    finally:
        skyrl_gym.deregister("test_broken_env")


def test_main_exits_1_with_the_first_error_when_every_trajectory_fails(tiny_chat_model, tmp_path, capsys):
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    class Broken(BaseTextEnv):
        def __init__(self, env_config: Any = None, extras: Any = None):
            raise ValueError("no reward_spec in this row")

    skyrl_gym.register("test_broken_init", entry_point=Broken)
    try:
        data = tmp_path / "rows.jsonl"
        data.write_text('{"prompt": [{"role": "user", "content": "hi"}], "env_class": "test_broken_init"}\n' * 2)
        assert main(_tiny_overrides(tiny_chat_model, str(data), tmp_path, "trainer.max_failed_steps=1")) == 1
        assert "no reward_spec in this row" in capsys.readouterr().err
    finally:
        skyrl_gym.deregister("test_broken_init")
