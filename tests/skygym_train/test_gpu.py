"""The trainer's GPU paths: FSDP2 with bf16 mixed precision, flash attention, DeepSpeed over NCCL and Ulysses over
NCCL. They run where CUDA GPUs exist; the same code is checked over gloo on CPU by the other trainer tests
(test_fsdp_data_parallel, test_deepspeed, test_sequence_parallel), which also compare against one process."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from skygym_train.config.schema import MixedPrecisionConfig
from skygym_train.workers.group import LocalWorkerGroup
from tests.skygym_train.test_checkpoint_dcp import _batch, _spec, _started

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU (this machine has none): these run the GPU paths; the CPU tests cover the same "
        "code over gloo",
    ),
]


def _gpu_spec(model_dir, **changes):
    spec = replace(_spec(model_dir, scheduler="constant", warmup=0), mixed_precision=MixedPrecisionConfig())
    return replace(spec, **changes)


def _step(spec):
    group = _started(LocalWorkerGroup(spec))
    try:
        before = group.forward(_batch())["log_probs"]
        metrics = group.train_step(_batch())
        after = group.forward(_batch())["log_probs"]
    finally:
        group.call("shutdown")
    return before, metrics, after


@pytest.mark.parametrize("shard_one_gpu", [False, True], ids=["autocast", "fsdp2"])
def test_bf16_mixed_precision_takes_a_finite_step_close_to_fp32(tiny_lm_dir, shard_one_gpu):
    """One GPU: plain parameters under bf16 autocast (the default), or FSDP2's mixed-precision policy
    (``fsdp_config.shard_one_gpu``)."""
    mask = _batch().tensors["response_mask"].bool()
    before, metrics, after = _step(_gpu_spec(tiny_lm_dir, shard_one_gpu=shard_one_gpu))
    fp32_before, fp32_metrics, _ = _step(_gpu_spec(tiny_lm_dir, bf16=False))
    grad_norm = metrics["policy/grad_norm"]
    assert torch.isfinite(torch.tensor(grad_norm)) and grad_norm > 0
    assert grad_norm == pytest.approx(fp32_metrics["policy/grad_norm"], rel=0.05)
    torch.testing.assert_close(before[mask], fp32_before[mask], atol=5e-2, rtol=5e-2)
    assert not torch.equal(before[mask], after[mask]), "the step changed nothing"


def test_flash_attention_gives_the_log_probs_sdpa_gives(tiny_lm_dir):
    pytest.importorskip("flash_attn", reason="needs the flash-attn package: pip install flash-attn")
    mask = _batch().tensors["response_mask"].bool()
    flash, flash_metrics, _ = _step(_gpu_spec(tiny_lm_dir, flash_attn=True))
    sdpa, sdpa_metrics, _ = _step(_gpu_spec(tiny_lm_dir, flash_attn=False))
    torch.testing.assert_close(flash[mask], sdpa[mask], atol=2e-2, rtol=2e-2)
    assert flash_metrics["policy/grad_norm"] == pytest.approx(sdpa_metrics["policy/grad_norm"], rel=0.05)


def test_deepspeed_zero3_in_bf16_takes_the_step_fsdp2_takes(tiny_lm_dir):
    pytest.importorskip("deepspeed", reason="needs deepspeed: pip install 'skyrl-gym[deepspeed]'")
    mask = _batch().tensors["response_mask"].bool()
    spec = _gpu_spec(tiny_lm_dir, strategy="deepspeed", deepspeed_config={"zero_optimization": {"stage": 3}})
    ds_before, ds_metrics, ds_after = _step(spec)
    fsdp_before, fsdp_metrics, _ = _step(_gpu_spec(tiny_lm_dir))
    torch.testing.assert_close(ds_before[mask], fsdp_before[mask], atol=5e-2, rtol=5e-2)
    assert ds_metrics["policy/grad_norm"] == pytest.approx(fsdp_metrics["policy/grad_norm"], rel=0.05)
    assert not torch.equal(ds_before[mask], ds_after[mask]), "the step changed nothing"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs (one rank each)")
def test_ulysses_over_nccl_on_two_gpus_gives_one_process_log_probs(tiny_lm_dir, ray_cluster):
    from ray.util.placement_group import remove_placement_group

    from skygym_train.ray_utils import create_placement_group
    from skygym_train.workers.group import RayWorkerGroup

    mask = _batch().tensors["response_mask"].bool()
    one, _, _ = _step(_gpu_spec(tiny_lm_dir, bf16=False, sample_packing=False))
    pg = create_placement_group(2, use_gpu=True)
    group = _started(
        RayWorkerGroup(
            _gpu_spec(tiny_lm_dir, bf16=False, sequence_parallel_size=2), 2, pg, num_gpus_per_actor=1.0
        )
    )
    try:
        two = group.forward(_batch())["log_probs"]
    finally:
        group.shutdown()
        remove_placement_group(pg)
    torch.testing.assert_close(two[mask], one[mask], atol=1e-3, rtol=1e-3)
