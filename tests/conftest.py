"""Shared test set-up: paths to the shared data and a clean registry per test where needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("SKYRL_GYM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def gsm8k_test_file() -> Path:
    path = SHARED_DATA / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.skip(f"shared GSM8K data not found at {path}")
    return path
