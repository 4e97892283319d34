"""``trainer.strategy=deepspeed``: ZeRO 2 and 3 on DeepSpeed's CPU accelerator over gloo (the same worker runs NCCL on
CUDA). Two ranks must take exactly the step one FSDP2 process takes, checkpoints must resume bit for bit and load
without unpickling code, and a whole training run must keep the engine's weights equal to the policy's."""

from __future__ import annotations

import os
import pickle
from dataclasses import replace

import pytest
import torch

from skygym_train import checkpoint as ckpt
from skygym_train.config import ConfigError, load_config
from skygym_train.workers.group import LocalWorkerGroup, RayWorkerGroup
from tests.skygym_train.test_checkpoint_dcp import _batch, _spec, _started
from tests.skygym_train.toy_envs import toy_overrides

pytest.importorskip(
    "deepspeed", reason="trainer.strategy=deepspeed needs deepspeed: pip install 'skyrl-gym[deepspeed]'"
)


def _ds_spec(model_dir, stage: int, **config):
    spec = _spec(model_dir, scheduler="constant", warmup=0)
    return replace(
        spec,
        micro_train_batch_size=1,
        micro_forward_batch_size=1,
        strategy="deepspeed",
        deepspeed_config={"zero_optimization": {"stage": stage}, **config},
    )


def _ray_group(spec, placement):
    return _started(RayWorkerGroup(spec, 2, placement))


