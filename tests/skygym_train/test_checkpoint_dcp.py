"""Training checkpoints as SkyRL-train writes them: each rank's shards through torch.distributed.checkpoint, loads
that never run code from the folder, transformers' LR schedules and peft's own LoRA merge."""

from __future__ import annotations

import copy
import enum
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from skygym_train import checkpoint as ckpt
from skygym_train.algorithms import POLICY_LOSSES
from skygym_train.config import ConfigError, load_config
from skygym_train.config.schema import AlgorithmConfig, LoraConfig, OptimizerConfig
from skygym_train.workers.batch import build_batch
from skygym_train.workers.fsdp_worker import WorkerSpec
from skygym_train.workers.group import LocalWorkerGroup, RayWorkerGroup
from tests.tiny_models import CHAT_MODEL


def _batch():
    prompts = [[1, 2, 3], [4, 5], [7, 8, 9, 10], [11]]
    responses = [[6, 7, 12], [8, 9, 10], [6], [13, 14]]
    masks = [[1, 1, 1], [1, 1, 1], [1], [1, 0]]
    batch = build_batch(prompts, responses, masks, pad_token_id=0, uids=["a", "a", "b", "b"])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [0.5, 0.0, 0.0], [-0.5, -0.5, 0.0]])
    return batch.with_tensors(advantages=advantages * batch.tensors["response_mask"])


def _spec(model_dir, scheduler="cosine", warmup=1, steps=4, lora=None):
    return WorkerSpec(
        "policy",
        str(model_dir),
        optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.0, scheduler=scheduler, num_warmup_steps=warmup),
        lora=lora,
        micro_train_batch_size=2,
        micro_forward_batch_size=2,
        total_training_steps=steps,
    )


def _started(group):
    group.call("load_model")
    group.call("configure_algorithm", AlgorithmConfig(), POLICY_LOSSES.get("regular"), 1.0)
    return group


# ------------------------------------------------------------------------------------------ sharded state


