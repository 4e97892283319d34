"""The trainer's tensors follow the device of the data they meet, checked on a CPU-only machine.

``tests.device_emulation`` makes the ``meta`` device stand for a GPU: real values, but an op that mixes it
with a CPU tensor fails as it would on CUDA. A worker's forward pass and training step, the advantage
estimators and the policy losses run there and must give what they give on the CPU. (The first GPU training
step crashed on a packing index left on the CPU; these tests fail on that code.)
"""

from __future__ import annotations

import pytest
import torch

from skygym_train.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from skygym_train.algorithms.policy_losses import value_loss
from skygym_train.config.schema import AlgorithmConfig, OptimizerConfig
from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec
from skygym_train.workers.packing import layout
from tests.device_emulation import DeviceMismatch, emulated_device, is_on_device, on_device
from tests.skygym_train.workers.test_packing import _grouped_batch


def test_the_emulated_device_fails_where_cuda_fails_and_passes_where_it_passes():
    with emulated_device() as device:
        x = torch.arange(12.0, device=device).reshape(4, 3)
        assert is_on_device(x) and x.device == device
        with pytest.raises(DeviceMismatch):
            x.index_select(0, torch.tensor([0, 2]))  # the packing crash
        with pytest.raises(DeviceMismatch):
            x + torch.ones(4, 3)
        assert float((x * torch.tensor(2.0)).sum()) == 132.0  # 0-dim CPU tensors are fine, as on CUDA
        assert x[torch.tensor([0, 2])].shape == (2, 3)  # a CPU index in advanced indexing too
        with pytest.raises(DeviceMismatch):
            torch.arange(4.0)[torch.tensor([0, 2], device=device)]  # but not a device index into a CPU tensor
        y = torch.arange(3).to(device, torch.float32)  # the device given by position
        assert is_on_device(y) and y.dtype == torch.float32 and y.tolist() == [0.0, 1.0, 2.0]
        assert torch.equal(x.cpu(), torch.arange(12.0).reshape(4, 3)) and not is_on_device(x.cpu())


def _worker(model_dir, role, packing, device=None):
    spec = WorkerSpec(role=role, model_path=str(model_dir), optimizer=OptimizerConfig(lr=1e-3),
                      micro_train_batch_size=4, micro_forward_batch_size=4)
    worker = TrainingWorker(spec)
    worker.device = device if device is not None else torch.device("cpu")  # the CPU reference, GPU or not
    worker.load_model()
    worker.layout = packing
    algo = AlgorithmConfig(use_kl_loss=True, use_entropy_loss=True)
    worker.configure_algorithm(algo, POLICY_LOSSES.get("regular"), 0.7)
    return worker


def _training_batch():
    batch = _grouped_batch(seed=5)
    B, T = batch.size, batch.response_length
    return batch.with_tensors(
        advantages=torch.linspace(-1, 1, B)[:, None].expand(-1, T).contiguous(),
        old_log_probs=torch.full((B, T), -4.0),
        ref_log_probs=torch.full((B, T), -4.1),
        values=torch.zeros(B, T),
        returns=torch.linspace(0, 1, B)[:, None].expand(-1, T).contiguous(),
    )


@pytest.mark.parametrize("packing", ["shared_prefix", "varlen", "padded"])
@pytest.mark.parametrize("role", ["policy", "critic"])
def test_a_worker_step_on_a_device_gives_the_cpu_step(tiny_lm_dir, role, packing):
    _assert_device_step_is_cpu_step(tiny_lm_dir, role, packing)


@pytest.mark.parametrize("packing", ["shared_prefix", "varlen", "padded"])
def test_a_step_on_grouped_attention_follows_the_device(tmp_path, packing, monkeypatch):
    """With 8 query heads over 2 key/value heads the worker's attention folds each group onto its key/value head
    in training (``hf_attention.mask_per_group``, one mask for every head): the folded mask is made on the
    device of the mask it repeats, and the step gives the CPU's."""
    from skygym_adapters.engines import hf_attention
    from tests.skygym_train.conftest import write_tiny_lm

    model_dir = write_tiny_lm(tmp_path, hidden_size=512, num_attention_heads=8, num_key_value_heads=2)
    folds = []
    fold = hf_attention.mask_per_group
    monkeypatch.setattr(hf_attention, "mask_per_group", lambda *args: folds.append(fold(*args)) or folds[-1])
    _assert_device_step_is_cpu_step(model_dir, "policy", packing, updates=False)
    assert folds and any(is_on_device(f) for f in folds), "the grouped attention never folded on the device"


