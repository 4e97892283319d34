"""The Ray path: policy workers as a Ray actor group (2 gloo ranks, FSDP2) feeding an HF engine.

Weights reach the engine by a torch.distributed broadcast from policy rank 0 over a gloo group of its
own; after each step the engine's weights must equal the policy's (and differ from the start). The
checkpoint-and-load sync (for remote engines) is then checked on the same workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from skygym_train.weight_sync import EngineWeightSync
from tests.skygym_train.toy_envs import toy_overrides


def _engine_state(trainer):
    engine = trainer.engine.engines[0]
    return {k: v.detach().cpu().clone() for k, v in engine.model.state_dict().items()}


def fit_and_check_the_engine(trainer, steps: int):
    """Train ``steps`` steps (set up already); every step has a gradient, and afterwards the engine's weights have
    moved and equal the policy's. Returns the policy's weights."""
    before = _engine_state(trainer)
    result = trainer.fit()
    policy = trainer.policy.call("full_state_dict")[0]
    after = _engine_state(trainer)
    assert result["global_step"] == steps
    assert all(h["policy/grad_norm"] > 0 for h in result["history"] if "policy/grad_norm" in h)
    assert [k for k in before if not torch.equal(before[k], after[k])], "the engine's weights did not change"
    _assert_engine_matches(after, policy)
    return policy


def _assert_engine_matches(engine_state, policy_state):
    compared = 0
    for name, value in engine_state.items():
        if name in policy_state:
            torch.testing.assert_close(value, policy_state[name], msg=lambda m: f"{name}: {m}")
            compared += 1
    assert compared >= len(engine_state) - 1  # all but possibly a tied lm_head


@pytest.mark.slow
def test_ray_fsdp_workers_and_weight_sync(tiny_chat_model, toy_data, tmp_path, ray_cluster):
    cfg = load_config(
        toy_overrides(
            tiny_chat_model,
            toy_data,
            tmp_path,
            **{
                "trainer.use_ray": "true",
                "trainer.num_cpu_workers": 2,
                "trainer.max_training_steps": 2,
                "trainer.micro_train_batch_size_per_gpu": 4,
                "generator.weight_sync_backend": "gloo",
            },
        )
    )
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        assert trainer.policy.world_size == 2
        policy = fit_and_check_the_engine(trainer, steps=2)
        assert trainer._weight_sync.backend == "gloo" and trainer._weight_sync.bytes_last > 0

        # checkpoint-and-load: spoil the engine's weights, then sync through a Hugging Face folder
        engine_model = trainer.engine.engines[0].model
        with torch.no_grad():
            for p in engine_model.parameters():
                p.zero_()
        cfg.generator.weight_sync_backend = "checkpoint"
        sync = EngineWeightSync(cfg, trainer.policy, trainer.engine, trainer._runner)
        sync.sync()
        _assert_engine_matches(_engine_state(trainer), policy)
        folder = Path(sync.sync_dir.path)
        assert (folder / "model.safetensors").is_file()
        sync.close()  # the folder holds a whole model: closing the sync removes it
        assert not folder.exists()


@pytest.mark.slow
def test_a_cpu_worker_trains_on_every_core_its_placement_reserved(tiny_chat_model, toy_data, tmp_path, ray_cluster):
    """Ray gives an actor OMP_NUM_THREADS=1; one policy worker on this 2-CPU Ray must still use both cores."""
    from skygym_train.ray_utils import cpus_per_worker

    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path,
                                    **{"trainer.use_ray": "true", "trainer.num_cpu_workers": 1}))
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        assert cpus_per_worker(1) == 2
        assert trainer.policy.call("torch_threads") == [2]
