"""pyproject.toml's metadata builds without setuptools' deprecation warnings, with every setuptools the
project asks for (the build's own, and the dev extra's for builds without isolation)."""

from __future__ import annotations

import warnings
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
    import setuptools
    from packaging.version import Version

    if Version(setuptools.__version__) < Version(LICENSE_EXPRESSION_SETUPTOOLS):
        pytest.skip(f"setuptools {setuptools.__version__} predates SPDX license strings: "
                    "pip install 'setuptools>=77'")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), str(PYPROJECT))
    deprecations = [str(w.message) for w in caught
                    if "deprecat" in f"{w.category.__name__} {w.message}".lower()]
    assert deprecations == []
    assert dist.metadata.license_expression == "Apache-2.0"
