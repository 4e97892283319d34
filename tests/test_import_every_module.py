"""Importing any module of any of our packages raises nothing and does nothing: no CLI run, no descriptor taken,
nothing printed. Tools that walk a package (documentation builders, test collectors, ``pydoc``, ``pkgutil``) import
every module, so an import-time side effect breaks them.

The imports run in a fresh interpreter, so no module is already loaded. A module that needs an optional extra that
is not installed (``torch`` behind ``train``, ``verl`` behind ``verl``...) is skipped, naming the extra to install;
any other failure, a missing module that no extra provides included, fails the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest

from skyrl_gym.extras import extra_for_module, install_command
from tests.nested_pytest import run_pytest

PACKAGES = ("skyrl_gym", "skygym_sandboxes", "skygym_adapters", "skygym_train", "skygym_contrib")

_IMPORT_ALL = """
import importlib, json, pkgutil, sys
failures = {}
modules = []
for top in sys.argv[2:]:
    package = importlib.import_module(top)
    for info in pkgutil.walk_packages(package.__path__, top + ".", onerror=lambda name: None):
        modules.append(info.name)
        try:
            importlib.import_module(info.name)
        except BaseException as exc:  # SystemExit from a module that runs a CLI at import counts too
            failures[info.name] = {"error": f"{type(exc).__name__}: {exc}"[:500],
                                   "missing": getattr(exc, "name", None) if isinstance(exc, ImportError) else None}
with open(sys.argv[1], "w") as handle:
    json.dump({"modules": modules, "failures": failures}, handle)
"""


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("imports") / "result.json"
    result = subprocess.run([sys.executable, "-c", _IMPORT_ALL, str(out), *PACKAGES], capture_output=True, text=True,
                            timeout=600, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    return {**json.loads(out.read_text()), "stdout": result.stdout}


def _split_failures(failures: Dict[str, dict]) -> Tuple[Dict[str, str], Dict[str, str]]:
    """(broken modules and their errors, modules that need a missing optional extra and which one)."""
    broken, needs_extra = {}, {}
    for module, failure in failures.items():
        extra = extra_for_module(failure["missing"])  # None for a module no extra provides (ours included)
        if extra is not None:
            needs_extra[module] = f"needs {failure['missing']}: {install_command(extra)}"
        else:
            broken[module] = failure["error"]
    return broken, needs_extra


def test_importing_every_module_of_every_package_raises_nothing(imported: dict) -> None:
    broken, _ = _split_failures(imported["failures"])
    assert broken == {}
    assert imported["stdout"] == ""  # nothing prints at import (a __main__ module that runs its CLI did)
    assert len(imported["modules"]) > 100  # the walk found the packages' modules


def test_modules_behind_an_optional_extra_import_once_it_is_installed(imported: dict) -> None:
    _, needs_extra = _split_failures(imported["failures"])
    if needs_extra:
        pytest.skip(f"{len(needs_extra)} modules need an optional extra that is not installed: "
                    + "; ".join(f"{m}: {why}" for m, why in sorted(needs_extra.items())))


def test_the_swe_pytest_plugin_takes_no_descriptor_when_imported_outside_a_test_run() -> None:
    """The report plugin is copied into SWE containers and loaded there by pytest with SKYGYM_REPORT_FD set; imported
    as part of the package it must leave the process's descriptors alone (it closed descriptor 3 and raised
    OSError where none was open)."""
    script = ("import os; read_fd, write_fd = os.pipe(); os.dup2(write_fd, 3); "  # a descriptor 3 of its own
              "import skyrl_gym.envs.swe._pytest_report; os.fstat(3); print('kept')")  # fstat raises if it was closed
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "kept"


def test_the_swe_pytest_plugin_reports_each_test_on_the_descriptor_it_is_given(tmp_path: Path) -> None:
    """What the harness does in a container, with this machine's pytest: the plugin on PYTHONPATH, loaded with -p,
    the report descriptor in SKYGYM_REPORT_FD, the nonce in the file SKYGYM_REPORT_NONCE names (deleted once read),
    one line per test and an end line, each the nonce and JSON."""
    import os

    from skyrl_gym.envs.swe.runtime import REPORT_HELPERS, REPORT_PLUGIN

    helpers = tmp_path / "helpers"
    helpers.mkdir()
    for name, source in REPORT_HELPERS.items():  # the plugin and the channel it writes on
        (helpers / name).write_bytes(source)
    # the plugin writes JSON by hand (not with json, which code under test could patch): a message with quotes,
    # backslashes, control characters, non-ASCII text and a lone surrogate must come back as it was
    odd = 'q"\\\\ \\x01\\t é \\ud800'
    (tmp_path / "test_sample.py").write_text("def test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2\n\n"
                                             f"def test_odd():\n    raise ValueError('{odd}')\n")
    nonce = "0123456789abcdef0123456789abcdef"
    (helpers / "nonce").write_text(nonce)
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(helpers), "SKYGYM_REPORT_FD": str(write_fd),
           "SKYGYM_REPORT_NONCE": str(helpers / "nonce")}
    try:
        result = run_pytest(
            "-p", REPORT_PLUGIN, "-p", "no:cacheprovider", "-o", "addopts=", "-q",
            f"--rootdir={tmp_path}", str(tmp_path / "test_sample.py"),
            capture_output=True, text=True, timeout=120, pass_fds=(write_fd,), env=env, cwd=tmp_path,
        )
        os.close(write_fd)
        write_fd = -1
        with os.fdopen(read_fd, encoding="utf-8") as report:
            read_fd = -1
            text = report.read()
    finally:
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
    assert result.returncode == 1, result.stdout + result.stderr
    assert not (helpers / "nonce").exists()
    assert text.endswith("\n") and all(line.startswith(nonce) for line in text[:-1].split("\n"))
    lines = [json.loads(line[len(nonce):]) for line in text[:-1].split("\n")]
    outcomes = {line["nodeid"].split("::")[-1]: line["outcome"] for line in lines if "nodeid" in line}
    assert outcomes == {"test_ok": "passed", "test_bad": "failed", "test_odd": "failed"}
    odd_message = next(line["message"] for line in lines if line.get("nodeid", "").endswith("test_odd"))
    assert 'ValueError: q"\\ \x01\t é \ud800' in odd_message
    assert lines[-1] == {"end": True, "exitstatus": 1}
