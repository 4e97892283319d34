"""Weight sync at the cost of its transport: no copy where the engine can read the policy's memory, a bucketed
broadcast in the engine's dtype where it cannot.

- without Ray, the hf engine reads the policy's own parameter tensors (``inprocess``): after each step the engine's
  weights are the policy's, and nothing is copied;
- with one Ray CPU worker on this node (``auto`` -> ``shm``), the policy's parameters live in one shared-memory
  file that the engine maps: the same, across processes;
- where sharing cannot hold (async training), the engine keeps a copy and each sync moves the weights;
- the broadcast packs tensors into flat buckets, floating ones cast to the engine's dtype.
"""

from __future__ import annotations

import threading

import pytest
import torch

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from skygym_train.weight_sync import (
    BroadcastGroup,
    free_port,
    plan_buckets,
    receive_state_dict,
    send_state_dict,
)
from tests.skygym_train.toy_envs import toy_overrides


def _engine(trainer):
    return trainer.engine.engines[0]


def _engine_state(trainer):
    """A host copy of the engine's weights (``full_state_dict`` comes to the host too; on a GPU both live there)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in _engine(trainer).model.named_parameters()}


def _assert_engine_is_policy(trainer, before):
    policy = trainer.policy.call("full_state_dict")[0]
    after = _engine_state(trainer)
    assert [k for k in before if not torch.equal(before[k], after[k])], "the engine's weights did not change"
    for name, value in after.items():
        torch.testing.assert_close(value, policy[name], msg=lambda m: f"{name}: {m}")


def test_without_ray_the_engine_reads_the_policys_tensors(tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 2}))
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        before = _engine_state(trainer)
        result = trainer.fit()
        sync = trainer._weight_sync
        assert (sync.backend, sync.shared, sync.bytes_last) == ("inprocess", True, 0)
        policy_params = dict(trainer.policy.worker.model.named_parameters())
        for name, param in _engine(trainer).model.named_parameters():
            assert param.data_ptr() == policy_params[name].data_ptr(), name
        _assert_engine_is_policy(trainer, before)
        steps = [h for h in result["history"] if "timing/step" in h]
        assert [h["weight_sync/bytes"] for h in steps] == [0.0, 0.0]
        # the engine holds no weights of its own, and no KV cache between steps (it keeps one only when compiled)
        assert [(h["memory/engine_weights_gib"], h["memory/engine_kv_cache_gib"]) for h in steps] == [(0.0, 0.0)] * 2
        assert "timing/to_first_step" in steps[0] and "timing/to_first_step" not in steps[1]
        assert trainer.setup_seconds is not None and "shared memory" in trainer.weight_sync_backend()


def test_async_training_keeps_a_copy_in_the_engine(tiny_chat_model, toy_data, tmp_path):
    """One-step-off training generates while the policy updates: the engine must not read the live tensors."""
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
        "trainer.max_training_steps": 2, "trainer.async_training.enabled": "true",
        "trainer.placement.colocate_all": "false",
    }))
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
        sync = trainer._weight_sync
        assert (sync.backend, sync.shared) == ("inprocess", False) and sync.bytes_last > 0
        own = sum(p.numel() * p.element_size() for p in _engine(trainer).model.parameters())
        last_step = [h for h in result["history"] if "timing/step" in h][-1]
        assert last_step["memory/engine_weights_gib"] == own / 2**30  # its copy, in the step's metrics
        engine_ptrs = {p.data_ptr() for p in _engine(trainer).model.parameters()}
        assert not engine_ptrs & {p.data_ptr() for p in trainer.policy.worker.model.parameters()}


def test_an_engine_update_never_writes_into_the_policys_tensors(tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 1}))
    with PPOTrainer(cfg) as trainer:
        trainer.fit()
        engine = _engine(trainer)
        assert engine.shares_weights()
        policy_before = {k: v.clone() for k, v in trainer.policy.worker.model.state_dict().items()}
        zeros = {k: torch.zeros_like(v) for k, v in engine.model.named_parameters()}
        trainer._runner.run(engine.update_weights(zeros))
        assert not engine.shares_weights()
        assert all(not p.any() for p in engine.model.parameters())
        for name, value in trainer.policy.worker.model.state_dict().items():
            assert torch.equal(value, policy_before[name]), name


def test_share_weights_refuses_tensors_of_another_dtype(tiny_chat_model):
    from skygym_adapters.engines.hf import HFEngine

    engine = HFEngine(str(tiny_chat_model))
    try:
        other = torch.float16 if engine.weight_dtype == torch.bfloat16 else torch.bfloat16  # not the engine's
        halves = {k: v.detach().to(other) for k, v in engine.model.named_parameters()}
        with pytest.raises(ValueError, match=str(other).split(".")[-1]):
            engine.share_weights(halves)
        assert not engine.shares_weights()
    finally:
        engine.close()


@pytest.mark.parametrize("compute", ["bf16-autocast", "float32"])
def test_a_policy_on_a_gpu_reaches_a_bf16_engine_without_the_host(compute, tiny_chat_model, toy_data, tmp_path,
                                                                  native_linear):
    """The policy (fp32 parameters) and a bf16 engine on one GPU (emulated, ``tests.device_emulation``). Computing
    under bf16 autocast (the default there), the policy borrows the engine's tensors and writes its update into
    them on the device (``borrowed_weights``): the sync moves nothing. Computing in fp32, it cannot: each sync
    copies the weights, device to device, cast on the way. Nothing goes through the host either way."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skygym_adapters.engines.hf import HFEngine
    from skygym_train.config.schema import OptimizerConfig
    from skygym_train.trainer import _AsyncRunner
    from skygym_train.weight_sync import EngineWeightSync
    from skygym_train.workers.fsdp_worker import WorkerSpec
    from skygym_train.workers.group import LocalWorkerGroup
    from tests.device_emulation import TRANSFERS, emulated_device, is_on_device

    lends = compute == "bf16-autocast"
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path))
    runner = _AsyncRunner()
    with emulated_device() as device:
        policy = LocalWorkerGroup(WorkerSpec(role="policy", model_path=str(tiny_chat_model),
                                             optimizer=OptimizerConfig(lr=1e-3), bf16=lends))
        policy.worker.device = device
        policy.worker.load_model()
        assert not policy.worker.sharded  # one device: plain parameters, no FSDP wrapper
        model = AutoModelForCausalLM.from_pretrained(str(tiny_chat_model), dtype=torch.bfloat16).to(device)
        engine = HFEngine(model, AutoTokenizer.from_pretrained(str(tiny_chat_model)))
        sync = EngineWeightSync(cfg, policy, engine, runner)
        sync.prepare()
        with torch.no_grad():
            for p in policy.worker.model.parameters():
                p.add_(0.5)  # as an optimizer step: the engine's weights must change
        TRANSFERS.update(to_host=0, to_device=0)
        assert policy.worker.write_borrowed_weights() is lends  # what the worker does after its optimizer step
        sync.sync()
        assert TRANSFERS == {"to_host": 0, "to_device": 0}, "the weights went through the host"
        assert (sync.backend, sync.shared, sync.lent) == ("inprocess", False, lends)
        assert (sync.bytes_last == 0) is lends
        policy_state = {k: v.detach().cpu() for k, v in policy.worker.model.state_dict().items()}
        engine_state = {k: v.detach() for k, v in engine.model.state_dict().items()}
        assert all(is_on_device(v) for v in engine_state.values())
        engine_state = {k: v.cpu() for k, v in engine_state.items()}
    runner.close()
    engine.close()
    for name, value in engine_state.items():
        assert value.dtype == torch.bfloat16
        torch.testing.assert_close(value, policy_state[name].to(torch.bfloat16), msg=lambda m: f"{name}: {m}")


