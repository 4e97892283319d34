"""The architecture contracts in pyproject.toml ``[tool.importlinter]`` hold: the layers import one way
(skygym_sandboxes <- skyrl_gym <- skygym_adapters <- skygym_train), contributed envs build on the core
only, the core imports no torch/transformers/ray/pandas, and no package has import cycles among its modules.

``lint-imports`` runs in a subprocess from a temporary folder, so it analyses the installed packages (the
folder-to-name mapping of setup.py) rather than the repository's folders, which are not import names.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _contract_names() -> list:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomli = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli: pip install tomli")
        return [c["name"] for c in tomli.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]]
    return [c["name"] for c in tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]]


def test_every_import_contract_is_kept(tmp_path):
    if importlib.util.find_spec("importlinter") is None:
        pytest.skip("import-linter is not installed: pip install 'import-linter>=2.1' (or pip install -e '.[dev]')")
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                               "sys.exit(lint_imports_command())",
         "--config", str(PYPROJECT), "--no-cache"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"lint-imports found broken contracts:\n{output}"
    kept = re.search(r"Contracts: (\d+) kept, (\d+) broken", output)
    assert kept is not None, f"unexpected lint-imports output:\n{output}"
    flat = " ".join(output.split())
    for name in _contract_names():
        assert f"{' '.join(name.split())} KEPT" in flat, f"contract {name!r} is not reported as kept:\n{output}"
    assert int(kept.group(1)) == len(_contract_names()) and kept.group(2) == "0", output


def test_every_source_folder_is_a_regular_package_so_wheels_ship_it():
    """setup.py finds packages with find_packages, which skips folders without ``__init__.py``: an editable
    install still imports them (as namespace packages), a wheel silently leaves them out."""
    repo = PYPROJECT.parent
    missing = []
    for folder in ("skyrl_gym", "sandboxes", "adapters", "skygym_train", "envs_contrib"):
        # a folder with a pyproject.toml of its own is another distribution (envs_contrib/word_sort)
        others = [toml.parent for toml in (repo / folder).rglob("pyproject.toml")]
        for directory in [repo / folder, *(p for p in (repo / folder).rglob("*") if p.is_dir())]:
            if "__pycache__" in directory.parts or any(o == directory or o in directory.parents for o in others):
                continue
            if any(directory.glob("*.py")) and not (directory / "__init__.py").exists():
                missing.append(str(directory.relative_to(repo)))
    assert not missing, f"add an __init__.py to: {', '.join(missing)} (else `pip wheel` leaves them out)"
