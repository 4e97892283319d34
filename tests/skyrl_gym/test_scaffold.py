"""``skyrl-gym init NAME`` writes a package that installs with pip and passes ``skyrl-gym check NAME`` as written."""

from __future__ import annotations

import pytest

from skyrl_gym.cli import main
from skyrl_gym.scaffold import ScaffoldError, names, scaffold
from tests.env_packages import check_and_test

NAME = "scaffold_probe_env"  # not a real env: installed apart for the test


def test_names_are_checked_and_derived():
    assert names("word_reverse") == {"name": "word_reverse", "dist": "skyrl-gym-word-reverse",
                                     "package": "skygym_word_reverse", "cls": "WordReverseEnv", "title": "Word reverse"}
    with pytest.raises(ScaffoldError, match="e.g. 'my_env'"):
        names("My-Env")
    with pytest.raises(ScaffoldError, match="already registered"):
        names("gsm8k")


def test_init_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["init", "word_reverse", "--dir", str(tmp_path)]) == 2
    assert "is not empty" in capsys.readouterr().err


def test_the_scaffolded_package_installs_and_passes_the_checker_and_its_own_tests(tmp_path):
    root = scaffold(NAME, tmp_path / "pkg")
    summary = check_and_test(NAME, root, tmp_path / "site", cwd=tmp_path)
    assert "4 passed" in summary, summary