def test_an_auto_engine_decodes_in_bf16_where_the_hardware_computes_it_and_receives_the_policys_weights(
        tiny_chat_model, toy_data, tmp_path):
    from skygym_adapters.models import computes_bf16_natively

    expected = torch.bfloat16 if computes_bf16_natively() else torch.float32  # this CPU: AVX512-BF16 or AMX
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
        "generator.model_dtype": "auto", "trainer.max_training_steps": 1}))
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        assert _engine(trainer).weight_dtype == expected
        before = _engine_state(trainer)
        trainer.fit()
        policy = trainer.policy.call("full_state_dict")[0]
        after = _engine_state(trainer)
    assert any(not torch.equal(before[k], after[k]) for k in before), "the engine's weights did not change"
    for name, value in after.items():
        assert value.dtype == expected
        torch.testing.assert_close(value, policy[name].to(expected), msg=lambda m: f"{name}: {m}")


@pytest.mark.slow
def test_one_ray_cpu_worker_shares_its_weights_through_shared_memory(tiny_chat_model, toy_data, tmp_path, ray_cluster):
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
        "trainer.use_ray": "true", "trainer.num_cpu_workers": 1, "trainer.max_training_steps": 2,
    }))
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        before = _engine_state(trainer)
        result = trainer.fit()
        sync = trainer._weight_sync
        assert (sync.backend, sync.shared, sync.bytes_last) == ("shm", True, 0)
        assert _engine(trainer).shares_weights()
        _assert_engine_is_policy(trainer, before)
        assert all(h["policy/grad_norm"] > 0 for h in result["history"] if "policy/grad_norm" in h)


def _broadcast_pair(state, dtype, bucket_bytes):
    """Send ``state`` from a real gloo rank 0 to rank 1 (two threads of this process)."""
    port = free_port()
    received, sent = {}, {}

    def receiver():
        group = BroadcastGroup("gloo", "127.0.0.1", port, 1, 2)
        received["pairs"] = [(n, t.clone()) for n, t in receive_state_dict(group)]

    thread = threading.Thread(target=receiver)
    thread.start()
    group = BroadcastGroup("gloo", "127.0.0.1", port, 0, 2)
    sent["bytes"] = send_state_dict(group, state, dtype, bucket_bytes)
    thread.join(timeout=60)
    return dict(received["pairs"]), sent["bytes"]


def test_the_broadcast_sends_buckets_in_the_engines_dtype():
    torch.manual_seed(0)
    state = {f"layer{i}.weight": torch.randn(64, 32) for i in range(5)}
    state["steps"] = torch.arange(7)  # not floating: travels as it is
    buckets = plan_buckets(state, torch.bfloat16, bucket_bytes=64 * 32 * 2 * 2)
    assert len(buckets) == 4  # 5 weights, two per bucket, plus the int64 tensor's own
    got, sent = _broadcast_pair(state, torch.bfloat16, bucket_bytes=64 * 32 * 2 * 2)
    assert set(got) == set(state)
    for name, value in state.items():
        expected = value.to(torch.bfloat16) if value.is_floating_point() else value
        assert got[name].dtype == expected.dtype and torch.equal(got[name], expected), name
    assert sent == 5 * 64 * 32 * 2 + 8 * 8  # bf16 weights; 7 int64 aligned to 64 bytes
