"""The model resolver: embedded SmolLM2 (offline, cached), local folders, GGUF files, hub ids, tiny models."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from skygym_adapters.models import ModelResolutionError, build_tiny_model, load_model_and_tokenizer, resolve_model


def test_embedded_default_is_a_cached_float_checkpoint(tokenizer: Any, embedded_model: Path) -> None:
    resolved = resolve_model("smollm2-135m")
    assert resolved.source == "embedded"
    assert (resolved.path / "config.json").is_file() and (resolved.path / "model.safetensors").is_file()
    assert resolve_model(None).path == resolved.path  # the default
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template


def test_local_folder_and_errors(tiny_model_dir: Path, tmp_path: Path) -> None:
    assert resolve_model(str(tiny_model_dir)).source == "local"
    with pytest.raises(ModelResolutionError, match="does not exist"):
        resolve_model(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelResolutionError, match="no config.json"):
        resolve_model(str(empty))
    with pytest.raises(ModelResolutionError, match="unknown model 'gpt-17'"):
        resolve_model("gpt-17")


def test_hub_id_without_network_fails_clearly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelResolutionError, match="could not fetch hub model 'someone/some-model'"):
        resolve_model("someone/some-model")


def test_a_hub_id_that_cannot_be_had_is_named_before_anything_loads(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """`--check` and a run's start ask the hub cache, then the hub (one metadata request), unless offline."""
    import huggingface_hub.constants as constants

    from skygym_adapters.models import hub_model_problem

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # nothing cached
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hub_model_problem("someone/some-model") == (
        "hub model 'someone/some-model' is not in the hub cache, and HF_HUB_OFFLINE=1 forbids fetching it: fetch it "
        "once with the network, or pass a local folder")
    # an id that is no hub id (a cold review: a traceback at --check and at every run's start)
    assert hub_model_problem("foo/bar baz").startswith("'foo/bar baz' is not a hub id (")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # a hub that does not answer now
    assert hub_model_problem("someone/some-model", timeout=5) is None  # the download's to retry and report
    # a copy in the hub cache is enough, with or without the network
    snapshot = tmp_path / "hub" / "models--someone--some-model" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--someone--some-model" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--some-model" / "refs" / "main").write_text("0" * 40)
    assert hub_model_problem("someone/some-model") is None


def test_tiny_llama_loads_and_runs(tmp_path: Path, tiny_model_dir: Path) -> None:
    import torch

    folder = build_tiny_model(tmp_path / "tiny-llama", architecture="llama", tokenizer_from=tiny_model_dir)
    model, tokenizer = load_model_and_tokenizer(str(folder), device="cpu")
    assert model.config.model_type == "llama"
    assert model.config.hidden_size // model.config.num_attention_heads == 32  # a head size vLLM CPU supports
    ids = torch.tensor([tokenizer.encode("hello")])
    assert model(ids).logits.shape == (1, ids.shape[1], len(tokenizer))
    with pytest.raises(ValueError, match="unknown tiny architecture"):
        build_tiny_model(tmp_path / "x", architecture="gpt9")