def _assert_device_step_is_cpu_step(model_dir, role, packing, updates=True):
    """The worker's forward pass and training step on the emulated device give the CPU's values, and the same
    update (``updates``) or, where Adam's normalisation of gradients that are 0 but for rounding would magnify
    the two attention kernels' rounding, the same gradients."""
    batch = _training_batch()
    cpu = _worker(model_dir, role, packing)
    expected_forward, expected_step = cpu.forward(batch), cpu.train_step(batch)
    with emulated_device() as device:
        worker = _worker(model_dir, role, packing, device)
        assert all(is_on_device(p) for p in worker.model.parameters())
        got_forward, got_step = worker.forward(batch), worker.train_step(batch)
        after = {name: (p.detach() if updates else p.grad).cpu() for name, p in worker.model.named_parameters()}
    for key, value in expected_forward.items():
        torch.testing.assert_close(got_forward[key], value, atol=1e-5, rtol=1e-5)
        assert not is_on_device(got_forward[key])  # results come back to the host for the driver
    assert expected_step[f"memory/{role}_peak_gib"] > 0  # on CPU the process's peak RSS
    for key, value in expected_step.items():
        if not key.startswith(("timing/", "memory/")):
            assert got_step[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    for name, p in cpu.model.named_parameters():
        if updates:
            torch.testing.assert_close(after[name], p.detach(), atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
        else:
            torch.testing.assert_close(after[name], p.grad, rtol=1e-4, atol=1e-7, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("role", ["policy", "critic"])
def test_a_training_step_reads_its_metrics_from_the_device_once_whatever_its_micro_batches(tiny_lm_dir, role):
    """Each micro-batch's loss metrics (loss, entropy, KL, clip fractions) were read with ``float()`` between its
    forward and backward passes: on a GPU each read waits for the forward pass to finish before the backward one
    is queued, 5-7 times a micro-batch. They stay on the device until the step's end (``read_metrics``): the values
    read are the same, and the number of reads does not grow with the micro-batches. (In the trainer's layout:
    transformers' own mask code reads the padding mask once or twice a forward pass in the padded and varlen ones.)"""
    from tests.device_emulation import READS

    batch = _training_batch()
    reads, steps = {}, {}
    for micro in (batch.size, 2):
        with emulated_device() as device:
            worker = _worker(tiny_lm_dir, role, "shared_prefix", device)
            worker.spec.micro_train_batch_size = micro
            before = READS["scalars"]
            steps[micro] = worker.train_step(batch)
            reads[micro] = READS["scalars"] - before
    assert batch.size // 2 >= 3  # several micro-batches against one
    assert reads[2] == reads[batch.size], reads
    # (the values are the CPU's: test_a_worker_step_on_a_device_gives_the_cpu_step)
    assert steps[2].keys() == steps[batch.size].keys() and all(isinstance(v, float) for v in steps[2].values())
    assert f"{role}/{'pg_loss' if role == 'policy' else 'value_loss'}" in steps[2]


def test_metrics_are_read_in_one_copy_and_keep_their_order():
    from skygym_train.workers.fsdp_worker import read_metrics
    from tests.device_emulation import READS, TRANSFERS

    with emulated_device() as device:
        metrics = {"b": torch.tensor(0.25, device=device), "a": 3, "c": torch.tensor(2.0, device=device) * 2}
        before, reads_before = dict(TRANSFERS), READS["scalars"]
        read = read_metrics(metrics)
        assert READS["scalars"] == reads_before
        assert TRANSFERS["to_host"] - before["to_host"] == 2 * 8  # one copy of two float64 values
    assert list(read.items()) == [("b", 0.25), ("a", 3.0), ("c", 4.0)]
    assert read_metrics({}) == {}
    with emulated_device() as device:  # a user's loss may make a metric on the host beside the device's
        mixed = {"on_device": torch.tensor(0.5, device=device), "on_host": torch.tensor(2.0)}
        assert read_metrics(mixed) == {"on_device": 0.5, "on_host": 2.0}


@pytest.mark.parametrize("name", ADVANTAGE_ESTIMATORS.names())
def test_advantage_estimators_keep_the_device_of_their_inputs(name):
    torch.manual_seed(0)
    B, T = 6, 5
    inputs = dict(token_level_rewards=torch.randn(B, T), response_mask=(torch.rand(B, T) > 0.2).float(),
                  values=torch.randn(B, T))
    kwargs = dict(index=["a", "a", "a", "b", "b", "b"], config=AlgorithmConfig())
    expected = ADVANTAGE_ESTIMATORS.get(name)(**inputs, **kwargs)
    with emulated_device():
        got = ADVANTAGE_ESTIMATORS.get(name)(**{k: on_device(v) for k, v in inputs.items()}, **kwargs)
        assert all(is_on_device(x) for x in got)
        got = [x.cpu() for x in got]
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_policy_losses_keep_the_device_of_their_inputs(name):
    torch.manual_seed(0)
    B, T = 4, 6
    mask = (torch.rand(B, T) > 0.3).float()
    inputs = [torch.randn(B, T) - 3, torch.randn(B, T) - 3, torch.randn(B, T), mask]
    expected, expected_metrics = POLICY_LOSSES.get(name)(*inputs, AlgorithmConfig())
    with emulated_device():
        loss, metrics = POLICY_LOSSES.get(name)(*[on_device(x) for x in inputs], AlgorithmConfig())
        assert is_on_device(loss)
        value = float(loss)
        values = on_device(torch.randn(B, T))
        critic_loss, _ = value_loss(values, on_device(inputs[2]), on_device(inputs[0]), on_device(inputs[3]),
        0.2)
        assert is_on_device(critic_loss)
    assert value == pytest.approx(float(expected), rel=1e-5)
    assert metrics.keys() == expected_metrics.keys()


@pytest.mark.parametrize("packing", ["shared_prefix", "varlen"])
def test_packed_outputs_are_gathered_on_their_own_device(packing):
    from tests.device_emulation import TRANSFERS

    batch = _grouped_batch()
    rows = layout(packing, batch.tensors, batch.prompt_length)
    columns = rows.num_tokens
    with emulated_device() as device:
        outputs = torch.randn(rows.input_ids.shape[0], columns // rows.input_ids.shape[0], 3, device=device)
        gathered = rows.gather(rows.kept(outputs))
        assert is_on_device(gathered) and gathered.shape == (batch.size, batch.response_length, 3)
        # the worker's order: the inputs go to the device, then the forward pass, which copies nothing from the host
        # (a copy there makes the host wait for every layer queued before it)
        rows.model_inputs(device)
        before = TRANSFERS["to_device"]
        again = rows.gather(rows.kept(outputs))
        assert TRANSFERS["to_device"] == before and torch.equal(again.cpu(), gathered.cpu())


@pytest.mark.parametrize("engine_dtype", ["float32", "bfloat16"])
def test_a_training_run_on_a_device_gives_the_cpu_run(tiny_chat_model, toy_data, tmp_path, monkeypatch, engine_dtype):
    """Two PPO steps (a critic, KL to the reference) without Ray, every model in this process beside the HF engine,
    on the emulated device: generation (sampling, log-probs and stop checks on the device, read back every 16 tokens
    as on a GPU), rewards, weight sync (the engine reads the policy's fp32 tensors, or gets a bf16 copy made on the
    device), the reference and critic passes and the updates must leave the engine with the policy's weights and,
    in fp32, give the CPU run's rewards and losses (a bf16 engine's logits differ from the CPU's by rounding where
    the emulation runs other kernels, enough to sample other tokens). A tensor of the run's left on the host where
    it meets the device's fails it."""
    from skygym_adapters.engines.hf import HFEngine
    from skygym_train.config import load_config
    from skygym_train.trainer import PPOTrainer
    from skygym_train.workers.fsdp_worker import TrainingWorker
    from tests.skygym_train.toy_envs import toy_overrides

    def run(device, folder):
        cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path / folder, **{
            "trainer.max_training_steps": 2, "trainer.algorithm.advantage_estimator": "gae",
            "trainer.algorithm.use_kl_loss": "true", "generator.sampling_params.max_generate_length": 24,
            "generator.model_dtype": engine_dtype}))
        steps = []
        with PPOTrainer(cfg) as trainer:
            trainer.setup()
            assert trainer.policy.worker.device == trainer.critic.worker.device == trainer.ref.worker.device == device
            engine = _engine_of(trainer)
            assert engine.device == device
            # the same random numbers from here on: building a model on the emulated device (``meta``, where
            # transformers makes its skeletons) draws some that a CPU load does not
            torch.manual_seed(0)
            trainer.fit(on_step=lambda step, metrics: steps.append(dict(metrics)))
            assert trainer._weight_sync.shared == (engine_dtype == "float32")
            for name, value in trainer.policy.worker.model.state_dict().items():
                mine = engine.model.state_dict()[name]
                assert is_on_device(mine) == (device != torch.device("cpu")), name
                torch.testing.assert_close(mine.cpu(), value.cpu().to(mine.dtype), msg=lambda m: f"{name}: {m}")
        return steps

    worker_init, engine_init = TrainingWorker.__init__, HFEngine.__init__

    def place_models_on(device):  # the CPU reference too, GPU or not
        def placed_worker(self, *args, **kwargs):
            worker_init(self, *args, **kwargs)
            self.device = device

        monkeypatch.setattr(TrainingWorker, "__init__", placed_worker)
        monkeypatch.setattr(HFEngine, "__init__", lambda self, *a, **kw: engine_init(self, *a, **{**kw, "device": device}))

    place_models_on(torch.device("cpu"))
    expected = run(torch.device("cpu"), "cpu")
    with emulated_device(threads=True) as device:
        place_models_on(device)
        got = run(device, "device")
    assert len(got) == len(expected) == 2
    for metrics in got:  # the GPU's peak up to the end of generation is logged where the models are on a GPU:
        assert "memory/peak_generate_gib" not in metrics  # not the emulated device's, CUDA present or not
    if engine_dtype != "float32":
        return
    for step, (mine, theirs) in enumerate(zip(got, expected), start=1):
        for key in ("reward/mean", "policy/loss", "policy/grad_norm", "policy/kl_loss", "critic/value_loss",
                    "critic/grad_norm"):
            assert key in theirs, f"step {step} logged no {key}"
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), (step, key)


def _engine_of(trainer):
    from skygym_adapters.engines.client import engines_behind

    (engine,) = engines_behind(trainer.engine)
    return engine
