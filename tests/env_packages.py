"""Env packages of their own (a scaffold, envs_contrib/word_sort) installed for a test without touching the
test session's virtual environment: ``pip install --target`` into a folder that only the test's
subprocesses see on their ``PYTHONPATH`` (entry points are found there as in site-packages)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

from tests.nested_pytest import run_pytest

BIN = Path(sys.executable).parent


def install_apart(package: Path, target: Path) -> Dict[str, str]:
    """Install ``package`` (no dependencies: skyrl-gym is the session's) into ``target``; the environment
    variables under which a subprocess sees it. A copy is built, since setuptools writes build/ and
    *.egg-info into the folder it builds."""
    source = target.with_name(target.name + "-source")
    shutil.copytree(package, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps",
           "--no-build-isolation", "--target", str(target), str(source)]
    done = subprocess.run(pip, capture_output=True, text=True)
    assert done.returncode == 0, f"pip could not install {package}:\n{done.stdout}{done.stderr}"
    path = os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def check_and_test(name: str, package: Path, target: Path, cwd: Path) -> str:
    """``skyrl-gym check NAME`` and the package's own tests, with it installed apart; pytest's summary."""
    env = install_apart(package, target)
    check = subprocess.run([str(BIN / "skyrl-gym"), "check", name, "--huge-chars", "100000"],
                           capture_output=True, text=True, env=env, cwd=cwd)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "from the dataset builder" in check.stdout and f"check {name}: OK" in check.stdout, check.stdout
    tests = run_pytest("-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(package / "tests"),
                       capture_output=True, text=True, env=env, cwd=cwd)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    return tests.stdout.strip().splitlines()[-1]
