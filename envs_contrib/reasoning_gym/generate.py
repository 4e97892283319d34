"""The one place that calls reasoning-gym: build a dataset from a name and settings, and fetch entry ``i``.

Entries are generated in chunks of :data:`CHUNK` (reasoning-gym's own reseeding scheme): entry ``i`` of a
split is item ``i % CHUNK`` of the dataset seeded ``base + i // CHUNK``, where ``base`` derives from the
row seed and the split. So an entry depends only on ``(seed, split, i)`` and the settings, never on how
many rows were asked for (some reasoning-gym datasets, e.g. ``acre``, generate all items of a size up front).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import re
from typing import Any, Dict, Mapping, Optional

from skygym_contrib.reasoning_gym.names import COMPOSITE_DEFAULT, DATASETS

CHUNK = 500


class SettingsError(ValueError):
    """Settings that the reasoning-gym dataset rejects; the message names the dataset and its valid settings."""


def base_seed(seed: int, split: str) -> int:
    digest = hashlib.sha256(f"{seed}:{split}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def locate(seed: int, split: str, index: int) -> tuple[int, int]:
    """``(dataset seed, item index)`` of entry ``index`` of a split."""
    return (base_seed(seed, split) + index // CHUNK) % (2**32), index % CHUNK


# Settings that name a file (spell_backward's data_file, figlet_font's static_font, ...): reasoning-gym opens them
# relative to its own package, where an absolute path or ``..`` reaches any file (its words came back in the
# reward's reason and error text; /dev/zero filled memory). Rows and serve-env's clients set these.
_NAMES_A_FILE = re.compile(r"file|path|dir|font", re.IGNORECASE)


def check_no_paths(name: str, config: Mapping[str, Any]) -> None:
    """A setting that names a file may be a plain name only (one the package looks up among its own files); the
    same for each part of a composite."""
    for key, value in config.items():
        names = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else []
        if _NAMES_A_FILE.search(key) and not all(  # numbers name no file (min_path_length)
                not isinstance(n, str) or (re.fullmatch(r"\w[\w.+-]*", n) and ".." not in n) for n in names):
            raise SettingsError(f"reasoning-gym dataset {name!r}: setting {key}={str(value)[:80]!r} must be the "
                                "plain name of a file reasoning-gym ships (no folder, no '..'): settings come from "
                                "rows and clients, and may not open files elsewhere")
    if name == "composite":
        for spec in config.get("datasets") or []:
            if isinstance(spec, Mapping) and isinstance(spec.get("config"), Mapping):
                check_no_paths(str(spec.get("name")), spec["config"])


def settings_json(settings: Mapping[str, Any]) -> str:
    return json.dumps(dict(settings), sort_keys=True)


def check_name(name: str) -> None:
    if name not in DATASETS:
        import difflib

        close = difflib.get_close_matches(name, list(DATASETS), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise SettingsError(f"reasoning-gym has no dataset {name!r}.{hint} Run `skyrl-gym list` for the "
                            "reasoning_gym/<name> ids.")


@functools.lru_cache(maxsize=64)
def dataset(name: str, settings: str, seed: int) -> Any:
    """The reasoning-gym dataset ``name`` with ``settings`` (JSON of config fields) and ``seed``; cached."""
    check_name(name)
    try:
        from reasoning_gym.factory import DATASETS as RG_DATASETS
    except ImportError as exc:
        raise SettingsError("the reasoning_gym/* envs need the reasoning-gym package: "
                            "pip install 'skyrl-gym[reasoning-gym]'") from exc
    dataset_cls, config_cls = RG_DATASETS[name]
    fields = {f.name for f in dataclasses.fields(config_cls)}
    config: Dict[str, Any] = json.loads(settings)
    unknown = sorted(set(config) - fields)
    if unknown:
        valid = ", ".join(sorted(fields - {"seed", "size"}))
        raise SettingsError(f"reasoning-gym dataset {name!r} has no setting(s) {unknown}; its settings are: {valid}")
    if "seed" in config or "size" in config:
        raise SettingsError(f"give seed and size to build_rows, not as settings of {name!r}")
    check_no_paths(name, config)
    if name == "composite":
        from reasoning_gym.composite import DatasetSpec

        config["datasets"] = [DatasetSpec(**spec) for spec in config.get("datasets") or COMPOSITE_DEFAULT]
    try:
        built = config_cls(**config, seed=seed, size=CHUNK)
        return dataset_cls(config=built)
    except (AssertionError, ValueError, TypeError) as exc:
        why = str(exc) or type(exc).__name__
        raise SettingsError(f"reasoning-gym rejected the settings {settings} of {name!r}: {why}") from exc


def entry(name: str, settings: str, seed: int, index: int) -> Dict[str, Any]:
    """Item ``index`` of the dataset seeded ``seed``: ``{"question", "answer", "metadata"}`` (a copy: some
    datasets take seconds to generate one item, e.g. futoshiki, so items are cached)."""
    return copy.deepcopy(_cached_entry(name, settings, seed, index))


@functools.lru_cache(maxsize=1024)
def _cached_entry(name: str, settings: str, seed: int, index: int) -> Dict[str, Any]:
    return dataset(name, settings, seed)[index]


def system_prompt() -> str:
    """reasoning-gym's own default system prompt: think, then the final answer in ``<answer>...</answer>``."""
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return SYSTEM_PROMPTS["default"]


def version() -> Optional[str]:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("reasoning-gym")
    except Exception:
        return None
