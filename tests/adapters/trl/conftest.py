"""Fixtures for the TRL adapter tests: a tiny real model (random weights, SmolLM2's tokenizer and template)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    pytest.importorskip("transformers")
    from adapters.models import build_tiny_model

    return build_tiny_model(architecture="qwen2")
