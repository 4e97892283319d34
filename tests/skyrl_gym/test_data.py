"""Dataset rows: validation names the row and field; loaders read JSONL, JSON and Parquet."""

from __future__ import annotations

import json

import pytest

from skyrl_gym.data import load_rows, placed_records, row_extras, row_place, validate_row, write_jsonl, write_parquet
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
        ({"prompt": None}, "row 5: field 'prompt' is missing"),
        ({"prompt": "2 * 3"}, "row 5: field 'prompt' is a string"),
        ({"prompt": []}, "row 5: field 'prompt' must be a non-empty list"),
        ({"prompt": [{"role": "robot", "content": "x"}]}, r"row 5: prompt\[0\].role is 'robot'"),
        ({"prompt": [{"role": "user", "content": 3}]}, r"row 5: prompt\[0\].content must be a string"),
        ({"env_class": 5}, "row 5: field 'env_class' must be a string"),
        ({"reward_spec": "6"}, "row 5: field 'reward_spec' must be a dict"),
        ({"extra_info": [1]}, "row 5: field 'extra_info' must be a dict"),
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
    with pytest.raises(DataError, match="row 1: field 'env_class' is missing"):
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
    with pytest.raises(DataError) as info:
        load_rows(bad)
    assert str(info.value).startswith(f"row 2 (line 2 of {bad}) is not valid JSON")
    malformed = tmp_path / "malformed.jsonl"
    malformed.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "prompt": "oops"}) + "\n")
    with pytest.raises(DataError) as info:
        load_rows(malformed)
    assert str(info.value).startswith(f"row 2 (line 2 of {malformed}): field 'prompt' is a string")
    with pytest.raises(FileNotFoundError, match="dataset file not found"):
        load_rows(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="unknown dataset format '.csv'"):
        (tmp_path / "x.csv").write_text("a")
        load_rows(tmp_path / "x.csv")


def test_a_row_is_named_by_its_number_from_1_and_its_line(tmp_path):
    """One convention for every message: rows counted from 1, with the file, and the line of a JSONL file (a
    blank line makes the two differ). The checker and the trainer both name rows this way."""
    assert row_place(0) == "row 1" and row_place(5, "x.parquet") == "row 6 of x.parquet"
    spaced = tmp_path / "spaced.jsonl"
    spaced.write_text(json.dumps(GOOD) + "\n\n" + json.dumps({**GOOD, "prompt": "oops"}) + "\n")
    assert [place for place, _ in placed_records(spaced)] == [f"row 1 (line 1 of {spaced})",
                                                              f"row 2 (line 3 of {spaced})"]
    with pytest.raises(DataError) as info:
        load_rows(spaced)
    assert str(info.value) == (f"row 2 (line 3 of {spaced}): field 'prompt' is a string; it must be a list of "
                               "{'role', 'content'} messages")
    rows = make_rows(2, seed=0)
    assert [place for place, _ in placed_records(write_parquet(rows, tmp_path / "r.parquet"))] == [
        f"row 1 of {tmp_path / 'r.parquet'}", f"row 2 of {tmp_path / 'r.parquet'}"]


def test_json_nested_too_deeply_names_the_row(tmp_path):
    """100,000 open brackets in a downloaded file raised a RecursionError traceback from every reader."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text(json.dumps(GOOD) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match=rf"^row 2 \(line 2 of {deep}\) is JSON nested too deeply to read$"):
        load_rows(deep)
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="deep.json: JSON nested too deeply to read"):
        load_rows(tmp_path / "deep.json")


def test_a_parquet_file_is_decoded_no_further_than_the_rows_read(tmp_path):
    """A few KB of Parquet (one long dictionary-encoded value on every row) decode to gigabytes, and the whole table
    was decoded before `--limit 1` applied. Here 400 rows of a 1 MiB value: 400 MiB whole, a batch now."""
    import tracemalloc

    import pyarrow as pa
    import pyarrow.parquet as pq

    from skyrl_gym.data import PARQUET_BATCH_ROWS

    long_value = "x" * 2**20
    table = pa.table({"prompt": pa.array([json.dumps(GOOD["prompt"])] * 400).dictionary_encode(),
                      "note": pa.array([long_value] * 400).dictionary_encode()})
    pq.write_table(table, tmp_path / "bomb.parquet")
    assert (tmp_path / "bomb.parquet").stat().st_size < 64 * 1024
    tracemalloc.start()
    try:
        rows = load_rows(tmp_path / "bomb.parquet", validate=False, limit=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(rows) == 1 and rows[0]["note"] == long_value
    assert peak < (PARQUET_BATCH_ROWS + 16) * 2**20, f"{peak / 2**20:.0f} MiB held to read one row"