@pytest.mark.slow
@pytest.mark.timeout(300)  # a rank out of step with the other hangs in a collective: fail instead
def test_two_ranks_write_their_own_shards_and_one_process_continues_from_them(tiny_lm_dir, ray_cluster, tmp_path):
    from ray.util.placement_group import remove_placement_group

    from skygym_train.ray_utils import create_placement_group

    folder = tmp_path / "policy"
    pg = create_placement_group(2, use_gpu=False)
    sharded = RayWorkerGroup(_spec(tiny_lm_dir), 2, pg)
    try:
        _started(sharded)
        sharded.train_step(_batch())
        sharded.call("save_training_state", str(folder))
        saved_weights = sharded.call("full_state_dict")[0]
    finally:
        sharded.shutdown()
        remove_placement_group(pg)

    # one file per rank, each with its half of the weights and Adam's moments: no rank wrote everything
    sizes = {path.name: path.stat().st_size for path in folder.glob("*.distcp")}
    assert sorted(sizes) == ["__0_0.distcp", "__1_0.distcp"]
    assert min(sizes.values()) > 0.3 * sum(sizes.values())

    # one process (no process group) loads the two ranks' shards ...
    resumed = _started(LocalWorkerGroup(_spec(tiny_lm_dir)))
    resumed.call("load_training_state", str(folder))
    loaded = resumed.worker.full_state_dict()
    for name, value in saved_weights.items():
        torch.testing.assert_close(loaded[name], value, atol=0, rtol=0, msg=lambda m: f"{name}: {m}")
    assert resumed.worker.global_step == 1
    # ... and its next step is the one an uninterrupted run takes (two ranks step as one process does:
    # workers/test_fsdp_data_parallel.py), so Adam's moments and the schedule came back too, not just the weights
    straight = _started(LocalWorkerGroup(_spec(tiny_lm_dir)))
    straight.train_step(_batch())
    straight_next = straight.train_step(_batch())
    resumed_next = resumed.train_step(_batch())
    assert resumed_next["policy/lr"] == pytest.approx(straight_next["policy/lr"])
    expected = straight.worker.full_state_dict()
    for name, value in resumed.worker.full_state_dict().items():
        torch.testing.assert_close(value, expected[name], atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


# ------------------------------------------------------------------------------------------ safe loads


class _WritesAMarker:
    """What a hostile checkpoint file holds: unpickling it would create ``path``."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _checkpoint_with_shards(root: Path) -> Path:
    return ckpt.save_checkpoint(
        root, 1, {"policy": lambda folder: ckpt.save_sharded({"w": torch.ones(3)}, folder), "critic": {"w": torch.ones(2)}},
        {"global_step": 1},
    )


@pytest.mark.parametrize(
    "replaced, load",
    [
        (ckpt.TRAINER_STATE_FILE, lambda folder: ckpt.load_trainer_state(folder)),
        ("critic.pt", lambda folder: ckpt.load_worker_state(folder, "critic")),
        ("policy/.metadata", lambda folder: ckpt.load_sharded({"w": torch.zeros(3)}, folder / "policy")),
    ],
)
def test_a_file_that_would_run_code_is_refused_by_name_and_never_runs(tmp_path, replaced, load):
    folder = _checkpoint_with_shards(tmp_path / "ckpts")
    marker = tmp_path / "marker"
    target = folder / replaced
    if target.name == ".metadata":
        target.write_bytes(pickle.dumps(_WritesAMarker(marker)))
    else:
        torch.save({"global_step": 1, "payload": _WritesAMarker(marker)}, target)
    resumed_from = ckpt.latest_checkpoint(tmp_path / "ckpts")
    assert resumed_from == folder
    with pytest.raises(ckpt.UnsafeCheckpointError, match=str(target)):
        load(resumed_from)
    assert not marker.exists()


@pytest.mark.parametrize("elsewhere", ["../../../other/global_step_1/policy/{file}", "{other}/{file}", ".."])
def test_metadata_that_reads_tensors_from_outside_the_checkpoint_is_refused(tmp_path, elsewhere):
    """DCP joins each tensor's ``relative_path`` to the folder as written: a downloaded checkpoint's .metadata
    pointing at ``../`` or an absolute path loaded another run's tensors (or a device file) into the policy."""
    folder = _checkpoint_with_shards(tmp_path / "ckpts")
    other = ckpt.save_checkpoint(tmp_path / "other", 1, {
        "policy": lambda f: ckpt.save_sharded({"w": torch.full((3,), 7.0)}, f)}, {"global_step": 1}) / "policy"
    metadata_file = folder / "policy" / ".metadata"
    metadata = pickle.loads(metadata_file.read_bytes())
    for info in metadata.storage_data.values():
        info.relative_path = elsewhere.format(file=info.relative_path, other=other)
    metadata_file.write_bytes(pickle.dumps(metadata))
    state = {"w": torch.zeros(3)}
    with pytest.raises(ckpt.UnsafeCheckpointError, match="not a file in the checkpoint's folder"):
        ckpt.load_sharded(state, folder / "policy")
    assert state["w"].tolist() == [0.0, 0.0, 0.0]
    ckpt.load_sharded(state, other)  # a checkpoint as written loads
    assert state["w"].tolist() == [7.0, 7.0, 7.0]


class _Stop(str, enum.Enum):
    LENGTH = "length"


def test_trainer_state_and_random_states_round_trip_through_the_safe_loader(tmp_path):
    history = [{"reward/mean": np.float64(0.5), "lengths": np.array([3, 4]), "stop": _Stop.LENGTH}]
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # leaves a cached Gaussian: part of the state too
    np.random.standard_normal()
    folder = ckpt.save_checkpoint(tmp_path, 1, {}, {"global_step": 1, "history": history})
    expected = (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.standard_normal(),
                torch.rand(3))

    state = ckpt.load_trainer_state(folder)
    assert state["history"] == [{"reward/mean": 0.5, "lengths": [3, 4], "stop": "length"}]
    ckpt.restore_rng_state(state["rng"])
    actual = (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.standard_normal(),
              torch.rand(3))
    assert actual[:4] == expected[:4]
    assert torch.equal(actual[4], expected[4])

    with pytest.raises(TypeError, match=r"trainer_state\.extra\.when"):
        ckpt.save_checkpoint(tmp_path, 2, {}, {"global_step": 2, "extra": {"when": object()}})


# ------------------------------------------------------------------------------------------ LR schedule


def test_the_logged_lr_is_transformers_schedule(tiny_lm_dir):
    from transformers import get_scheduler

    worker = _started(LocalWorkerGroup(_spec(tiny_lm_dir, scheduler="cosine", warmup=1, steps=4)))
    logged = [worker.train_step(_batch())["policy/lr"] for _ in range(4)]

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-2)
    schedule = get_scheduler("cosine", optimizer, num_warmup_steps=1, num_training_steps=4)
    expected = []
    for _ in range(4):
        optimizer.step()
        schedule.step()
        expected.append(schedule.get_last_lr()[0])
    assert logged == pytest.approx(expected, abs=1e-12)
    assert len(set(logged)) == 4  # warm-up, then a real decay


@pytest.fixture
def data_file(tmp_path: Path) -> str:
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply"}\n')
    return str(path)


def _with_scheduler(data_file: str, name: str):
    return load_config([f"data.train_data=[{data_file}]", f"trainer.policy.model.path={CHAT_MODEL}",
                        "trainer.use_ray=false", f"trainer.policy.optimizer_config.scheduler={name}"])


def test_scheduler_names_are_transformers_and_the_rest_are_refused_with_the_choices(data_file):
    from skygym_train.config.validation import _STANDARD_SCHEDULERS, schedulers

    assert _STANDARD_SCHEDULERS <= set(schedulers())  # the names accepted without importing transformers are real
    assert _with_scheduler(data_file, "cosine_with_restarts").trainer.policy.optimizer_config.scheduler == \
        "cosine_with_restarts"
    with pytest.raises(ConfigError, match=r"scheduler='cosinus': not a transformers scheduler; expected one of "
                                          r".*constant_with_warmup.*inverse_sqrt"):
        _with_scheduler(data_file, "cosinus")
    with pytest.raises(ConfigError, match=r"cosine_with_min_lr schedule needs min_lr"):
        _with_scheduler(data_file, "cosine_with_min_lr")


