"""Where the embedded model is not installed (a GPU machine it cannot reach), the tests that only need its
tokenizer take the tiny model SKYRL_GYM_TINY_MODEL names; a name that is not a model folder is refused."""

from __future__ import annotations

import pytest

from tests import tiny_models


def test_the_tiny_model_stands_in_only_where_the_embedded_one_is_missing(tmp_path, monkeypatch):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    monkeypatch.setenv(tiny_models.TINY_MODEL_ENV, str(folder))
    monkeypatch.setattr(tiny_models, "embedded_model_installed", lambda: False)
    assert tiny_models.given_tiny_model() == folder and tiny_models.chat_model_name() == str(folder)
    monkeypatch.setattr(tiny_models, "embedded_model_installed", lambda: True)
    assert tiny_models.given_tiny_model() is None and tiny_models.chat_model_name() == "smollm2-135m"


def test_a_folder_without_a_model_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(tiny_models.TINY_MODEL_ENV, str(tmp_path))
    monkeypatch.setattr(tiny_models, "embedded_model_installed", lambda: False)
    with pytest.raises(RuntimeError, match="not a model folder"):
        tiny_models.given_tiny_model()