@pytest.mark.slow
@pytest.mark.timeout(300)  # a rank out of step with the other hangs in a collective: fail instead
@pytest.mark.parametrize("stage", [2, 3])
def test_two_zero_ranks_take_the_step_one_fsdp_process_takes(tiny_lm_dir, two_bundles, stage):
    # the reference: one process, plain AdamW, four micro-batches of one row (each row weighs 1/4)
    reference = _started(
        LocalWorkerGroup(replace(_ds_spec(tiny_lm_dir, stage), strategy="fsdp2", deepspeed_config=None))
    )
    expected = reference.train_step(_batch())
    expected_weights = reference.call("full_state_dict")[0]
    expected_log_probs = reference.forward(_batch())["log_probs"]

    # two ZeRO ranks, two micro-batches of one row each: DeepSpeed accumulates them and averages across ranks
    group = _ray_group(_ds_spec(tiny_lm_dir, stage), two_bundles)
    try:
        got = group.train_step(_batch())
        weights = group.call("full_state_dict")
        log_probs = group.forward(_batch())["log_probs"]
    finally:
        group.shutdown()

    assert got["policy/grad_norm"] == pytest.approx(expected["policy/grad_norm"], rel=1e-5)
    assert got["policy/grad_norm"] > 0
    assert got["policy/lr"] == expected["policy/lr"]
    assert weights[1] == {}, "only rank 0 holds the gathered weights"
    assert sorted(weights[0]) == sorted(expected_weights)  # every name, the tied lm_head too
    for name, value in expected_weights.items():
        torch.testing.assert_close(weights[0][name], value, atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    torch.testing.assert_close(log_probs, expected_log_probs, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_zero3_checkpoint_resumes_to_the_same_next_step(tiny_lm_dir, two_bundles, tmp_path):
    folder = tmp_path / "policy"
    group = _ray_group(_ds_spec(tiny_lm_dir, 3), two_bundles)
    try:
        group.train_step(_batch())
        group.call("save_training_state", str(folder))
        group.train_step(_batch())
        after_two = group.call("full_state_dict")[0]
        group.call("load_training_state", str(folder))
        group.train_step(_batch())
        again = group.call("full_state_dict")[0]
    finally:
        group.shutdown()

    # each rank wrote its own partition of Adam's moments: no rank wrote everything
    optim = sorted(path.name for path in (folder / ckpt.DEEPSPEED_TAG).glob("*optim_states.pt"))
    assert optim == ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert ckpt.worker_state_dir(tmp_path, "policy") == folder
    for name, value in after_two.items():
        torch.testing.assert_close(again[name], value, atol=0, rtol=0, msg=lambda m: f"{name}: {m}")


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {_Payload.marker}",))


def test_a_deepspeed_checkpoint_file_that_asks_for_code_is_refused_and_its_payload_never_runs(tmp_path):
    from skygym_train.workers.deepspeed_worker import safe_checkpoint_engine

    _Payload.marker = tmp_path / "ran"
    hostile = tmp_path / "mp_rank_00_model_states.pt"
    with open(hostile, "wb") as handle:
        pickle.dump({"module": _Payload()}, handle, protocol=2)
    with pytest.raises(ckpt.UnsafeCheckpointError, match="refusing to load .*mp_rank_00_model_states.pt"):
        safe_checkpoint_engine().load(str(hostile), map_location="cpu")
    assert not _Payload.marker.exists()

    # what DeepSpeed itself writes (tensors, plain data, its loss scaler and enums) still loads
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    plain = tmp_path / "optim_states.pt"
    torch.save(
        {"loss_scaler": LossScaler(1.0), "zero_stage": ZeroStageEnum.weights, "w": torch.ones(2)}, plain
    )
    loaded = safe_checkpoint_engine().load(str(plain), map_location="cpu")
    assert loaded["zero_stage"] == ZeroStageEnum.weights and torch.equal(loaded["w"], torch.ones(2))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_deepspeed_training_run_keeps_the_engine_in_step_and_checkpoints(
    tiny_chat_model, toy_data, tmp_path, ray_cluster
):
    from skygym_train.trainer import PPOTrainer
    from tests.skygym_train.test_ray_trainer import fit_and_check_the_engine

    overrides = toy_overrides(
        tiny_chat_model,
        toy_data,
        tmp_path,
        **{
            "trainer.strategy": "deepspeed",
            "trainer.use_ray": "true",
            "trainer.num_cpu_workers": 2,
            "trainer.max_training_steps": 2,
            "trainer.micro_train_batch_size_per_gpu": 2,
            "trainer.ckpt_interval": 2,
            "trainer.policy.deepspeed_config": "{zero_optimization: {stage: 3}}",
        },
    )
    with PPOTrainer(load_config(overrides)) as trainer:
        trainer.setup()
        fit_and_check_the_engine(trainer, steps=2)
        # ZeRO partitions cannot be shared with the engine: a bucketed broadcast
        assert trainer._weight_sync.backend == "gloo"
    saved = ckpt.latest_checkpoint(tmp_path / "ckpts")
    assert saved is not None and ckpt.worker_state_dir(saved, "policy") is not None


# ------------------------------------------------------------------------------------------ configuration


def _problems(tmp_path, tiny_lm_dir, toy_data, **extra):
    with pytest.raises(ConfigError) as info:
        load_config(toy_overrides(tiny_lm_dir, toy_data, tmp_path, **extra))
    return str(info.value)


def test_deepspeed_settings_the_trainer_owns_or_cannot_run_are_refused_with_what_to_set(
    tmp_path, tiny_lm_dir, toy_data
):
    text = _problems(
        tmp_path,
        tiny_lm_dir,
        toy_data,
        **{
            "trainer.strategy": "deepspeed",
            "trainer.policy.deepspeed_config": "{train_batch_size: 8, gradient_clipping: 0.5, zero_optimization: "
            "{stage: 4, offload_optimizer: {device: cpu}}}",
            "trainer.ref.fsdp_config.reshard_after_forward": "false",
            "trainer.policy.fsdp_config.shard_one_gpu": "true",
        },
    )
    assert "trainer.policy.deepspeed_config.train_batch_size: set by the trainer" in text
    assert (
        "trainer.policy.deepspeed_config.gradient_clipping: set by the trainer; set "
        "trainer.policy.optimizer_config.max_grad_norm" in text
    )
    assert "trainer.policy.deepspeed_config.zero_optimization.stage: expected one of 1, 2, 3" in text
    # load_config checks this machine: the offload is refused only where there is no GPU
    from skygym_train.config.validation import cuda_available

    assert ("offload_optimizer.device=cpu: needs CUDA GPUs" in text) is not cuda_available()
    assert "trainer.ref.fsdp_config.reshard_after_forward: an FSDP setting" in text
    assert "trainer.policy.fsdp_config.shard_one_gpu=true: an FSDP setting" in text

    text = _problems(
        tmp_path,
        tiny_lm_dir,
        toy_data,
        **{"trainer.critic.deepspeed_config": "{zero_optimization: {stage: 2}}"},
    )
    assert (
        "trainer.critic.deepspeed_config: only read with trainer.strategy=deepspeed (this run uses fsdp2)"
        in text
    )


def test_deepspeed_without_the_package_is_refused_with_the_install_command(
    tmp_path, tiny_lm_dir, toy_data, monkeypatch
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a)
    )
    text = _problems(tmp_path, tiny_lm_dir, toy_data, **{"trainer.strategy": "deepspeed"})
    assert "pip install 'skyrl-gym[deepspeed]'" in text


@pytest.mark.parametrize("variant", ["lora", "critic", "ref", "gradient_checkpointing", "recomputed_head"])
def test_lora_the_critic_the_reference_and_checkpointing_match_fsdp2_in_one_process(
    tiny_lm_dir, monkeypatch, variant, deterministic_kernels
):
    from skygym_train.config.schema import LoraConfig
    from skygym_train.workers import log_probs

    monkeypatch.setenv("LOCAL_RANK", "0")  # what the worker sets for DeepSpeed; restored afterwards
    if variant == "recomputed_head":
        # as on a GPU: the LM head's chunks are recomputed in the backward pass, when ZeRO-3 has gathered its
        # weight again for the head's backward (log_probs.log_probs_from_head)
        monkeypatch.setattr(log_probs, "recomputes_on", lambda device: True)
    batch = _batch()
    changes = {
        "lora": {"lora": LoraConfig(rank=4, alpha=8)},
        "critic": {"role": "critic"},
        "ref": {"role": "ref"},
        "gradient_checkpointing": {"gradient_checkpointing": True},
        "recomputed_head": {},
    }[variant]
    if variant == "critic":
        mask = batch.tensors["response_mask"]
        batch = batch.with_tensors(
            values=torch.zeros_like(mask, dtype=torch.float32),
            returns=batch.tensors["advantages"].flip(1) * mask,
        )
    results = {}
    for strategy in (
        "deepspeed",
        "fsdp2",
    ):  # a DeepSpeed worker, shut down, leaves the process clean for the next
        spec = replace(_ds_spec(tiny_lm_dir, 3), micro_train_batch_size=2, strategy=strategy, **changes)
        group = _started(LocalWorkerGroup(spec))
        try:
            out = group.forward(batch)
            metrics = group.train_step(batch) if spec.role != "ref" else {}
            results[strategy] = (out, metrics, group.call("full_state_dict")[0])
        finally:
            group.call("shutdown")
    (ds_out, ds_metrics, ds_weights), (out, metrics, weights) = results["deepspeed"], results["fsdp2"]
    for key, value in out.items():
        torch.testing.assert_close(ds_out[key], value, atol=1e-6, rtol=1e-5, msg=key)
    for key, value in metrics.items():
        if key.endswith("grad_norm"):
            assert ds_metrics[key] == pytest.approx(value, rel=1e-5) and value > 0
    assert sorted(ds_weights) == sorted(weights)  # LoRA merged back into the plain names
    for name, value in weights.items():
        torch.testing.assert_close(ds_weights[name], value, atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