# ------------------------------------------------------------------------------------------ LoRA merge


def _tiny_gpt2(out: Path) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("gpt2", vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(str(out))
    return out


@pytest.mark.filterwarnings("ignore:fan_in_fan_out")
@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])  # gpt2: Conv1D layers store weights transposed (fan_in_fan_out)
def test_merged_weights_are_peft_merge_and_unload(tiny_lm_dir, tmp_path, arch):
    model_dir = tiny_lm_dir if arch == "qwen2" else _tiny_gpt2(tmp_path / "gpt2")
    worker = LocalWorkerGroup(_spec(model_dir, lora=LoraConfig(rank=4, alpha=8, target_modules="all-linear"))).worker
    worker.load_model()
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in worker.model.named_parameters():
            if "lora_B" in name:  # as after training: B starts at zero, which would make any merge look right
                param.normal_(std=0.5)

    live = worker.model.get_base_model()
    before = {k: v.clone() for k, v in live.state_dict().items() if k.endswith(".base_layer.weight")}
    assert before

    merged = worker.full_state_dict()
    expected = copy.deepcopy(worker.model).merge_and_unload().state_dict()
    assert set(merged) == set(expected)
    for name, value in expected.items():
        torch.testing.assert_close(merged[name], value, msg=lambda m: f"{name}: {m}")
    for name, value in before.items():
        assert not torch.allclose(merged[name.replace(".base_layer", "")], value), name  # the adapter is in
        assert torch.equal(live.state_dict()[name], value), name  # and the live model trains on, unmerged


@pytest.mark.slow
@pytest.mark.timeout(300)  # a rank out of step with the other hangs in a collective: fail instead
@pytest.mark.parametrize("kind", ["lora", "critic"])
def test_two_ranks_resume_lora_adapters_and_the_critic_to_the_same_next_step(tiny_lm_dir, two_bundles, tmp_path,
                                                                             kind):
    from dataclasses import replace

    spec = _spec(tiny_lm_dir)
    batch = _batch()
    if kind == "lora":  # only the adapters train: their shards and moments must come back
        spec = replace(spec, lora=LoraConfig(rank=4, alpha=8, target_modules="all-linear"))
    else:  # a value head on the body, with its own optimizer state
        spec = replace(spec, role="critic")
        mask = batch.tensors["response_mask"]
        batch = batch.with_tensors(values=torch.zeros_like(mask, dtype=torch.float32),
                                   returns=batch.tensors["advantages"].flip(1) * mask)
    folder = tmp_path / kind
    straight = _started(RayWorkerGroup(spec, 2, two_bundles))
    try:
        straight.train_step(batch)
        straight.call("save_training_state", str(folder))
        straight.train_step(batch)
        expected = straight.call("full_state_dict")[0]
    finally:
        straight.shutdown()
    resumed = _started(RayWorkerGroup(spec, 2, two_bundles))
    try:
        resumed.call("load_training_state", str(folder))
        resumed.train_step(batch)
        got = resumed.call("full_state_dict")[0]
    finally:
        resumed.shutdown()

    assert sorted(path.name for path in folder.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_a_resumed_run_keeps_its_own_adamw_kernel(tiny_lm_dir, tmp_path):
    """A checkpoint carries its optimizer's param groups, kernel flags included. A run that picked the fused kernel
    (on a GPU or the CPU) keeps it after loading a checkpoint written with the multi-tensor one, with the step
    counts moved where the fused kernel keeps them, and takes the step an uninterrupted run takes."""
    folder = tmp_path / "policy"
    straight = _started(LocalWorkerGroup(_spec(tiny_lm_dir)))
    chosen = straight.worker.optimizer.param_groups[0]  # _new_optimizer: fused, the parameters all on one device
    assert (chosen["fused"], chosen["foreach"]) == (True, None)
    for group in straight.worker.optimizer.param_groups:  # the multi-tensor kernel, as an older run chose it
        group["fused"], group["foreach"] = None, True
    straight.train_step(_batch())
    straight.call("save_training_state", str(folder))
    straight.train_step(_batch())

    resumed = _started(LocalWorkerGroup(_spec(tiny_lm_dir)))
    resumed.call("load_training_state", str(folder))
    optimizer = resumed.worker.optimizer
    assert all(group["fused"] is True and group["foreach"] is None for group in optimizer.param_groups)
    steps = [optimizer.state[p]["step"] for group in optimizer.param_groups for p in group["params"]]
    assert steps and all(step.dtype == torch.float32 and float(step) == 1.0 for step in steps)
    resumed.train_step(_batch())
    expected = straight.worker.full_state_dict()
    for name, value in resumed.worker.full_state_dict().items():
        torch.testing.assert_close(value, expected[name], atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
