"""The README's "Use with veRL" / "Use with TRL" code (docs/snippets/) runs as written."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

SNIPPETS = Path(__file__).resolve().parents[2] / "docs" / "snippets"


def test_use_with_verl_snippet(tmp_path, monkeypatch, gsm8k_test_file, capsys):
    pytest.importorskip("pyarrow", reason="needs the 'data' extra (pyarrow): pip install 'skyrl-gym[data]'")
    monkeypatch.setenv("GSM8K_JSONL", str(gsm8k_test_file))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(SNIPPETS / "use_with_verl.py"), run_name="__main__")
    assert (tmp_path / "data" / "gsm8k_multi_turn" / "train.parquet").exists()
    assert capsys.readouterr().out.strip().endswith("1.0")


@pytest.mark.trl
def test_use_with_trl_snippet(tmp_path, monkeypatch, gsm8k_test_file, tiny_model_dir):
    pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]' in a virtual environment of its own (nox -s trl)")
    monkeypatch.setenv("GSM8K_JSONL", str(gsm8k_test_file))
    monkeypatch.setenv("MODEL", str(tiny_model_dir))
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.chdir(tmp_path)
    namespace = runpy.run_path(str(SNIPPETS / "use_with_trl.py"), run_name="__main__")
    assert namespace["trainer"].state.global_step == 2
    assert any("rewards/episode_reward/mean" in entry for entry in namespace["trainer"].state.log_history)


@pytest.mark.trl
def test_trl_example_script(tmp_path, gsm8k_test_file, tiny_model_dir, capsys, monkeypatch):
    pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]' in a virtual environment of its own (nox -s trl)")
    monkeypatch.chdir(tmp_path)
    example = runpy.run_path(str(SNIPPETS.parents[1] / "examples" / "trl" / "grpo_gsm8k.py"), run_name="example")
    assert example["main"](["--gsm8k_file", str(gsm8k_test_file), "--model", str(tiny_model_dir), "--limit", "8",
                            "--max_steps", "1", "--batch_size", "4", "--num_generations", "2",
                            "--max_completion_length", "8", "--multi_turn", "--max_turns", "2"]) == 0
    assert "steps=1" in capsys.readouterr().out


@pytest.mark.trl
@pytest.mark.parametrize("where", ["absent file", "hub offline"])
def test_trl_example_script_without_its_rows_is_one_error_line(where, tmp_path, monkeypatch):
    pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]' in a virtual environment of its own (nox -s trl)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as on a machine that cannot reach the hub
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # nothing cached
    example = runpy.run_path(str(SNIPPETS.parents[1] / "examples" / "trl" / "grpo_gsm8k.py"), run_name="example")
    argv = ["--gsm8k_file", str(tmp_path / "absent.jsonl")] if where == "absent file" else []
    with pytest.raises(SystemExit) as stopped:
        example["main"](argv)
    message = str(stopped.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    if where == "absent file":
        assert "absent.jsonl" in message
    else:
        assert message.endswith("(offline: --gsm8k_file train.jsonl)"), message
