"""Dataset rows <-> veRL's Parquet rows, both ways, without losing a field.

A row of this project (SkyRL-gym's format)::

    {"data_source": "openai/gsm8k", "prompt": [...], "env_class": "gsm8k",
     "reward_spec": {"method": "rule", "ground_truth": "72"}, "extra_info": {...}, <other columns>}

becomes the row veRL's ``RLHFDataset`` reads::

    {"data_source": "openai/gsm8k", "prompt": [...], "ability": "gsm8k",
     "reward_model": {"style": "rule", "ground_truth": "72"},
     "extra_info": {..., "index": 0, "skyrl_gym": "<JSON: env_class, the row's other columns, what was added>"},
     "agent_name": "skyrl_gym_agent", "env_class": "gsm8k"}

veRL passes every column to the agent loop, so ``agent_name`` picks the loop per row and ``env_class``
the env. The other columns (``db_id``, ``max_turns``, ...) travel as one JSON string inside
``extra_info``: veRL's reward managers hand ``extra_info`` (and nothing else of the row) to the reward
function, and Parquet would otherwise merge differently shaped values across rows into one struct type
and fill the gaps with nulls.
This module imports nothing heavy; Parquet goes through pyarrow, imported when used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from skyrl_gym.data import DatasetRow, row_extras, to_plain, validate_row
from skyrl_gym.errors import DataError

AGENT_NAME = "skyrl_gym_agent"
"""The name our agent loop is registered under in veRL's agent-loop registry."""

SIDECAR_COLUMN = "skyrl_gym"
_VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name", "env_class")
_ROW_CORE = ("data_source", "prompt", "env_class", "reward_spec", "extra_info")

# Fields veRL's dataset and agent-loop worker add to each sample at run time; they are not row columns.
VERL_RUNTIME_FIELDS = frozenset(
    {"raw_prompt", "index", "tools_kwargs", "interaction_kwargs", "dummy_tensor", "priority", "uid",
     "__num_turns__", "multi_modal_data", "raw_prompt_ids", "full_prompts"}
)

# Public datasets whose veRL rows carry no env_class: the env that scores them.
DATA_SOURCE_ENVS: Dict[str, str] = {
    "openai/gsm8k": "gsm8k",
    "gsm8k": "gsm8k",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "math": "math",
    "aime": "aime",
    "multiply": "multiply",
}


def row_to_verl(row: Mapping[str, Any], index: Optional[int] = None, agent_name: str = AGENT_NAME) -> Dict[str, Any]:
    """One dataset row as a veRL row. ``index`` (the row's position) fills ``extra_info.index`` when absent."""
    row = validate_row(to_plain(dict(row)), index, require_env_class=True)
    reward_spec = dict(row.get("reward_spec") or {})
    # Rows in SkyRL's AIME layout carry veRL's own reward_model column instead of reward_spec.
    verl_reward = reward_spec or dict(row.get("reward_model") or {})
    extra_info = dict(row.get("extra_info") or {})
    added: List[str] = []
    if "index" not in extra_info:
        extra_info["index"] = index if index is not None else 0
        added.append("index")
    sidecar = {
        "env_class": row["env_class"],
        "extras": {k: v for k, v in row.items() if k not in _ROW_CORE},
        "reward_spec": {k: v for k, v in reward_spec.items() if k not in ("method", "ground_truth")},
        "has_reward_spec": "reward_spec" in row,
        "has_extra_info": "extra_info" in row,
        "has_data_source": "data_source" in row,
        "extra_info_added": added,
    }
    try:
        sidecar_json = json.dumps(sidecar, ensure_ascii=False)
    except TypeError as exc:
        raise DataError(f"row {index}: a column is not JSON-serialisable ({exc}); veRL rows need plain values") from exc
    extra_info[SIDECAR_COLUMN] = sidecar_json
    return {
        "data_source": row.get("data_source", row["env_class"]),
        "prompt": [dict(message) for message in row["prompt"]],
        "ability": row.get("ability", row["env_class"]),
        "reward_model": {
            "style": verl_reward.get("method", verl_reward.get("style", "rule")),
            "ground_truth": verl_reward.get("ground_truth"),
        },
        "extra_info": extra_info,
        "agent_name": agent_name,
        "env_class": row["env_class"],
    }


def rows_to_verl(rows: Iterable[Mapping[str, Any]], agent_name: str = AGENT_NAME) -> List[Dict[str, Any]]:
    return [row_to_verl(row, index, agent_name) for index, row in enumerate(rows)]


