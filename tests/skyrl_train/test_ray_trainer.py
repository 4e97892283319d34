"""The Ray path: policy workers as a Ray actor group (2 gloo ranks, FSDP2) feeding an HF engine.

Weights reach the engine by a torch.distributed broadcast from policy rank 0 over a gloo group of its
own; after each step the engine's weights must equal the policy's (and differ from the start).
"""

from __future__ import annotations

import pytest
import torch

from skyrl_train.config import load_config
from skyrl_train.trainer import PPOTrainer
from tests.skyrl_train.toy_envs import toy_overrides


def _engine_state(trainer):
    engine = trainer.engine.engines[0]
    return {k: v.detach().cpu().clone() for k, v in engine.model.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("sync_backend", ["gloo", "checkpoint"])
def test_ray_fsdp_workers_and_weight_sync(sync_backend, tiny_chat_model, toy_data, tmp_path):
    ray = pytest.importorskip("ray")
    from skyrl_train.ray_utils import init_ray

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
                "generator.weight_sync_backend": sync_backend,
            },
        )
    )
    init_ray(num_cpus=2)
    try:
        with PPOTrainer(cfg) as trainer:
            trainer.setup()
            assert trainer.policy.world_size == 2
            before = _engine_state(trainer)
            result = trainer.fit()
            policy = trainer.policy.call("full_state_dict")[0]
            after = _engine_state(trainer)
    finally:
        ray.shutdown()
    assert result["global_step"] == 2
    assert all(h["policy/grad_norm"] > 0 for h in result["history"] if "policy/grad_norm" in h)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "the engine's weights did not change"
    for name, value in after.items():
        if name in policy:
            torch.testing.assert_close(value, policy[name], msg=name)
