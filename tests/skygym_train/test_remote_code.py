"""A config file cannot make the trainer run the Python that comes with a model folder or hub repo.

``trainer.<role>.model_config_kwargs`` and ``generator.engine_init_kwargs`` reach ``from_pretrained`` (and vLLM)
as keyword arguments: ``trust_remote_code: true`` in a downloaded recipe, beside a model folder (or hub repo) whose
``config.json`` maps its classes to a module of its own, ran that module while the policy loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skygym_adapters.models import TRUST_REMOTE_CODE_ENV
from skygym_train.config import ConfigError, load_config
from skygym_train.config.schema import OptimizerConfig
from skygym_train.workers.fsdp_worker import TrainingWorker, WorkerSpec

# Imported by transformers only with trust_remote_code: it leaves a file where the test can see it.
_HOSTILE_MODULE = """
import os
open(os.environ["SKYGYM_TEST_MARKER"], "w").write("ran")
from transformers import Qwen2Config, Qwen2ForCausalLM
class HostileConfig(Qwen2Config):
    pass
class HostileModel(Qwen2ForCausalLM):
    config_class = HostileConfig
"""


@pytest.fixture
def hostile_model(tmp_path: Path, tiny_chat_model: Path, monkeypatch) -> Path:
    """The tiny model's files, with a config.json that maps its classes to ``hostile.py`` beside it."""
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_chat_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "hostile.HostileConfig", "AutoModelForCausalLM": "hostile.HostileModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "hostile.py").write_text(_HOSTILE_MODULE)
    monkeypatch.setenv("SKYGYM_TEST_MARKER", str(tmp_path / "ran"))
    monkeypatch.delenv(TRUST_REMOTE_CODE_ENV, raising=False)
    return folder


def _overrides(model: Path, tmp_path: Path, *extra: str) -> list:
    rows = tmp_path / "train.jsonl"
    rows.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply", '
                    '"reward_spec": {"ground_truth": "6"}}\n')
    return [f"data.train_data=[{rows}]", f"trainer.policy.model.path={model}", "trainer.use_ray=false", *extra]


@pytest.mark.parametrize("key", ["trainer.policy.model_config_kwargs", "trainer.ref.model_config_kwargs",
                                 "trainer.critic.model_config_kwargs", "generator.engine_init_kwargs"])
def test_a_config_that_trusts_remote_code_is_refused_naming_the_key_and_the_way_to_allow_it(
        key, hostile_model, tmp_path, monkeypatch):
    with pytest.raises(ConfigError) as refused:
        load_config(_overrides(hostile_model, tmp_path, f"{key}.trust_remote_code=true"))
    message = str(refused.value)
    assert f"{key}.trust_remote_code: runs the Python that comes with the model" in message, message
    assert f"{TRUST_REMOTE_CODE_ENV}=1" in message
    assert not (tmp_path / "ran").exists()
    # the person running the command may allow it (the vLLM-only key still says it needs vLLM)
    monkeypatch.setenv(TRUST_REMOTE_CODE_ENV, "1")
    try:
        load_config(_overrides(hostile_model, tmp_path, f"{key}.trust_remote_code=true"))
    except ConfigError as exc:
        assert "trust_remote_code" not in str(exc) and key == "generator.engine_init_kwargs", str(exc)


def test_the_worker_refuses_it_too_and_runs_nothing_from_the_folder(hostile_model, tmp_path, monkeypatch):
    """A WorkerSpec built without the config check (the library API) holds as well; with the variable set, the
    folder's module is what transformers runs, which is what the refusal stood between."""
    spec = WorkerSpec(role="policy", model_path=str(hostile_model), optimizer=OptimizerConfig(lr=1e-3),
                      model_config_kwargs={"trust_remote_code": True})
    with pytest.raises(ValueError, match=f"set {TRUST_REMOTE_CODE_ENV}=1"):
        TrainingWorker(spec).load_model()
    assert not (tmp_path / "ran").exists()
    monkeypatch.setenv(TRUST_REMOTE_CODE_ENV, "1")
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    import transformers.dynamic_module_utils as modules

    monkeypatch.setattr(modules, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    worker = TrainingWorker(spec)
    worker.load_model()
    assert type(worker.model).__name__ == "HostileModel"
    assert (tmp_path / "ran").read_text() == "ran"
