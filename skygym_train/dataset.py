"""Prompt datasets for training and evaluation, with a resumable position."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence


def load_dataset_rows(files: Sequence[str], default_env_class: Optional[str] = None) -> List[Dict[str, Any]]:
    """Read JSONL/Parquet files of dataset rows (validated); rows without ``env_class`` get the default."""
    from skyrl_gym.data import load_rows

    rows: List[Dict[str, Any]] = []
    for path in files:
        for row in load_rows(path):
            row = dict(row)
            if not row.get("env_class"):
                if not default_env_class:
                    raise ValueError(f"{path}: a row has no env_class and environment.env_class is not set")
                row["env_class"] = default_env_class
            rows.append(row)
    return rows


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