def test_the_embedded_models_copy_is_kept_apart_per_transformers_major_version(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The dequantised copy is read back by the transformers that wrote it: one written under transformers 5 does
    not load under 4.57 (AdapterHub's pin), so each major version resolves to its own copy."""
    import importlib.metadata

    from skygym_adapters import models

    try:
        gguf = models.embedded_gguf_path()
    except models.EmbeddedModelMissing as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("SKYRL_GYM_CACHE", str(tmp_path))
    real_version = importlib.metadata.version
    folders = {}
    for installed in ("4.57.1", "5.2.0"):
        monkeypatch.setattr(importlib.metadata, "version",
                            lambda dist, installed=installed: installed if dist == "transformers" else real_version(dist))
        folder = models._gguf_cache_folder(gguf, "SmolLM2-135M-Instruct")
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_text(installed)  # stands for the copy this version wrote
        folders[installed] = folder
    assert folders["4.57.1"] != folders["5.2.0"]
    for installed, folder in folders.items():
        monkeypatch.setattr(importlib.metadata, "version",
                            lambda dist, installed=installed: installed if dist == "transformers" else real_version(dist))
        assert models.resolve_model("smollm2-135m").path == folder
    monkeypatch.setattr(importlib.metadata, "version", lambda dist: "5.24.0" if dist == "transformers" else real_version(dist))
    assert models.resolve_model("smollm2-135m").path == folders["5.2.0"]  # a minor version reads its major's copy


def test_a_gguf_file_without_its_readers_names_the_missing_package(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """transformers reads GGUF files through `gguf` and `accelerate`: without one, a skip-able error with the
    install line (conform reports it as a skip), not transformers' ValueError from deep inside the load."""
    import importlib.util

    from skygym_adapters import models

    monkeypatch.setenv("SKYRL_GYM_CACHE", str(tmp_path / "cache"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "accelerate" else real_find_spec(name, *a))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(models.EmbeddedModelMissing, match=r"'accelerate' is not installed: pip install gguf accel"):
        resolve_model(str(gguf))
    assert not (tmp_path / "cache" / "models").exists() or not any((tmp_path / "cache" / "models").iterdir())


def test_a_busy_cpu_gets_fewer_torch_threads_unless_omp_num_threads_says(monkeypatch):
    """Two threads that wait for each other at every barrier on cores busy with other work made a CPU eval 3.5x
    slower than one thread; an idle machine keeps torch's default, and OMP_NUM_THREADS wins."""
    import os

    import torch

    from skygym_adapters import models
    from skygym_adapters.models import fit_cpu_threads_to_load

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    chosen = []
    monkeypatch.setattr(torch, "set_num_threads", chosen.append)
    try:
        monkeypatch.setattr(models, "_busy_cores", lambda cores: 0.2)
        assert fit_cpu_threads_to_load()[0] is None and chosen == []  # nearly idle: the default stays
        monkeypatch.setattr(models, "_busy_cores", lambda cores: 2.1)
        note, restore = fit_cpu_threads_to_load()
        assert note == ("the machine is busy (2.1 of 4 cores in use by other work): torch uses 2 threads, not 4 "
                        "(OMP_NUM_THREADS=N chooses)") and chosen == [2]
        restore()  # the caller puts the count back when its run ends
        assert chosen == [2, 4]
        monkeypatch.setattr(models, "_busy_cores", lambda cores: 9.0)
        assert "torch uses 1 thread, not 4" in fit_cpu_threads_to_load()[0] and chosen == [2, 4, 1]  # at least 1
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert fit_cpu_threads_to_load()[0] is None and chosen == [2, 4, 1]
    finally:
        monkeypatch.undo()
        assert torch.get_num_threads() == before


def test_busy_cores_are_measured_now_not_a_minute_ago():
    """The 1-minute load average still counted a run that had just ended; the machine's busy time is sampled
    instead. A process that keeps one core busy meanwhile is seen."""
    import subprocess
    import sys

    from skygym_adapters.models import _busy_cores

    cores = len(__import__("os").sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time

        time.sleep(0.3)
        assert _busy_cores(cores, sample_s=0.5) >= 0.7  # at least the spinner's core
    finally:
        spinner.kill()
        spinner.wait()


def test_this_processs_own_threads_are_not_other_work():
    """A run's first call once read "1.0 of 2 cores in use by other work" on an idle machine: its own threads'
    CPU time counted as other work's. Of 200 ticks on 2 cores, 50 idle and 100 this process's: half a core."""
    from skygym_adapters.models import _others_share

    assert _others_share(2, 200, 50, 100) == 0.5
    assert _others_share(2, 200, 50, 0) == 1.5 and _others_share(2, 200, 100, 150) == 0.0  # never below 0
    assert _others_share(2, 0, 0, 0) == 0.0


def test_two_gguf_files_of_one_name_and_size_get_their_own_copies(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """The dequantised copy was keyed by the file's name and size: a second `model.gguf` of the same size (a
    fine-tune of the same base, quantised alike) resolved to the first one's copy and silently ran its weights.
    The same content elsewhere (another virtual environment's copy of a package) still shares one."""
    from skygym_adapters import models

    monkeypatch.setenv("SKYRL_GYM_CACHE", str(tmp_path / "cache"))
    files = {}
    for folder, content in (("a", b"GGUF" + b"\0" * 4096), ("b", b"GGUF" + b"\1" * 4096), ("c", b"GGUF" + b"\0" * 4096)):
        (tmp_path / folder).mkdir()
        files[folder] = tmp_path / folder / "model.gguf"
        files[folder].write_bytes(content)
    copies = {folder: models._gguf_cache_folder(path) for folder, path in files.items()}
    assert copies["a"] != copies["b"] and copies["a"] == copies["c"]
    files["a"].write_bytes(b"GGUF" + b"\2" * 4096)  # rewritten in place: the same name, size and folder
    os.utime(files["a"], ns=(1, 1))
    assert models._gguf_cache_folder(files["a"]) not in (copies["a"], copies["b"])


def test_a_training_checkpoint_is_named_as_such_with_the_way_to_an_export(tmp_path):
    """A cold run: `eval --model ckpts/global_step_N` said only "no config.json"."""
    (tmp_path / "global_step_3" / "policy").mkdir(parents=True)
    (tmp_path / "global_step_3" / "trainer_state.pt").write_bytes(b"")
    (tmp_path / "global_step_3" / "policy" / ".metadata").write_bytes(b"")
    for folder in (tmp_path / "global_step_3", tmp_path / "global_step_3" / "policy"):
        with pytest.raises(ModelResolutionError, match="is a training checkpoint .* trainer.hf_save_interval=1"):
            resolve_model(str(folder))


def test_a_half_written_model_left_by_a_process_that_is_gone_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """A SIGTERM or SIGKILL while the embedded model was dequantised left its temporary sibling (300 MB of half a
    model) for good: a later write kept its own and never removed it. One whose writer still runs is its own."""
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    out = tmp_path / "tiny"
    stale, running = tmp_path / f"tiny.tmp-{gone}-abc", tmp_path / f"tiny.tmp-{os.getpid()}-def"
    for folder in (stale, running):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half")
    assert build_tiny_model(out) == out and (out / "config.json").is_file()
    assert not stale.exists() and running.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny", running.name]  # its own temporary folder went
