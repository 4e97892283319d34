"""Ulysses sequence parallelism (``trainer.<role>.sequence_parallel_size``) on two gloo ranks: each rank runs half
of every sequence, yet the log-probs, values, gradient norm and updated weights equal one process's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from skygym_train.algorithms import POLICY_LOSSES
from skygym_train.config.schema import AlgorithmConfig, OptimizerConfig
from skygym_train.workers.batch import build_batch
from skygym_train.workers.fsdp_worker import WorkerSpec
from skygym_train.workers.group import LocalWorkerGroup, RayWorkerGroup


def _batch(odd: bool = True):
    # rows of different lengths: left-padded prompts, right-padded responses, a total length that two ranks
    # cannot split evenly (odd) so the last slice is padded
    prompts = [[1, 2, 3], [4, 5], [7, 8, 9, 10], [11]]
    responses = [[6, 7, 12], [8, 9, 10], [6], [13, 14]] if odd else [[6, 7, 12, 2], [8, 9, 10], [6], [13, 14]]
    masks = [[1] * len(r) for r in responses]
    masks[3] = [1, 0]
    batch = build_batch(prompts, responses, masks, pad_token_id=0, uids=["a", "a", "b", "b"])
    advantages = torch.tensor(
        [[1.0, 0.5, 1.0, 0.2], [-1.0, -1.0, -1.0, 0.0], [0.5, 0.0, 0.0, 0.0], [-0.5, -0.5, 0.0, 0.0]]
    )[:, : batch.tensors["response_mask"].shape[1]]
    returns = advantages.flip(1)
    values = torch.zeros_like(advantages)
    mask = batch.tensors["response_mask"]
    return batch.with_tensors(advantages=advantages * mask, returns=returns * mask, values=values)


def _spec(model_dir, role: str, sp: int = 1):
    return WorkerSpec(
        role,
        str(model_dir),
        optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.0, scheduler="constant", num_warmup_steps=0),
        micro_train_batch_size=2,
        micro_forward_batch_size=2,
        sequence_parallel_size=sp,
    )


def _started(group):
    group.call("load_model")
    algorithm = AlgorithmConfig(use_entropy_loss=True, entropy_loss_coef=0.01)
    group.call("configure_algorithm", algorithm, POLICY_LOSSES.get("regular"), 0.7)
    return group


@pytest.mark.slow
@pytest.mark.timeout(300)  # a rank out of step with the other hangs in a collective: fail instead
@pytest.mark.parametrize("role", ["policy", "critic"])
def test_two_sequence_parallel_ranks_compute_what_one_process_does(tiny_lm_dir, two_bundles, role):
    reference = _started(LocalWorkerGroup(replace(_spec(tiny_lm_dir, role), sample_packing=False)))
    key = "values" if role == "critic" else "log_probs"
    expected_out = {odd: reference.forward(_batch(odd))[key] for odd in (True, False)}
    expected = reference.train_step(_batch())
    expected_weights = reference.call("full_state_dict")[0]

    group = _started(RayWorkerGroup(_spec(tiny_lm_dir, role, sp=2), 2, two_bundles))
    try:
        assert group.data_parallel_size == 1
        got_out = {odd: group.forward(_batch(odd))[key] for odd in (True, False)}
        got = group.train_step(_batch())
        weights = group.call("full_state_dict")[0]
    finally:
        group.shutdown()

    for odd in (True, False):
        real = (
            _batch(odd).tensors["response_mask"].bool()
        )  # padding positions are never used (their mask differs)
        torch.testing.assert_close(got_out[odd][real], expected_out[odd][real], atol=1e-5, rtol=1e-4)
    prefix = "critic" if role == "critic" else "policy"
    assert got[f"{prefix}/grad_norm"] > 0
    assert got[f"{prefix}/grad_norm"] == pytest.approx(expected[f"{prefix}/grad_norm"], rel=1e-4)
    for name, value in expected_weights.items():
        torch.testing.assert_close(weights[name], value, atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_sequence_parallel_training_run_keeps_the_engine_in_step(
    tiny_chat_model, toy_data, tmp_path, ray_cluster
):
    from skygym_train.config import load_config
    from skygym_train.trainer import PPOTrainer
    from tests.skygym_train.test_ray_trainer import fit_and_check_the_engine
    from tests.skygym_train.toy_envs import toy_overrides

    overrides = toy_overrides(
        tiny_chat_model,
        toy_data,
        tmp_path,
        **{
            "trainer.use_ray": "true",
            "trainer.num_cpu_workers": 2,
            "trainer.max_training_steps": 2,
            "trainer.policy.sequence_parallel_size": 2,
        },
    )
    with PPOTrainer(load_config(overrides)) as trainer:
        trainer.setup()
        assert trainer.policy.data_parallel_size == 1
        fit_and_check_the_engine(trainer, steps=2)


def test_sequence_parallel_sizes_the_workers_cannot_hold_are_refused(tmp_path, tiny_lm_dir, toy_data):
    from skygym_train.config import ConfigError, load_config
    from skygym_train.config.validation import validate_config
    from tests.skygym_train.toy_envs import toy_overrides

    with pytest.raises(ConfigError) as info:  # validated as on a machine without GPUs: 3 CPU workers, GPU or not
        validate_config(load_config(
            toy_overrides(
                tiny_lm_dir,
                toy_data,
                tmp_path,
                **{
                    "trainer.use_ray": "true",
                    "trainer.num_cpu_workers": 3,
                    "trainer.policy.sequence_parallel_size": 2,
                    "trainer.critic.sequence_parallel_size": 0,
                    "trainer.flash_attn": "true",
                },
            ),
            validate=False,
        ), has_cuda=False)
    text = str(info.value)
    assert "trainer.policy.sequence_parallel_size=2: must divide the policy's 3 workers" in text
    assert "trainer.critic.sequence_parallel_size=0: must be a positive integer" in text
    assert "Ulysses attention runs SDPA" in text

    with pytest.raises(ConfigError, match="trainer.use_ray=false trains one worker"):
        load_config(
            toy_overrides(tiny_lm_dir, toy_data, tmp_path, **{"trainer.ref.sequence_parallel_size": 2})
        )
