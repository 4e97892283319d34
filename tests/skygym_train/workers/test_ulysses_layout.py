"""Ulysses without an (S, S) mask: rows shifted to start at their first real token run plain causal attention
and give the padded layout's log-probs and values. One rank in a gloo group of its own runs the whole
sequence through the sequence-parallel path (all-to-alls of one), so this needs neither Ray nor a second
process; two ranks are checked by test_sequence_parallel."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from skygym_train.config.schema import AlgorithmConfig, OptimizerConfig
from skygym_train.weight_sync import free_port
from skygym_train.workers import ulysses
from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec
from tests.skygym_train.workers.test_packing import _grouped_batch


def test_left_aligned_rows_keep_every_real_token_and_its_position():
    ids = torch.tensor([[0, 0, 5, 6, 7, 0], [3, 4, 5, 6, 0, 0]])
    mask = (ids != 0).long()
    positions = (mask.cumsum(1) - 1).clamp_min(0)
    shifted, moved_positions, shift = ulysses.left_aligned(ids, mask, positions)
    assert shift.tolist() == [2, 0]
    assert shifted.tolist() == [[5, 6, 7, 0, 0, 0], [3, 4, 5, 6, 0, 0]]
    real = shifted != 0
    assert moved_positions[real].tolist() == [0, 1, 2, 0, 1, 2, 3]  # padding's positions are never read


@pytest.fixture
def one_rank_group(monkeypatch):
    if dist.is_initialized():  # a one-rank CUDA worker of an earlier test in this process left its group
        dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    group = dist.new_group([0])
    monkeypatch.setattr(ulysses, "new_groups", lambda world, size, rank: (group, 0))
    yield group
    dist.destroy_process_group()


@pytest.mark.parametrize("role", ["policy", "critic"])
def test_the_sequence_parallel_path_gives_the_padded_layouts_outputs(tiny_lm_dir, one_rank_group, role):
    def worker(sequence_parallel_size):
        spec = WorkerSpec(role=role, model_path=str(tiny_lm_dir), optimizer=OptimizerConfig(lr=1e-3),
                          micro_forward_batch_size=64, sample_packing=False,
                          sequence_parallel_size=sequence_parallel_size)
        w = TrainingWorker(spec)
        w.device = torch.device("cpu")  # the gloo group's device, GPU or not
        w.load_model()
        w.configure_algorithm(AlgorithmConfig(), None, 0.8)
        return w

    batch = _grouped_batch(seed=2)
    plain, parallel = worker(1), worker(2)  # 2: the Ulysses path, over this one-rank group
    assert parallel._sp_group is one_rank_group and plain._sp_group is None
    expected, got = plain.forward(batch), parallel.forward(batch)
    mask = batch.tensors["response_mask"].bool()
    for key in expected:
        torch.testing.assert_close(got[key][mask], expected[key][mask], atol=1e-5, rtol=1e-5)
