"""What cannot work on a GPU is refused at --check or set to what works, checked here without one: NCCL
between two processes on one GPU, vLLM's sleep without sleep mode, vLLM's memory share beside training in
one process; and the one-GPU worker keeps plain parameters (no FSDP wrapper, bf16 by autocast) so an engine
beside it can copy them on the device."""

from __future__ import annotations

import asyncio

import pytest
import torch

from skygym_train.config import ConfigError, load_config, validate_config
from skygym_train.config.schema import MixedPrecisionConfig, OptimizerConfig
from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec
from tests.skygym_train.config.test_skyrl_compat import _valid


def _config(data_file: str, *extra: str):
    return load_config(_valid(data_file, *extra), validate=False)


def _problems(cfg, has_cuda: bool = True) -> str:
    try:
        validate_config(cfg, has_cuda=has_cuda)
    except ConfigError as exc:
        return "\n".join(exc.problems)
    return ""


def test_vllm_in_the_trainers_process_may_not_claim_the_memory_the_policy_holds(multiply_data):
    vllm = ("generator.backend=vllm",)
    text = _problems(_config(multiply_data, *vllm))
    assert "generator.gpu_memory_utilization=0.8: with trainer.use_ray=false" in text
    assert "at most 0.5" in text
    lower = _config(multiply_data, *vllm, "generator.gpu_memory_utilization=0.4")
    assert "gpu_memory_utilization" not in _problems(lower)
    # CPU: no GPU share to claim
    assert "gpu_memory_utilization" not in _problems(_config(multiply_data, *vllm), has_cuda=False)


def test_a_colocated_vllm_engine_keeps_sleep_mode(multiply_data):
    off = ("generator.backend=vllm", "generator.gpu_memory_utilization=0.4",
           "+generator.engine_init_kwargs.enable_sleep_mode=false")
    assert "enable_sleep_mode=false" in _problems(_config(multiply_data, *off))
    apart = _config(multiply_data, *off, "trainer.placement.colocate_all=false")
    assert "enable_sleep_mode" not in _problems(apart)


def test_nccl_is_refused_between_the_driver_and_a_colocated_policy_on_one_gpu(multiply_data, monkeypatch):
    from skygym_train.weight_sync import resolve_backend

    ray = ("trainer.use_ray=true",)
    nccl = _config(multiply_data, *ray, "generator.weight_sync_backend=nccl")
    assert "NCCL refuses two ranks on one GPU" in _problems(nccl)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_backend(_config(multiply_data, *ray)) == "gloo"  # colocate_all is the default
    assert resolve_backend(_config(multiply_data, *ray, "trainer.placement.colocate_all=false")) == "nccl"


def test_only_engines_with_memory_to_give_back_sleep_while_the_policy_trains(multiply_data, monkeypatch):
    from skygym_train.config import validation
    from skygym_train.generation import engines_sleep_while_training

    monkeypatch.setattr(validation, "cuda_available", lambda: True)
    # an HF engine in this process: no trip to the host and back
    assert not engines_sleep_while_training(_config(multiply_data))
    assert engines_sleep_while_training(_config(multiply_data, "generator.backend=vllm"))
    actors = ("trainer.use_ray=true", "generator.run_engines_locally=true")
    assert engines_sleep_while_training(_config(multiply_data, *actors))
    apart = _config(multiply_data, *actors, "trainer.placement.colocate_all=false")
    assert not engines_sleep_while_training(apart)
    monkeypatch.setattr(validation, "cuda_available", lambda: False)
    assert not engines_sleep_while_training(_config(multiply_data, "generator.backend=vllm"))


def test_a_vllm_engine_without_sleep_mode_refuses_to_sleep():
    """A unit double (vLLM is not installed here): only the flag the constructor records is set."""
    import threading

    from skygym_adapters.engines.base import EngineError
    from skygym_adapters.engines.vllm_engine import VLLMEngine

    engine = object.__new__(VLLMEngine)
    engine.sleep_mode, engine._lock, engine._sleeping = False, threading.Lock(), False
    with pytest.raises(EngineError, match="enable_sleep_mode=True"):
        asyncio.run(engine.sleep())
    asyncio.run(engine.wake_up())  # waking an engine that never slept does nothing


def _cuda_worker(**changes) -> TrainingWorker:
    changes.setdefault("mixed_precision", MixedPrecisionConfig())
    spec = WorkerSpec(role="policy", model_path="unused", optimizer=OptimizerConfig(), **changes)
    worker = TrainingWorker(spec)
    worker.device = torch.device("cuda", 0)  # what the worker decides there; nothing is loaded
    return worker


def test_one_gpu_keeps_plain_parameters_and_computes_in_bf16_by_autocast():
    worker = _cuda_worker()
    assert not worker._shards_on_cuda() and worker._autocast_dtype() == torch.bfloat16
    assert _cuda_worker(bf16=False)._autocast_dtype() is None
    assert _cuda_worker(mixed_precision=MixedPrecisionConfig(param_dtype="fp32"))._autocast_dtype() is None
    offload = _cuda_worker(cpu_offload=True)
    # CPU offload is FSDP2's: sharded, loaded on the host, moved layer by layer
    assert offload._shards_on_cuda()
    offload.sharded = True
    assert offload._autocast_dtype() is None  # FSDP's mixed-precision policy casts instead
    two = TrainingWorker(worker.spec, rank=0, world_size=2)
    two.device = torch.device("cuda", 0)
    assert two._shards_on_cuda()
    cpu = TrainingWorker(worker.spec)
    cpu.device = torch.device("cpu")
    assert not cpu._shards_on_cuda() and cpu._autocast_dtype() is None
    # fsdp_config.shard_one_gpu: FSDP2 on the one GPU too, for its mixed precision (bf16 compute without autocast)
    asked = _cuda_worker(shard_one_gpu=True)
    assert asked._shards_on_cuda()
    asked.sharded = True
    assert asked._autocast_dtype() is None and asked._attention_dtype() == torch.bfloat16


def test_zero3_gathers_parameters_in_groups_by_size():
    from skygym_train.workers.deepspeed_worker import _groups_by_bytes

    tensors = [torch.zeros(n) for n in (10, 10, 30, 5, 100)]  # 4 bytes an element
    groups = _groups_by_bytes(tensors, 100)
    assert [[t.numel() for t in g] for g in groups] == [[10, 10], [30], [5], [100]]
    assert [len(g) for g in _groups_by_bytes(tensors, 10**9)] == [5]


def test_a_policy_on_a_device_shares_in_process_but_never_through_a_host_file(tiny_lm_dir, tmp_path):
    from tests.device_emulation import emulated_device, is_on_device

    with emulated_device() as device:
        spec = WorkerSpec(role="policy", model_path=str(tiny_lm_dir), optimizer=OptimizerConfig())
        worker = TrainingWorker(spec)
        worker.device = device
        worker.load_model()
        tensors, why = worker.shareable_parameters()  # an engine in this process reads them where they are
        assert why is None and tensors and all(is_on_device(t) for t in tensors.values())
        info, why = worker.share_parameters_in_file(str(tmp_path / "weights"))
        assert info is None and "on a GPU" in why
        assert all(is_on_device(p) for p in worker.model.parameters())  # nothing was moved to the host
    assert not (tmp_path / "weights").exists()
