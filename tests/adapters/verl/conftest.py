"""Fixtures for the veRL adapter tests: a tiny real model (random weights, SmolLM2's tokenizer and template)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    pytest.importorskip("transformers")
    from adapters.models import build_tiny_model

    return build_tiny_model(architecture="qwen2")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))
