"""A gated MLP's activation recomputed in the backward pass (``workers/activations.py``): bitwise the same losses and
gradients, one intermediate-width tensor per token and layer less kept."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from skygym_train.workers.activations import GATED_MLPS, recompute_gated_activations


def _model(architecture: str = "qwen2", layers: int = 2, **extra) -> torch.nn.Module:
    config = AutoConfig.for_model(architecture, vocab_size=64, hidden_size=32, intermediate_size=96,
                                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, **extra)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor):
    model.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("architecture,extra", [("qwen2", {}), ("llama", {}),
                                                ("gemma", {"hidden_activation": "gelu_pytorch_tanh"})])
def test_recomputing_the_activation_gives_bitwise_the_same_loss_and_gradients(architecture, extra):
    plain = _model(architecture, **extra)
    patched = copy.deepcopy(plain)
    assert type(patched.model.layers[0].mlp).__name__ in GATED_MLPS
    assert recompute_gated_activations(patched) == 2
    ids = torch.randint(0, 64, (3, 17), generator=torch.Generator().manual_seed(1))
    loss_a, grads_a = _loss_and_grads(plain, ids)
    loss_b, grads_b = _loss_and_grads(patched, ids)
    assert torch.equal(loss_a, loss_b)
    for name, grad in grads_a.items():
        assert torch.equal(grad, grads_b[name]), name
    with torch.no_grad():  # inference: no recomputation to arrange, the same logits
        assert torch.equal(plain(input_ids=ids).logits, patched(input_ids=ids).logits)
    assert recompute_gated_activations(patched, enabled=False) == 2  # their own forward back
    assert not any("forward" in vars(layer.mlp) for layer in patched.model.layers)


def test_the_mlp_keeps_one_intermediate_tensor_less_for_the_backward_pass():
    """The peak of live memory in a training step, counted by torch's memory tracker: per MLP and token one
    activation of the intermediate width less (here 96 floats), but for the one the last layer recomputes while the
    others are still kept."""
    from torch.distributed._tools.mem_tracker import MemTracker

    tokens = 4 * 256
    ids = torch.randint(0, 64, (4, 256), generator=torch.Generator().manual_seed(2))
    peaks = []
    for patch in (False, True):
        model = _model(layers=4)
        if patch:
            recompute_gated_activations(model)
        tracker = MemTracker()
        tracker.track_external(model)
        with tracker:
            model(input_ids=ids, labels=ids).loss.backward()
        peaks.append(sum(snap.get("Total", 0) for snap in tracker.get_tracker_snapshot("peak").values()))
    saved = peaks[0] - peaks[1]
    per_layer_activation = tokens * 96 * 4  # one fp32 (tokens, intermediate) tensor
    assert 3 * per_layer_activation <= saved <= 4 * per_layer_activation, (saved, per_layer_activation)


def test_only_known_gated_mlps_are_given_the_recomputing_forward():
    from transformers import AutoModel

    model = _model()
    body = AutoModel.from_config(model.config)  # a critic's body: its MLPs too
    assert recompute_gated_activations(body) == 2
    assert all("forward" in vars(layer.mlp) for layer in body.layers)
    gpt2 = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", n_layer=1, n_embd=32, n_head=2,
                                                                 vocab_size=64))
    assert recompute_gated_activations(gpt2) == 0  # no gate: left as it is


@pytest.mark.parametrize("role,checkpointing,expected", [("policy", False, True), ("critic", False, True),
                                                         ("policy", True, False), ("ref", False, False)])
def test_the_trainer_recomputes_activations_of_the_models_it_trains(tiny_lm_dir, role, checkpointing, expected):
    """The policy and critic get it; not with gradient checkpointing (which recomputes whole layers), nor the
    reference model (no backward pass)."""
    from skygym_train.config.schema import OptimizerConfig
    from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec

    worker = TrainingWorker(WorkerSpec(role=role, model_path=str(tiny_lm_dir), optimizer=OptimizerConfig(lr=1e-3),
                                       gradient_checkpointing=checkpointing))
    worker.load_model()
    layers = [m for m in worker.model.modules() if type(m).__name__ == "Qwen2MLP"]
    assert layers and all(("forward" in vars(mlp)) == expected for mlp in layers)
