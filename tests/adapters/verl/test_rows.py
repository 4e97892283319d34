"""Dataset rows <-> veRL Parquet rows: both ways, through a real Parquet file, nothing lost."""

from __future__ import annotations

import pytest

from skygym_adapters.verl.rows import AGENT_NAME, read_verl_parquet, row_to_verl, rows_to_verl, verl_to_row, write_verl_parquet
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows
from skyrl_gym.errors import DataError

pytest.importorskip("pyarrow", reason="needs the 'data' extra (pyarrow): pip install 'skyrl-gym[data]'")


def _rows(gsm8k_test_file, limit=4):
    rows = list(gsm8k_rows(gsm8k_test_file, limit=limit))
    rows[1]["env_class"] = "gsm8k_multi_turn"
    rows[1]["max_turns"] = 3  # an extra column only some rows have
    del rows[2]["extra_info"]["index"]  # the converter must add veRL's index and take it away again
    rows[3]["reward_spec"]["note"] = "kept"
    return rows


def test_a_row_becomes_a_verl_row_with_agent_name_and_reward_model(gsm8k_test_file):
    row = _rows(gsm8k_test_file)[0]
    verl_row = row_to_verl(row, index=0)
    assert verl_row["agent_name"] == AGENT_NAME
    assert verl_row["env_class"] == "gsm8k"
    assert verl_row["reward_model"] == {"style": "rule", "ground_truth": row["reward_spec"]["ground_truth"]}
    assert verl_row["prompt"] == row["prompt"]
    assert verl_row["extra_info"]["index"] == 0


def test_round_trip_through_parquet_is_exact(tmp_path, gsm8k_test_file):
    rows = _rows(gsm8k_test_file)
    path = write_verl_parquet(rows, tmp_path / "train.parquet")
    assert read_verl_parquet(path) == rows
    assert [verl_to_row(r) for r in rows_to_verl(rows)] == rows


def test_rows_written_by_verl_preprocessing_are_read_by_data_source():
    verl_row = {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "1+1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"split": "train", "index": 7},
    }
    row = verl_to_row(verl_row)
    assert row["env_class"] == "gsm8k"
    assert row["reward_spec"] == {"method": "rule", "ground_truth": "2"}
    assert row["extra_info"] == {"split": "train", "index": 7}
    assert "ability" not in row


def test_unknown_data_source_without_env_class_is_a_clear_error():
    with pytest.raises(DataError, match="names no env"):
        verl_to_row({"data_source": "my/private-set", "prompt": [{"role": "user", "content": "x"}], "reward_model": {}})


def test_a_row_without_env_class_is_refused_with_its_index():
    with pytest.raises(DataError, match="row 6.*env_class"):
        row_to_verl({"prompt": [{"role": "user", "content": "x"}]}, index=5)
