"""Each node of a Ray cluster is checked before a run places work there: the modules its workers import and the
model folders they load (``ray_utils.check_nodes``, ``PPOTrainer._check_ray_nodes``).

The real tests join a second ``ray start`` node to the session's Ray, started in a mount namespace of its own where
one folder of this machine is an empty tmpfs: the node sees this machine's packages but not that folder, as a node
of another machine would not see a model downloaded on the driver's.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from skygym_train.ray_utils import DISTRIBUTIONS, look_here, node_problems

HERE = {"versions": {"torch": "2.13.0+cpu", "transformers": "5.17.0", "vllm": "0.32.0"}, "folders": {}}


def test_a_node_that_lacks_a_module_or_a_folder_is_an_error_and_another_version_a_warning():
    nodes = {
        "10.0.0.2 (aaaaaaaa)": {"versions": {"torch": "2.13.0+cu130", "transformers": "5.17.0", "vllm": None},
                                "folders": {"/models/q": True}},
        "10.0.0.3 (bbbbbbbb)": {"versions": {"torch": "2.12.0", "transformers": "5.17.0", "vllm": "0.32.0"},
                                "folders": {"/models/q": False}},
        "10.0.0.4 (cccccccc)": "no answer within 60 s",
    }
    found = node_problems(HERE, nodes, {"trainer.policy.model.path": "/models/q"})
    assert found.nodes == sorted(nodes)
    assert len(found.errors) == 2, found.errors
    vllm, folder = found.errors
    assert vllm.startswith("Ray node 10.0.0.2 (aaaaaaaa) cannot import vllm") and "skyrl-gym[vllm]" in vllm
    assert folder.startswith("Ray node 10.0.0.3 (bbbbbbbb) cannot read the model folder /models/q")
    assert "trainer.policy.model.path" in folder and "HF_HOME" in folder
    # a build tag (+cu130 on a GPU node, +cpu on the driver) is no other version; 2.12.0 is
    assert len(found.warnings) == 2, found.warnings
    assert "10.0.0.3 (bbbbbbbb) has torch 2.12.0 where this process has 2.13.0+cpu" in found.warnings[0]
    assert found.warnings[1] == ("Ray node 10.0.0.4 (cccccccc): no answer within 60 s; its packages and model "
                                 "folders were not checked")
    same = {"n": {"versions": dict(HERE["versions"]), "folders": {"/models/q": True}}}
    assert node_problems(HERE, same, {"trainer.policy.model.path": "/models/q"}) == type(found)([], [], ["n"])


def test_look_here_reads_versions_from_the_installed_distributions_and_folders_from_the_disk(tmp_path):
    import importlib.metadata

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    seen = look_here(["torch", "skygym_no_such_module"], [str(model), str(tmp_path / "gone")], DISTRIBUTIONS)
    assert seen["versions"] == {"torch": importlib.metadata.version("torch"), "skygym_no_such_module": None}
    assert seen["folders"] == {str(model): True, str(tmp_path / "gone"): False}


@pytest.fixture(scope="module")
def hidden_folder():
    folder = Path(tempfile.mkdtemp(prefix="skygym-node-only-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def node_without_the_folder(ray_cluster, hidden_folder):
    from tests.ray_two_nodes import second_ray_node

    with second_ray_node(num_cpus=1, hide=[str(hidden_folder)]) as nodes:
        yield nodes


@pytest.mark.slow
def test_check_nodes_asks_each_node_of_a_real_cluster(node_without_the_folder, hidden_folder, tiny_chat_model):
    from skygym_train.ray_utils import check_nodes

    model = hidden_folder / "model"
    shutil.copytree(tiny_chat_model, model, dirs_exist_ok=True)
    found = check_nodes(["skyrl_gym", "torch", "transformers", "skygym_no_such_module"],
                        {"trainer.policy.model.path": str(model)})
    head, node2 = node_without_the_folder["head"][:8], node_without_the_folder["node2"][:8]
    assert len(found.nodes) == 2 and found.warnings == [], found
    # the module no node has: each node answered for itself (the check ran there, carried by value)
    missing = [e for e in found.errors if "cannot import skygym_no_such_module" in e]
    assert sorted(head in e or node2 in e for e in missing) == [True, True] and len(missing) == 2, found.errors
    # the folder: the head sees it (this machine), node2 does not (its own mount namespace)
    unreadable = [e for e in found.errors if "cannot read the model folder" in e]
    assert len(unreadable) == 1 and node2 in unreadable[0] and str(model) in unreadable[0], found.errors


@pytest.mark.slow
def test_a_run_whose_model_a_node_cannot_read_is_refused_before_any_worker_starts(
    node_without_the_folder, hidden_folder, tiny_chat_model, toy_data, tmp_path
):
    from skygym_train.config import ConfigError, load_config
    from skygym_train.trainer import PPOTrainer
    from tests.skygym_train.toy_envs import toy_overrides

    model = hidden_folder / "model"
    shutil.copytree(tiny_chat_model, model, dirs_exist_ok=True)
    cfg = load_config(toy_overrides(model, toy_data, tmp_path, **{"trainer.use_ray": "true",
                                                                   "trainer.num_cpu_workers": 1,
                                                                   "trainer.max_training_steps": 1}))
    with PPOTrainer(cfg) as trainer:
        with pytest.raises(ConfigError) as raised:
            trainer.setup()
        assert trainer.policy is None  # refused before a worker group was made
    text = str(raised.value)
    assert f"cannot read the model folder {model}" in text and node_without_the_folder["node2"][:8] in text
    assert node_without_the_folder["head"][:8] not in text and "cannot import" not in text


@pytest.mark.slow
def test_check_with_ray_address_checks_the_clusters_nodes(node_without_the_folder, hidden_folder, tiny_chat_model,
                                                         toy_data, tmp_path, monkeypatch, capsys):
    import ray

    from skygym_train.entrypoints.main_base import main
    from tests.skygym_train.toy_envs import toy_overrides

    model = hidden_folder / "model"
    shutil.copytree(tiny_chat_model, model, dirs_exist_ok=True)
    keys = toy_overrides(model, toy_data, tmp_path, **{"trainer.use_ray": "true", "trainer.num_cpu_workers": 1})
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["--check", *keys]) == 0  # no cluster named: the nodes are not asked
    assert "Ray nodes checked" not in capsys.readouterr().err
    monkeypatch.setenv("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
    assert main(["--check", *keys]) == 2
    err = capsys.readouterr().err
    assert f"cannot read the model folder {model}" in err and node_without_the_folder["node2"][:8] in err
    readable = tmp_path / "model"  # a folder both nodes see
    shutil.copytree(tiny_chat_model, readable)
    keys = toy_overrides(readable, toy_data, tmp_path, **{"trainer.use_ray": "true", "trainer.num_cpu_workers": 1})
    assert main(["--check", *keys]) == 0
    err = capsys.readouterr().err
    assert "Ray nodes checked: " in err and node_without_the_folder["node2"][:8] in err, err
