"""``skyrl-gym init NAME`` writes a package that installs with pip and passes ``skyrl-gym check NAME`` as written."""

from __future__ import annotations

import sys

import pytest

from skyrl_gym.cli import main
from skyrl_gym.scaffold import ScaffoldError, names, scaffold
from tests.env_packages import check_and_test

NAME = "scaffold_probe_env"  # not a real env: installed apart for the test


def test_names_are_checked_and_derived():
    import skyrl_gym

    assert names("word_reverse") == {"name": "word_reverse", "dist": "skyrl-gym-word-reverse",
                                     "package": "skygym_word_reverse", "cls": "WordReverseEnv", "title": "Word reverse",
                                     "hub_version": skyrl_gym.__version__}
    with pytest.raises(ScaffoldError, match="e.g. 'my_env'"):
        names("My-Env")
    with pytest.raises(ScaffoldError, match="already registered"):
        names("gsm8k")


def test_init_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["init", "word_reverse", "--dir", str(tmp_path)]) == 2
    assert "is not empty" in capsys.readouterr().err


def test_an_env_whose_package_init_wrote_but_pip_did_not_install_says_to_install_it(tmp_path, capsys, monkeypatch):
    """`skyrl-gym check color_guess` right after `init` said only "no env registered"."""
    monkeypatch.chdir(tmp_path)
    assert main(["init", "color_guess"]) == 0
    capsys.readouterr()
    assert main(["check", "color_guess"]) == 2
    assert ("./skyrl-gym-color-guess holds its package, not installed: pip install -e ./skyrl-gym-color-guess"
            in capsys.readouterr().err)
    monkeypatch.chdir(tmp_path / "skyrl-gym-color-guess")  # elsewhere, nothing to point at
    assert main(["check", "color_guess"]) == 2
    assert "holds its package" not in capsys.readouterr().err


def test_the_scaffolded_package_installs_and_passes_the_checker_and_its_own_tests(tmp_path):
    root = scaffold(NAME, tmp_path / "pkg")
    summary = check_and_test(NAME, root, tmp_path / "site", cwd=tmp_path)
    assert "5 passed" in summary, summary


def test_the_scaffolded_package_needs_this_hub_not_the_public_skyrl_gym_of_the_same_name(tmp_path):
    """Unpinned, pip resolved the package's ``skyrl-gym`` dependency in a fresh environment to the public
    SkyRL-gym 0.4.0, which has no entry points for it to register through."""
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli",
                                  reason="reads TOML: Python 3.11's tomllib, or pip install tomli before 3.11")
    from packaging.requirements import Requirement

    import skyrl_gym

    root = scaffold(NAME, tmp_path / "pkg")
    dependencies = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    hub = [Requirement(d) for d in dependencies if Requirement(d).name == "skyrl-gym"]
    assert len(hub) == 1
    assert hub[0].specifier.contains(skyrl_gym.__version__) and not hub[0].specifier.contains("0.4.0")


def test_the_scaffolded_builder_follows_the_dataset_builder_contract(tmp_path):
    """``builder(split, size, seed, **kwargs)``: called with keywords only, an unknown split or option refused with
    a message that names it."""
    import importlib.util

    root = scaffold(NAME, tmp_path / "pkg")
    module_spec = importlib.util.spec_from_file_location("scaffold_dataset", root / f"skygym_{NAME}" / "dataset.py")
    dataset = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(dataset)
    rows = list(dataset.build_rows(size=2))  # split, seed: the contract's defaults
    assert [row["extra_info"]["split"] for row in rows] == ["train", "train"]
    assert list(dataset.build_rows(split="test", size=2, seed=0)) == list(dataset.build_rows("test", 2, 0))
    with pytest.raises(ValueError, match="not 'tset'"):
        list(dataset.build_rows(split="tset", size=1, seed=0))
    with pytest.raises(TypeError, match=r"no option \['num_words'\]"):
        list(dataset.build_rows(split="test", size=1, seed=0, num_words=3))


def test_the_scaffolded_env_names_a_wrong_max_turns(tmp_path):
    """New users copy the template: it said ``invalid literal for int() with base 10: 'abc'``, and a 0 became 2."""
    import importlib.util

    root = scaffold(NAME, tmp_path / "pkg")
    module_spec = importlib.util.spec_from_file_location("scaffold_env", root / f"skygym_{NAME}" / "env.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    env_class = next(value for value in vars(module).values()
                     if isinstance(value, type) and "max_turns" in (getattr(value, "config_defaults", None) or {}))
    row = {"reward_spec": {"ground_truth": "gym"}}
    assert env_class({}, row).max_turns == 2 and env_class({"max_turns": 5}, row).max_turns == 5
    for wrong in ("abc", 0, True, 2.5):
        with pytest.raises(ValueError, match=f"env_config.max_turns must be a whole number >= 1, got {wrong!r}"):
            env_class({"max_turns": wrong}, row)


