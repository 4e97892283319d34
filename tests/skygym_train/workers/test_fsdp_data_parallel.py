"""FSDP2 across two CPU processes (gloo, as Ray actors) computes the same update as one process."""

from __future__ import annotations

import pytest
import torch

from skygym_train.algorithms import POLICY_LOSSES
from skygym_train.config.schema import AlgorithmConfig, OptimizerConfig
from skygym_train.workers.batch import build_batch
from skygym_train.workers.fsdp_worker import WorkerSpec
from skygym_train.workers.group import LocalWorkerGroup, RayWorkerGroup


def _batch():
    prompts = [[1, 2, 3], [4, 5], [7, 8, 9, 10], [11]]
    responses = [[6, 7, 12], [8, 9, 10], [6], [13, 14]]
    masks = [[1, 1, 1], [1, 1, 1], [1], [1, 0]]
    batch = build_batch(prompts, responses, masks, pad_token_id=0, uids=["a", "a", "b", "b"])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [0.5, 0.0, 0.0], [-0.5, -0.5, 0.0]])
    return batch.with_tensors(advantages=advantages * batch.tensors["response_mask"])


def _spec(model_dir, max_tokens_per_microbatch=-1):
    return WorkerSpec(
        "policy",
        str(model_dir),
        optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.0),
        micro_train_batch_size=2,
        micro_forward_batch_size=2,
        max_tokens_per_microbatch=max_tokens_per_microbatch,
    )


@pytest.mark.slow
@pytest.mark.timeout(300)  # a rank out of step with the other hangs in a collective: fail instead
@pytest.mark.parametrize(
    "budget",
    # 8 tokens: rank 0's rows (6 and 5 tokens) need two micro-batches, rank 1's (5 and 3) one, so rank 1
    # must join rank 0's second pass with an empty one or FSDP's collectives would hang
    [-1, 8],
)
def test_two_gloo_ranks_match_one_process(tiny_lm_dir, ray_cluster, budget):
    from ray.util.placement_group import remove_placement_group

    from skygym_train.ray_utils import create_placement_group

    algo = AlgorithmConfig()
    loss_fn = POLICY_LOSSES.get("regular")

    single = LocalWorkerGroup(_spec(tiny_lm_dir, budget))
    single.call("load_model")
    single.call("configure_algorithm", algo, loss_fn, 1.0)
    single_forward = single.forward(_batch())
    single_metrics = single.train_step(_batch())
    single_weights = single.worker.full_state_dict()

    pg = create_placement_group(2, use_gpu=False)
    group = RayWorkerGroup(_spec(tiny_lm_dir, budget), 2, pg)
    try:
        group.call("load_model")
        assert group.call("ping") == [0, 1]
        group.call("configure_algorithm", algo, loss_fn, 1.0)
        sharded_forward = group.forward(_batch())
        sharded_metrics = group.train_step(_batch())
        sharded_weights = group.call("full_state_dict")[0]
    finally:
        group.shutdown()
        remove_placement_group(pg)

    torch.testing.assert_close(sharded_forward["log_probs"], single_forward["log_probs"], atol=1e-5, rtol=1e-5)
    assert sharded_metrics["policy/loss"] == pytest.approx(single_metrics["policy/loss"], abs=1e-5)
    assert sharded_metrics["policy/grad_norm"] == pytest.approx(single_metrics["policy/grad_norm"], rel=1e-4)
    assert set(sharded_weights) == set(single_weights)
    for name, value in single_weights.items():
        torch.testing.assert_close(sharded_weights[name], value, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    # the step really moved the weights
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(str(tiny_lm_dir)).state_dict()
    assert any(not torch.allclose(initial[k], single_weights[k]) for k in initial)


def test_a_local_group_closes_the_process_group_its_worker_opened(tiny_lm_dir):
    """On a GPU a one-process worker opens a process group (NCCL's). The trainer's close shuts its groups down:
    a ``LocalWorkerGroup`` had no ``shutdown``, the group stayed open, and every GPU run, Ctrl-C'd or not, ended
    with PyTorch's warning that ``destroy_process_group()`` was not called (after the run's last line). A group
    the worker found open is not its own: an in-process vLLM engine opens one that its next engine still uses."""
    import torch.distributed as dist

    from skygym_train.weight_sync import free_port

    if dist.is_initialized():  # a one-rank CUDA worker of an earlier test in this process left its group
        dist.destroy_process_group()
    try:
        for opened_by_the_worker in (True, False):
            group = LocalWorkerGroup(_spec(tiny_lm_dir))
            # what the worker's init_process_group does on a GPU (NCCL there; gloo on this CPU), or another's
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
            group.worker._owns_process_group = opened_by_the_worker
            group.shutdown()
            assert dist.is_initialized() is not opened_by_the_worker
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
