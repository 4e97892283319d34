"""``skyrl-gym init NAME`` writes a package that installs with pip and passes ``skyrl-gym check NAME`` as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_gym.cli import main
from skyrl_gym.scaffold import ScaffoldError, names, scaffold

BIN = Path(sys.executable).parent
NAME = "scaffold_probe_env"  # not a real env: installed for the test and uninstalled after


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
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["install", "--no-deps", "--no-build-isolation", "-e", str(root)], check=True, env=env,
                   capture_output=True)
    try:
        check = subprocess.run([str(BIN / "skyrl-gym"), "check", NAME, "--huge-chars", "100000"], capture_output=True,
                               text=True, env=env, cwd=tmp_path)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "checking 2 row(s) from the dataset builder" in check.stdout and f"check {NAME}: OK" in check.stdout
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
                               capture_output=True, text=True, env=env, cwd=root)
        assert tests.returncode == 0 and "3 passed" in tests.stdout, tests.stdout + tests.stderr
    finally:
        subprocess.run(pip + ["uninstall", "-y", "skyrl-gym-" + NAME.replace("_", "-")], check=True, env=env,
                       capture_output=True)
