"""pyproject.toml's metadata builds without setuptools' deprecation warnings, with every setuptools the
project asks for (the build's own, and the dev extra's for builds without isolation)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
LICENSE_EXPRESSION_SETUPTOOLS = "77"  # the first setuptools that reads `project.license` as an SPDX string


def _setuptools_minimums() -> list:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli: "
                                                     "pip install tomli")
    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads(PYPROJECT.read_text())
    requirements = [Requirement(r) for r in
                    project["build-system"]["requires"] + project["project"]["optional-dependencies"]["dev"]]
    return [Version(spec.version) for r in requirements if r.name == "setuptools" for spec in r.specifier
            if spec.operator == ">="]


def test_every_setuptools_the_project_asks_for_reads_its_license_expression():
    from packaging.version import Version

    minimums = _setuptools_minimums()
    assert len(minimums) == 2 and all(m >= Version(LICENSE_EXPRESSION_SETUPTOOLS) for m in minimums), minimums


def test_the_metadata_builds_without_deprecation_warnings():
    """In a fresh interpreter: setuptools replaces ``distutils`` on import, which fails where another test of the
    same process has imported the standard library's already."""
    from importlib.metadata import version

    from packaging.version import Version

    installed = version("setuptools")  # not imported here: see above
    if Version(installed) < Version(LICENSE_EXPRESSION_SETUPTOOLS):
        pytest.skip(f"setuptools {installed} predates SPDX license strings: pip install 'setuptools>=77'")
    probe = (
        "import json, sys, warnings\n"
        "from setuptools.config.pyprojecttoml import apply_configuration\n"
        "from setuptools.dist import Distribution\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    dist = apply_configuration(Distribution(), sys.argv[1])\n"
        "print(json.dumps({'license': dist.metadata.license_expression, 'deprecations': [str(w.message) for w in "
        "caught if 'deprecat' in f'{w.category.__name__} {w.message}'.lower()]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(PYPROJECT)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"license": "Apache-2.0", "deprecations": []}
