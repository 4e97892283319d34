"""Prompt datasets for training and evaluation, with a resumable position."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence


@dataclass
class DatasetRows:
    """Rows read for a run, each with its place (how messages name it: :func:`skyrl_gym.data.row_place`), and every
    problem met reading them (a malformed row is left out of ``rows`` and named in ``problems``). ``order`` and
    ``problem_order`` hold where each row and each problem came in the reading, to list later problems in order;
    ``whole`` is false when a file could not be read to its end (its rows are not all counted)."""

    rows: List[Dict[str, Any]] = field(default_factory=list)
    places: List[str] = field(default_factory=list)
    order: List[int] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    problem_order: List[int] = field(default_factory=list)
    whole: bool = True
    defaulted: List[str] = field(default_factory=list)  # places of the rows that took the default env_class

    def add(self, place: str, record: Any, default_env_class: Optional[str]) -> None:
        from skyrl_gym.data import to_plain, validate_row
        from skyrl_gym.errors import DataError

        try:
            row = dict(validate_row(to_plain(record), place=place))
        except DataError as exc:
            return self.problem(str(exc))
        if not row.get("env_class"):
            if not default_env_class:
                return self.problem(f"{place}: no env_class, and environment.env_class is not set")
            row["env_class"] = default_env_class
            self.defaulted.append(place)
        self.order.append(len(self.order) + len(self.problems))
        self.rows.append(row)
        self.places.append(place)

    def problem(self, text: str) -> None:
        self.problem_order.append(len(self.order) + len(self.problems))
        self.problems.append(text)


def read_dataset(files: Sequence[str], default_env_class: Optional[str] = None) -> DatasetRows:
    """Every row of the JSONL/Parquet ``files``, validated; rows without ``env_class`` get the default. Every
    malformed row is named, not just the first; a file that cannot be read is one problem."""
    from skyrl_gym.data import placed_records

    out = DatasetRows()
    for path in files:
        try:
            for place, record in placed_records(path):
                out.add(place, record, default_env_class)
        except (OSError, ValueError) as exc:  # DataError (bad JSON) names the row and the line
            out.problem(str(exc) if str(path) in str(exc) else f"{path}: {exc}")
            out.whole = False
    return out


def given_rows(rows: Sequence[Mapping[str, Any]], default_env_class: Optional[str] = None) -> DatasetRows:
    """Rows handed over in code (``BasePPOExp.get_train_dataset``), checked as :func:`read_dataset` checks a
    file's."""
    from skyrl_gym.data import row_place

    out = DatasetRows()
    for index, record in enumerate(rows):
        out.add(row_place(index), record, default_env_class)
    return out


def load_dataset_rows(files: Sequence[str], default_env_class: Optional[str] = None) -> List[Dict[str, Any]]:
    """Read JSONL/Parquet files of dataset rows (validated); rows without ``env_class`` get the default. A
    malformed row raises ``ValueError`` naming it (:func:`read_dataset` names them all)."""
    out = read_dataset(files, default_env_class)
    if out.problems:
        raise ValueError(out.problems[0])
    return out.rows


@dataclass
class DataPosition:
    epoch: int = 0
    index: int = 0


class PromptDataset:
    """Hands out batches of rows in a per-epoch shuffled order that depends only on (seed, epoch).

    The position is part of a checkpoint, so a resumed run sees exactly the rows it would have seen.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], batch_size: int, seed: int = 42, shuffle: bool = True):
        if not rows:
            raise ValueError("the dataset is empty")
        if batch_size > len(rows):
            raise ValueError(
                f"trainer.train_batch_size={batch_size} is larger than the dataset ({len(rows)} rows)"
            )
        self.rows = list(rows)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.position = DataPosition()

    @property
    def batches_per_epoch(self) -> int:
        return len(self.rows) // self.batch_size  # the last partial batch is dropped

    def _order(self, epoch: int) -> List[int]:
        order = list(range(len(self.rows)))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def next_batch(self) -> List[Dict[str, Any]]:
        if self.position.index + self.batch_size > len(self.rows):
            self.position = DataPosition(self.position.epoch + 1, 0)
        order = self._order(self.position.epoch)
        chosen = order[self.position.index : self.position.index + self.batch_size]
        self.position = DataPosition(self.position.epoch, self.position.index + self.batch_size)
        return [dict(self.rows[i]) for i in chosen]

    def state_dict(self) -> Dict[str, int]:
        return {"epoch": self.position.epoch, "index": self.position.index}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.position = DataPosition(int(state["epoch"]), int(state["index"]))
