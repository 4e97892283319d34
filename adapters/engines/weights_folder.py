"""A Hugging Face model folder as the engines that reload in place (vLLM) read it: its text config, and its
weights with a tied head named.

vLLM's in-place reload keeps every weight it is not given. A model with tied embeddings saved by
``save_pretrained`` has no ``lm_head.weight`` in its files (the head is the embedding), and a state dict may leave it
out too. After a trainer's sync had named the head (every sync does: ``state_dict()`` has both names), reloading
such weights left the synced head in place: the engine then sampled from a head that matched neither the weights
given nor the policy. The engines add the head (:func:`with_tied_head`) where the model ties its embeddings.

:class:`SaveFolder` is where weights are written for a server (or an engine) to load.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Tuple

HEAD = "lm_head.weight"


class SaveFolder:
    """Where weights are saved for a server to load: the caller's folder (``given``, kept), or else a temporary one
    made at first use and removed by :meth:`remove` (or at exit). Each sync rewrites the same files; a folder left
    behind would hold a whole model per training run."""

    def __init__(self, given: Optional[str], prefix: str):
        self.given, self.prefix = given, prefix
        self._own: Optional[tempfile.TemporaryDirectory] = None

    @property
    def path(self) -> str:
        if self.given is not None:
            return self.given
        if self._own is None:
            self._own = tempfile.TemporaryDirectory(prefix=self.prefix)
        return self._own.name

    def remove(self) -> None:
        """Remove the folder this made (a caller's folder stays); a later save makes a new one."""
        if self._own is not None:
            self._own.cleanup()
            self._own = None



def text_config(folder: str) -> Dict[str, Any]:
    """The folder's ``config.json`` (its ``text_config`` where it has one); ``{}`` where there is none to read."""
    try:
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return {}
    return config.get("text_config", config) if isinstance(config, dict) else {}


def ties_embeddings(folder: str) -> bool:
    """Whether the folder's model ties its head to its embeddings (transformers' default is tied); False where the
    folder has no config to say."""
    config = text_config(folder)
    return bool(config) and bool(config.get("tie_word_embeddings", True))


def with_tied_head(weights: Iterable[Tuple[str, Any]]) -> List[Tuple[str, Any]]:
    """``weights`` with ``lm_head.weight`` added as the embedding's tensor, where an embedding is named and the head
    is not (for a model that ties them: the caller checks)."""
    weights = list(weights)
    names = dict(weights)
    embedding = next((n for n in sorted(names) if n.endswith("embed_tokens.weight")), None)
    if embedding is not None and HEAD not in names:
        weights.append((HEAD, names[embedding]))
    return weights


def tied_head_weights(folder: str) -> Optional[List[Tuple[str, Any]]]:
    """The folder's weights with the head named, when its model ties the embeddings and its files leave the head
    out; ``None`` when the folder can be reloaded as it is (the head is named, the embeddings are not tied, or there
    is no config or safetensors file to read here, as for a path on a remote server: the engine reports what it
    finds)."""
    from safetensors import safe_open

    if not ties_embeddings(folder):
        return None
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    names = set()
    for path in files:  # the headers first: most folders name the head or tie nothing, and load as they are
        with safe_open(path, framework="pt") as f:
            names.update(f.keys())
    if HEAD in names or not any(name.endswith("embed_tokens.weight") for name in names):
        return None
    weights: List[Tuple[str, Any]] = []
    for path in files:
        with safe_open(path, framework="pt") as f:
            weights.extend((name, f.get_tensor(name)) for name in f.keys())
    return with_tied_head(weights)


__all__ = ["text_config", "ties_embeddings", "tied_head_weights", "with_tied_head"]
