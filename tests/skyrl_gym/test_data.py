"""Dataset rows: validation names the row and field; loaders read JSONL, JSON and Parquet."""

from __future__ import annotations

import json

import pytest

from skyrl_gym.data import load_rows, row_extras, validate_row, write_jsonl, write_parquet
from skyrl_gym.envs.multiply.dataset import make_rows
from skyrl_gym.errors import DataError

GOOD = {
    "data_source": "unit",
    "prompt": [{"role": "user", "content": "2 * 3"}],
    "env_class": "multiply",
    "reward_spec": {"method": "rule", "ground_truth": "6"},
    "extra_info": {"index": 0},
    "difficulty": "easy",
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"prompt": None}, "row 4: field 'prompt' is missing"),
        ({"prompt": "2 * 3"}, "row 4: field 'prompt' is a string"),
        ({"prompt": []}, "row 4: field 'prompt' must be a non-empty list"),
        ({"prompt": [{"role": "robot", "content": "x"}]}, r"row 4: prompt\[0\].role is 'robot'"),
        ({"prompt": [{"role": "user", "content": 3}]}, r"row 4: prompt\[0\].content must be a string"),
        ({"env_class": 5}, "row 4: field 'env_class' must be a string"),
        ({"reward_spec": "6"}, "row 4: field 'reward_spec' must be a dict"),
        ({"extra_info": [1]}, "row 4: field 'extra_info' must be a dict"),
    ],
)
def test_validation_names_row_and_field(change, message):
    row = {**GOOD, **change}
    if change.get("prompt", 0) is None:
        del row["prompt"]
    with pytest.raises(DataError, match=message):
        validate_row(row, 4)


def test_env_class_can_be_required():
    row = {k: v for k, v in GOOD.items() if k != "env_class"}
    assert validate_row(row, 0) is row
    with pytest.raises(DataError, match="row 0: field 'env_class' is missing"):
        validate_row(row, 0, require_env_class=True)


def test_extras_are_every_other_column():
    assert row_extras(GOOD) == {k: v for k, v in GOOD.items() if k not in ("prompt", "env_class")}


def test_jsonl_and_parquet_round_trip(tmp_path):
    rows = make_rows(4, seed=3)
    assert load_rows(write_jsonl(rows, tmp_path / "rows.jsonl")) == rows
    assert load_rows(write_parquet(rows, tmp_path / "rows.parquet")) == rows
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    assert load_rows(tmp_path / "rows.json", limit=2) == rows[:2]


def test_loader_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(DataError, match="line 2 is not valid JSON"):
        load_rows(bad)
    malformed = tmp_path / "malformed.jsonl"
    malformed.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "prompt": "oops"}) + "\n")
    with pytest.raises(DataError, match="row 1: field 'prompt' is a string"):
        load_rows(malformed)
    with pytest.raises(FileNotFoundError, match="dataset file not found"):
        load_rows(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="unknown dataset format '.csv'"):
        (tmp_path / "x.csv").write_text("a")
        load_rows(tmp_path / "x.csv")
