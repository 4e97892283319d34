"""Fixtures for the adapters tests: the embedded SmolLM2 tokenizer, a tiny random model, drift checking."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pytest

from tests.adapters.support import register_test_envs

register_test_envs()


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The real SmolLM2-135M-Instruct tokenizer and chat template (from the embedded GGUF, cached; or from
    the tiny model ``SKYRL_GYM_TINY_MODEL`` names where the embedded model is not installed, see
    ``tests.tiny_models``)."""
    from skygym_adapters.models import ModelResolutionError, load_tokenizer
    from tests.tiny_models import chat_model_name

    try:
        return load_tokenizer(chat_model_name())
    except ModelResolutionError as exc:  # a session without the embedded-model extra (the core one has it)
        pytest.skip(f"embedded model unavailable: {exc}")


@pytest.fixture(scope="session")
def tiny_model_dir(tokenizer: Any) -> Path:
    """A tiny random Qwen2 (hidden 64, 2 heads of 32) with the SmolLM2 tokenizer."""
    from skygym_adapters.models import build_tiny_model
    from tests.tiny_models import given_tiny_model

    return given_tiny_model() or build_tiny_model()


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_dir: Path) -> Any:
    from skygym_adapters.engines.hf import HFEngine

    engine = HFEngine(str(tiny_model_dir), device="cpu")
    yield engine
    engine.close()


def assert_no_template_drift(trajectories: Iterable[Any], chat: Any) -> None:
    """Every trajectory in these tests goes through the drift check. With the project's templates the
    re-templated text must reproduce the recording; a random model may still produce non-canonical token
    sequences ("tokenization" drift), which the check reports but which is not a template fault."""
    from skygym_adapters.rollout import check_drift

    for trajectory in trajectories:
        report = trajectory.drift if trajectory.drift is not None else check_drift(trajectory, chat)
        assert report.kind != "template", f"{trajectory.trajectory_id}: {report}"
