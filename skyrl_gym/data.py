"""Dataset rows: the row type, validation that names the row and field, and loaders.

A row (SkyRL-gym's format)::

    {
      "data_source": "openai/gsm8k",
      "prompt": [{"role": "user", "content": "..."}],
      "env_class": "gsm8k",
      "reward_spec": {"method": "rule", "ground_truth": "72"},
      "extra_info": {"split": "test", "index": 0},
    }

Every column other than ``prompt`` and ``env_class`` reaches the env as ``extras`` (``reward_spec``
and ``extra_info`` included). Parquet and Hugging Face loading import their libraries lazily.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, TypedDict, Union

from skyrl_gym.errors import DataError

_ROLES = {"system", "user", "assistant", "tool"}


class RewardSpec(TypedDict, total=False):
    method: str
    ground_truth: Any


class DatasetRow(TypedDict, total=False):
    data_source: str
    prompt: List[Dict[str, Any]]
    env_class: str
    reward_spec: RewardSpec
    extra_info: Dict[str, Any]


def row_place(index: int, path: Union[str, Path, None] = None, line: Optional[int] = None) -> str:
    """How every message names a dataset row (the one convention): rows are counted from 1, as a user counts the
    rows of a file, and the file is named, with the line of a JSONL file (blank lines are skipped, so a row's line
    can be past its number). ``index`` is the row's position counted from 0, as Python holds it.

    >>> row_place(5, "x.jsonl", 6), row_place(5, "x.parquet"), row_place(5)
    ('row 6 (line 6 of x.jsonl)', 'row 6 of x.parquet', 'row 6')
    """
    if path is None:
        return f"row {row_number(index)}"
    if line is None:
        return f"row {row_number(index)} of {path}"
    return f"row {row_number(index)} (line {line} of {path})"


def row_number(index: int) -> int:
    """The number a user knows the row at position ``index`` (from 0) by: counted from 1 (:func:`row_place`)."""
    return index + 1


def validate_row(row: Any, index: Optional[int] = None, require_env_class: bool = False,
                 place: Optional[str] = None) -> DatasetRow:
    """Check one row and return it; a malformed row raises :class:`DataError` naming row and field (``place``, or
    the row's number from ``index``: :func:`row_place`)."""
    where = place or (row_place(index) if index is not None else "row")
    if not isinstance(row, Mapping):
        raise DataError(f"{where}: expected a mapping of column -> value, got {type(row).__name__}")
    prompt = row.get("prompt")
    if prompt is None:
        raise DataError(f"{where}: field 'prompt' is missing (a list of chat messages)")
    if isinstance(prompt, str):
        raise DataError(f"{where}: field 'prompt' is a string; it must be a list of {{'role', 'content'}} messages")
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise DataError(f"{where}: field 'prompt' must be a non-empty list of chat messages, got {prompt!r:.80}")
    for position, message in enumerate(prompt):
        if not isinstance(message, Mapping):
            raise DataError(f"{where}: prompt[{position}] must be a dict with 'role' and 'content'")
        if message.get("role") not in _ROLES:
            raise DataError(f"{where}: prompt[{position}].role is {message.get('role')!r}; expected one of {sorted(_ROLES)}")
        if not isinstance(message.get("content"), str):
            raise DataError(f"{where}: prompt[{position}].content must be a string")
    env_class = row.get("env_class")
    if env_class is None and require_env_class:
        raise DataError(f"{where}: field 'env_class' is missing (the id of the env that scores this row)")
    if env_class is not None and not isinstance(env_class, str):
        raise DataError(f"{where}: field 'env_class' must be a string, got {type(env_class).__name__}")
    check_row_fields(row, where)
    return row  # type: ignore[return-value]


def check_row_fields(extras: Mapping[str, Any], where: str = "row") -> None:
    """The row fields envs read as dicts (``reward_spec``, ``extra_info``) are dicts where present; else a
    :class:`DataError` naming the field (serve-env's clients send rows without ``prompt``, as extras)."""
    reward_spec = extras.get("reward_spec")
    if reward_spec is not None and not isinstance(reward_spec, Mapping):
        raise DataError(f"{where}: field 'reward_spec' must be a dict like {{'method': 'rule', 'ground_truth': ...}}")
    extra_info = extras.get("extra_info")
    if extra_info is not None and not isinstance(extra_info, Mapping):
        raise DataError(f"{where}: field 'extra_info' must be a dict, got {type(extra_info).__name__}")


def row_extras(row: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``extras`` an env receives for a row: every column except ``prompt`` and ``env_class``."""
    return {key: value for key, value in row.items() if key not in ("prompt", "env_class")}


def copy_containers(value: Any) -> Any:
    """``value`` with its dicts, lists, tuples and sets copied, nested ones too, and every other object shared: an
    env gets a row's data of its own, while a live object a generator adds to the extras (a callback, a client)
    stays the caller's (a deep copy would copy it, or fail on its lock)."""
    if isinstance(value, dict):
        return {key: copy_containers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_containers(item) for item in value]
    if type(value) is tuple:
        return tuple(copy_containers(item) for item in value)
    if isinstance(value, set):
        return set(value)
    return value


def to_plain(value: Any) -> Any:
    """Plain Python values: Parquet readers (pyarrow, veRL's loader) give numpy arrays for list columns;
    envs and JSON want lists and dicts."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, Mapping):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    return value


def _read_jsonl(path: Path, shown: Union[str, Path]) -> Iterator[Tuple[Optional[int], Dict[str, Any]]]:
    with path.open("r", encoding="utf-8") as handle:
        index = 0
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{row_place(index, shown, line_number)} is not valid JSON ({exc.msg})") from exc
            except RecursionError:  # a downloaded file is input like any other: name the row, no traceback
                raise DataError(f"{row_place(index, shown, line_number)} is JSON nested too deeply to read") from None
            yield line_number, record
            index += 1


# Parquet rows are read a batch at a time: a reader that stops early (`--limit`) decodes no more than it reads, and a
# file whose few bytes decode to gigabytes (one long dictionary-encoded value on every row) is not decoded whole.
PARQUET_BATCH_ROWS = 64


def _read_parquet(path: Path) -> Iterator[Dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading Parquet needs pyarrow: pip install 'skyrl-gym[data]'") from exc
    for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS):
        for record in batch.to_pylist():
            yield to_plain(record)


def read_records(path: Union[str, Path]) -> Iterator[Dict[str, Any]]:
    """Raw records of a ``.jsonl``, ``.json`` (a list) or ``.parquet`` file, without validation."""
    for _, record in placed_records(path):
        yield record


def placed_records(path: Union[str, Path]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """``(place, record)`` for each raw record of a file (not validated): ``place`` names the row in messages
    (:func:`row_place`: its number, the file as given, and a JSONL file's line)."""
    shown = path
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"dataset file not found: {path}")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        numbered: Iterable[Tuple[Optional[int], Any]] = _read_jsonl(path, shown)
    elif suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except RecursionError:
            raise DataError(f"{path}: JSON nested too deeply to read") from None
        if not isinstance(data, list):
            raise DataError(f"{path}: a .json dataset must hold a list of rows")
        numbered = ((None, record) for record in data)
    elif suffix in (".parquet", ".pq"):
        numbered = ((None, record) for record in _read_parquet(path))
    else:
        raise DataError(f"{path}: unknown dataset format {suffix!r}; use .jsonl, .json or .parquet")
    for index, (line, record) in enumerate(numbered):
        yield row_place(index, shown, line), record


# A row's string "$GOLDEN_DIR/NAME" is the file NAME in the folder of the rows file (a shipped golden.json names the
# SQLite databases beside it so): expanded wherever rows are read from a file.
GOLDEN_DIR = "$GOLDEN_DIR/"


def files_beside(value: Any, folder: Path) -> Any:
    """``value`` with every ``"$GOLDEN_DIR/NAME"`` string made the path of ``NAME`` in ``folder``."""
    if isinstance(value, str) and value.startswith(GOLDEN_DIR):
        return str(folder / value[len(GOLDEN_DIR):])
    if isinstance(value, Mapping):
        return {key: files_beside(item, folder) for key, item in value.items()}
    if isinstance(value, list):
        return [files_beside(item, folder) for item in value]
    return value


def placed_rows(path: Union[str, Path]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """:func:`placed_records` of a rows file, each row's ``"$GOLDEN_DIR/NAME"`` strings made paths beside the file."""
    folder = Path(path).expanduser().parent
    for place, record in placed_records(path):
        yield place, files_beside(record, folder)


def load_rows(
    source: Union[str, Path, Iterable[Mapping[str, Any]]],
    validate: bool = True,
    limit: Optional[int] = None,
) -> List[DatasetRow]:
    """Rows from a file (JSONL/JSON/Parquet) or an iterable of dicts, validated one by one."""
    if isinstance(source, (str, Path)):
        records: Iterable[Tuple[Optional[str], Mapping[str, Any]]] = placed_rows(source)
    else:
        records = ((None, record) for record in source)
    rows: List[DatasetRow] = []
    for index, (place, record) in enumerate(records):
        if limit is not None and index >= limit:
            break
        record = to_plain(record)
        rows.append(validate_row(record, index, place=place) if validate else record)  # type: ignore[arg-type]
    return rows


def write_parquet(rows: Iterable[Mapping[str, Any]], path: Union[str, Path]) -> Path:
    """Write rows to Parquet (the format SkyRL-train and veRL read)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("writing Parquet needs pyarrow: pip install 'skyrl-gym[data]'") from exc
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(row) for row in rows]), path)
    return path


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: Union[str, Path]) -> Path:
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def load_hf_dataset(name: str, split: str = "train", subset: Optional[str] = None, **kwargs: Any) -> Iterator[Dict[str, Any]]:
    """Raw records of a Hugging Face hub dataset (needs the ``datasets`` package and network access)."""
    try:
        import datasets
    except ImportError as exc:
        raise ImportError("loading from the hub needs the datasets package: pip install 'skyrl-gym[hf]'") from exc
    dataset = datasets.load_dataset(name, subset, split=split, **kwargs)
    for record in dataset:
        yield dict(record)