@pytest.mark.parametrize("env_id, row", [
    ("code_interpreter", {"reward_spec": {"ground_truth": "1"}}),
    ("search", {"reward_spec": {"ground_truth": {"target": ["x"]}}}),
])
def test_a_wrong_max_turns_is_named_with_where_it_came_from(env_id, row):
    """The built-in multi-turn envs read ``int(row or config)``: a bare int() error. What int() reads is kept."""
    import skyrl_gym

    with pytest.raises(ValueError, match=f"env {env_id!r}: env_config.max_turns must be a whole number, got 'abc'"):
        skyrl_gym.make(env_id, env_config={"max_turns": "abc"}, extras=row)
    with pytest.raises(ValueError, match=f"env {env_id!r}: the row's max_turns must be a whole number, got 'x'"):
        skyrl_gym.make(env_id, extras={**row, "max_turns": "x"})
    assert skyrl_gym.make(env_id, extras={**row, "max_turns": 2.5}).max_turns == 2  # as the rows always read
    # a row's 0 is SkyRL-gym's: the episode ends after its first step (it was read as unset, a parity fuzz found)
    zero = skyrl_gym.make(env_id, env_config={"max_turns": 4}, extras={**row, "max_turns": 0})
    assert zero.max_turns == 0
    zero.init([{"role": "user", "content": "q"}])
    assert zero.step("no tool call, no answer")["done"] is True
    # through the driver too, whatever cap the caller gives (a cap raised the env's 0 to itself: a review)
    from skyrl_gym.episode import apply_turn_limit

    for cap in (None, 5):
        env = skyrl_gym.make(env_id, extras={**row, "max_turns": 0})
        assert apply_turn_limit(env, 0, cap) == 1 and env.max_turns == 1


@pytest.mark.parametrize("env_id, row, default", [
    ("multiply", {"reward_spec": {"ground_truth": "6"}}, 5),
    ("gsm8k_multi_turn", {"reward_spec": {"ground_truth": "6"}}, 5),
    ("rlm", {}, 10),
])
def test_envs_that_read_max_turns_from_the_row_alone_name_a_wrong_one_the_same_way(env_id, row, default):
    """multiply, gsm8k_multi_turn and the RLM base read the row (then ``extra_info``), never env_config, as
    SkyRL-gym's do; they share one reader with the others, so a wrong value is named the same way and what int()
    reads is kept."""
    import skyrl_gym
    from skyrl_gym.envs.rlm import BaseRLMEnv
    from skyrl_gym.errors import DataError

    def make(env_config=None, **extras):
        if env_id == "rlm":  # a base class: subclasses register the envs
            return BaseRLMEnv(env_config, {**row, **extras})
        return skyrl_gym.make(env_id, env_config=env_config, extras={**row, **extras})

    with pytest.raises(DataError, match=f"env {env_id!r}: max_turns must be a whole number, got 'x'"):
        make(max_turns="x")
    assert make().max_turns == default and make(max_turns=2.5).max_turns == 2
    assert make({"max_turns": 7}).max_turns == default
    if env_id != "rlm":
        assert make(extra_info={"max_turns": 3}).max_turns == 3


def test_init_prints_next_commands_that_a_shell_reads_as_written(tmp_path, capsys):
    """The `pip install -e DIR[dev]` it suggests is quoted, so zsh (which refuses an unmatched glob) and bash
    (which may expand it) both pass `[dev]` to pip; the folder may hold spaces."""
    import shlex

    folder = tmp_path / "my envs" / "pkg"
    assert main(["init", "word_reverse_probe", "--dir", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    pip_line = next(line.strip() for line in lines if line.strip().startswith("pip install"))
    assert shlex.split(pip_line) == ["pip", "install", "-e", f"{folder}[dev]"]
    assert "[dev]'" in pip_line
    pytest_line = next(line.strip() for line in lines if line.strip().startswith("python -m pytest"))
    assert shlex.split(pytest_line)[-1] == str(folder / "tests")
    readme = (folder / "README.md").read_text(encoding="utf-8")  # the package's README says it the same way
    assert "pip install -e '.[dev]'" in readme