def read_sidecar(extra_info: Any) -> Dict[str, Any]:
    """What :func:`row_to_verl` stored in ``extra_info["skyrl_gym"]`` (empty for rows written by others)."""
    text = extra_info.get(SIDECAR_COLUMN) if isinstance(extra_info, Mapping) else None
    if not text:
        return {}
    try:
        sidecar = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise DataError(f"veRL row: extra_info.{SIDECAR_COLUMN} is not the JSON this adapter writes ({exc})") from exc
    if not isinstance(sidecar, dict):
        raise DataError(f"veRL row: extra_info.{SIDECAR_COLUMN} must hold a JSON object")
    return sidecar


def env_class_of(verl_row: Mapping[str, Any]) -> str:
    """The env id of a veRL row: its ``env_class`` column, the one recorded in ``extra_info``, or its data source."""
    env_class = verl_row.get("env_class")
    extra_info = verl_row.get("extra_info") or {}
    if not env_class and isinstance(extra_info, Mapping):
        env_class = extra_info.get("env_class") or read_sidecar(extra_info).get("env_class")
    if not env_class:
        env_class = DATA_SOURCE_ENVS.get(str(verl_row.get("data_source")))
    if not env_class:
        raise DataError(
            f"veRL row of data_source {verl_row.get('data_source')!r} names no env: add an 'env_class' column "
            f"(convert rows with skygym_adapters.verl.rows.rows_to_verl) or one of the known data sources {sorted(DATA_SOURCE_ENVS)}"
        )
    return str(env_class)


def verl_to_row(verl_row: Mapping[str, Any]) -> DatasetRow:
    """A veRL row (from Parquet, or the keyword arguments veRL gives an agent loop) as a dataset row."""
    verl_row = to_plain(dict(verl_row))
    sidecar = read_sidecar(verl_row.get("extra_info"))
    prompt = verl_row.get("prompt")
    if prompt is None:
        prompt = verl_row.get("raw_prompt")
    row: Dict[str, Any] = {}
    if sidecar.get("has_data_source", True) and "data_source" in verl_row:
        row["data_source"] = verl_row["data_source"]
    row["prompt"] = [dict(message) for message in (prompt or [])]
    row["env_class"] = env_class_of(verl_row)
    reward_model = verl_row.get("reward_model") or {}
    if sidecar.get("has_reward_spec", True):
        spec: Dict[str, Any] = {}
        if reward_model.get("style") is not None:
            spec["method"] = reward_model["style"]
        spec["ground_truth"] = reward_model.get("ground_truth")
        spec.update(sidecar.get("reward_spec") or {})
        row["reward_spec"] = spec
    extra_info = dict(verl_row.get("extra_info") or {})
    extra_info.pop(SIDECAR_COLUMN, None)
    for key in sidecar.get("extra_info_added", []):
        extra_info.pop(key, None)
    if sidecar.get("has_extra_info", True):
        row["extra_info"] = extra_info
    if sidecar:
        row.update(sidecar.get("extras") or {})
    else:  # a row veRL's own preprocessing wrote: keep its other columns as extras
        for key, value in verl_row.items():
            if key not in _VERL_COLUMNS and key not in VERL_RUNTIME_FIELDS and key != "raw_prompt":
                row[key] = value
    return validate_row(row)  # type: ignore[return-value]


def write_verl_parquet(rows: Iterable[Mapping[str, Any]], path: Union[str, Path], agent_name: str = AGENT_NAME) -> Path:
    """Write dataset rows as a veRL Parquet file (``data.train_files=...``)."""
    from skyrl_gym.data import write_parquet

    return write_parquet(rows_to_verl(rows, agent_name), path)


def read_verl_parquet(path: Union[str, Path]) -> List[DatasetRow]:
    """Dataset rows from a veRL Parquet file (ours, or one written by veRL's preprocessing scripts)."""
    from skyrl_gym.data import placed_records

    rows = []
    for place, record in placed_records(path):
        try:
            rows.append(verl_to_row(record))
        except DataError as exc:
            raise DataError(f"{place}: {exc}") from exc
    return rows


def env_extras(row: Mapping[str, Any]) -> Dict[str, Any]:
    """What the env of a row receives as ``extras`` (every column but ``prompt`` and ``env_class``)."""
    return row_extras(row)


__all__ = [
    "AGENT_NAME",
    "DATA_SOURCE_ENVS",
    "SIDECAR_COLUMN",
    "env_class_of",
    "env_extras",
    "read_sidecar",
    "read_verl_parquet",
    "row_to_verl",
    "rows_to_verl",
    "verl_to_row",
    "write_verl_parquet",
]
