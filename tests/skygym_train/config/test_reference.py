"""docs/configuration.md is generated from the schema: it lists every key, and the committed page is current."""

from __future__ import annotations

from pathlib import Path

from skygym_train.config.reference import render

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_the_committed_reference_is_the_generated_one():
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is stale: run `python -m skygym_train.config.reference > docs/configuration.md`")


def test_every_key_and_its_documented_meaning_appear():
    page = render()
    assert "| `trainer.algorithm.advantage_estimator` |" in page
    assert "| `generator.n_samples_per_prompt` |" in page
    assert "| `trainer.export_dtype` | `str` | `\"float32\"` | dtype of the Hugging Face export" in page
