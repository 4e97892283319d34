"""A model folder's weights with a tied head named, for engines that reload in place (the vLLM engines; their
reloads of such weights are tested for real in ``test_vllm.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

torch = pytest.importorskip("torch", reason="needs torch: pip install -e '.[train]'")
from safetensors.torch import save_file  # noqa: E402

from skygym_adapters.engines.weights_folder import ties_embeddings, tied_head_weights, with_tied_head  # noqa: E402


def folder(path: Path, config: Dict[str, Any], *shards: Dict[str, Any]) -> str:
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    for i, shard in enumerate(shards):
        save_file(shard, str(path / f"model-{i:05d}.safetensors"))
    return str(path)


EMBED = torch.arange(12.0).reshape(4, 3)
LAYER = torch.ones(3, 3)


def test_a_tied_folder_without_its_head_gets_the_embedding_as_head(tmp_path: Path) -> None:
    given = folder(tmp_path / "m", {"tie_word_embeddings": True},
                   {"model.embed_tokens.weight": EMBED}, {"model.layers.0.mlp.up_proj.weight": LAYER})
    weights = dict(tied_head_weights(given))
    assert sorted(weights) == ["lm_head.weight", "model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(weights["lm_head.weight"], EMBED) and torch.equal(weights["model.layers.0.mlp.up_proj.weight"], LAYER)


@pytest.mark.parametrize("config, shard", [
    ({"tie_word_embeddings": True}, {"model.embed_tokens.weight": EMBED, "lm_head.weight": EMBED + 1}),  # head named
    ({"tie_word_embeddings": False}, {"model.embed_tokens.weight": EMBED}),  # untied: the files say it all
    ({"text_config": {"tie_word_embeddings": False}}, {"model.embed_tokens.weight": EMBED}),  # a nested config
    ({}, {"model.layers.0.mlp.up_proj.weight": LAYER}),  # no embedding to tie to
])
def test_a_folder_that_names_everything_reloads_as_it_is(tmp_path: Path, config: Dict[str, Any], shard: Dict[str, Any]) -> None:
    assert tied_head_weights(folder(tmp_path / "m", config, shard)) is None


def test_a_folder_the_client_cannot_read_goes_to_the_engine_as_it_is(tmp_path: Path) -> None:
    """A server's own path (a remote engine's folder need not exist here): the engine reports what it finds."""
    assert tied_head_weights(str(tmp_path / "on-the-server")) is None


def test_a_real_tied_model_folder_gets_every_parameter_name(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    assert model.config.tie_word_embeddings
    weights = dict(tied_head_weights(str(tiny_model_dir)))
    assert sorted(weights) == sorted(model.state_dict())
    assert torch.equal(weights["lm_head.weight"], model.lm_head.weight.detach())


def test_a_state_dict_gets_the_head_only_where_it_names_the_embedding_alone() -> None:
    layer = [("model.layers.0.mlp.up_proj.weight", LAYER)]
    assert with_tied_head(layer) == layer  # a partial update that leaves the embedding alone
    given = [("model.embed_tokens.weight", EMBED), ("lm_head.weight", EMBED + 1)]
    assert with_tied_head(iter(given)) == given  # a head already named keeps its tensor
    named = dict(with_tied_head(layer + [("model.embed_tokens.weight", EMBED)]))
    assert named["lm_head.weight"] is EMBED


@pytest.mark.parametrize("config, tied", [({}, True), ({"tie_word_embeddings": False}, False),
                                          ({"text_config": {"tie_word_embeddings": True}}, True), (None, False)])
def test_ties_embeddings_reads_the_text_config(tmp_path: Path, config: Any, tied: bool) -> None:
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "x", **config}))
    assert ties_embeddings(str(tmp_path)) is tied


def test_a_remote_engines_state_dict_names_the_tied_head_or_says_why_it_cannot(tmp_path: Path, caplog) -> None:
    """vLLM's reload keeps the weights it is not given: a state dict naming the embedding alone would leave a tied
    model's head as it was on the server."""
    from safetensors.torch import load_file

    from skygym_adapters.engines.remote import RemoteEngine

    tied = folder(tmp_path / "tied", {"tie_word_embeddings": True})
    engine = RemoteEngine("http://127.0.0.1:9", model=tied, weights_dir=str(tmp_path / "sync"))
    saved = load_file(str(Path(engine._save_state_dict({"model.embed_tokens.weight": EMBED})) / "model.safetensors"))
    assert sorted(saved) == ["lm_head.weight", "model.embed_tokens.weight"]
    assert torch.equal(saved["lm_head.weight"], EMBED)

    elsewhere = RemoteEngine("http://127.0.0.1:9", model="served-name", weights_dir=str(tmp_path / "sync2"))
    with caplog.at_level("WARNING"):
        saved = load_file(str(Path(elsewhere._save_state_dict({"model.embed_tokens.weight": EMBED}))
                              / "model.safetensors"))
    assert sorted(saved) == ["model.embed_tokens.weight"]  # it cannot tell whether the model ties them: it says so
    assert "names model.embed_tokens.weight but not lm_head.weight" in caplog.text


@pytest.mark.parametrize("engine_class", ["remote.RemoteEngine", "sglang.SGLangEngine"])
def test_an_engine_removes_the_weights_folder_it_made_at_close_and_keeps_the_callers(tmp_path: Path,
                                                                                     engine_class: str) -> None:
    """Each sync rewrites a whole model into the folder: one the engine made for itself stayed in the temporary
    folder after every run (a model's weights per run); a folder the caller named is the caller's."""
    import importlib

    module, name = engine_class.split(".")
    engine_type = getattr(importlib.import_module(f"skygym_adapters.engines.{module}"), name)
    own = engine_type("http://127.0.0.1:9", None)
    made = Path(own.weights_dir)
    (made / "model.safetensors").write_bytes(b"weights")
    own.close()
    assert not made.exists()

    given = tmp_path / "mine"
    kept = engine_type("http://127.0.0.1:9", None, weights_dir=str(given))
    given.mkdir()
    (given / "model.safetensors").write_bytes(b"weights")
    kept.close()
    assert (given / "model.safetensors").read_bytes() == b"weights"


def test_a_save_folder_made_anew_after_remove_and_removed_at_exit(tmp_path: Path) -> None:
    import subprocess
    import sys

    from skygym_adapters.engines.weights_folder import SaveFolder

    folder = SaveFolder(None, "skyrl-test-")
    first = Path(folder.path)
    assert first.is_dir() and folder.path == str(first)  # one folder while it lives
    folder.remove()
    second = Path(folder.path)
    assert not first.exists() and second.is_dir()
    folder.remove()
    # a process that never calls remove() (a crash in training, say) still leaves nothing behind at exit
    script = ("from skygym_adapters.engines.weights_folder import SaveFolder; f = SaveFolder(None, 'skyrl-test-'); "
              "open(f.path + '/w', 'w').write('x'); print(f.path)")
    left = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert left and not Path(left).exists()
