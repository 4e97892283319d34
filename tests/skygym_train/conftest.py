"""Fixtures for the trainer tests: a tiny random causal LM (a real Qwen2 architecture) on disk."""

from __future__ import annotations

from pathlib import Path

import pytest


def write_tiny_lm(out: Path, vocab_size: int = 64, seed: int = 0, **config_overrides) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, max_position_embeddings=256, tie_word_embeddings=True)
    config = AutoConfig.for_model("qwen2", vocab_size=vocab_size, **{**shape, **config_overrides})
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(str(out))
    return out


@pytest.fixture
def deterministic_kernels():
    """Deterministic CUDA kernels for a test that compares two training runs exactly: some CUDA backward kernels add
    with atomics in no fixed order, and Adam turns a tiny gradient's flipped sign into a whole step. Nothing changes
    on the CPU, whose kernels are deterministic already. cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` for it, which
    ``scripts/test_gpu.sh`` sets; ops without a deterministic kernel warn instead of failing."""
    import torch

    if not torch.cuda.is_available():
        yield
        return
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="session")
def tiny_chat_model() -> Path:
    """A tiny random Qwen2 with the embedded SmolLM2 tokenizer and chat template (cached between runs), or
    the one ``SKYRL_GYM_TINY_MODEL`` names where the embedded model is not installed
    (``tests.tiny_models``)."""
    from skygym_adapters.models import build_tiny_model

    from tests.tiny_models import given_tiny_model

    return given_tiny_model() or build_tiny_model()


@pytest.fixture
def native_linear(monkeypatch):
    """PyTorch's own ``torch.nn.functional.linear`` for the test: DeepSpeed ZeRO-3, once run in a process (the
    suite's DeepSpeed tests), replaces it for good, and a policy then refuses to compute with an engine's weights
    (``borrowed_weights``) and keeps the copying sync."""
    import torch

    monkeypatch.setattr(torch.nn.functional, "linear", torch._C._nn.linear)


@pytest.fixture
def multiply_data(tmp_path: Path) -> str:
    """One training row for the multiply env, for config checks that need a data file (a run of it needs
    ``trainer.train_batch_size=1``)."""
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply", '
                    '"reward_spec": {"ground_truth": "6"}}\n')
    return str(path)


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Training rows for the letter-share toy env (registered for this process)."""
    from skyrl_gym.data import write_jsonl
    from tests.skygym_train.toy_envs import register_toy_env, toy_rows

    register_toy_env()
    path = tmp_path_factory.mktemp("toy") / "train.jsonl"
    write_jsonl(toy_rows(64), path)
    return path


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray instance (2 CPUs, no dashboard) shared by the Ray tests of the session."""
    ray = pytest.importorskip("ray", reason="needs the 'train' extra (ray): pip install 'skyrl-gym[train]'")
    from skygym_train.ray_utils import init_ray

    init_ray(num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture()
def two_bundles(ray_cluster):
    """A placement group of two one-CPU bundles (two gloo ranks), removed afterwards."""
    from ray.util.placement_group import remove_placement_group

    from skygym_train.ray_utils import create_placement_group

    pg = create_placement_group(2, use_gpu=False)
    yield pg
    remove_placement_group(pg)
