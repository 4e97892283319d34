"""skyrl-gym installs beside AdapterHub's ``adapters`` (PyPI name ``adapters``) and neither shadows the other.

Our folder ``adapters/`` is installed as ``skygym_adapters`` (setup.py maps folders to import names), so
``import adapters`` must give AdapterHub's package while ``skyrl-gym conform`` and the quickstart keep
working. The mapping is checked for an editable install and for a wheel (``pip wheel``), since both must
honour it; the commands run from the wheel (the editable install runs them in every other test).

How the venv is made, and why: a fresh venv without pip whose site-packages holds a ``.pth`` line
naming the running (core) venv's site-packages, so torch, transformers, ray... are seen without being
installed again (a full install takes many minutes and gigabytes). Into that venv go only our package
(``pip install --no-deps``, editable or the wheel, from a copy of the working tree so the repository
is not written to) and ``adapters`` (``--no-deps``), with the core venv's pip (``pip --python``). The
venv's own site-packages comes first on ``sys.path``, so its packages and metadata win over anything
in the core venv. The core venv's editable install of skyrl-gym is not active there: ``.pth`` files
in a folder named by a ``.pth`` line are not processed.

AdapterHub's ``adapters`` 1.3 pins ``transformers~=4.57`` and its ``__init__`` fails to import under
transformers 5 (which the trainer and the cached models here use). The test therefore checks what
``import adapters`` resolves to (the file ``importlib`` finds lies in the venv's site-packages and is
listed in the ``adapters`` distribution's RECORD) and that, when it is imported, the code that runs is
AdapterHub's own (its module, or a traceback that starts in it), never ours.

The quickstart runs one step (``--steps 1``) on the tiny random Qwen2 the trainer tests use, with a
short generation length and ``trainer.algorithm.zero_variance_filter=false`` so that the step really
updates the policy: about 15 s, instead of the real SmolLM2 recipe (minutes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CORE_SITE = sysconfig.get_paths()["purelib"]
COPY_IGNORE = shutil.ignore_patterns(".git", ".nox", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                                     "outputs", "runs", ".pytest_cache")

PROBE = r"""
import importlib.metadata as metadata, importlib.util, json, os, sys, traceback
site = sys.argv[1]
out = {}
spec = importlib.util.find_spec("adapters")
out["adapters_origin"] = spec.origin if spec else None
dist = metadata.distribution("adapters")
out["adapters_dist_files"] = [str(f) for f in dist.files or []]
out["adapters_dist_owner"] = metadata.packages_distributions().get("adapters")
import skyrl_gym, skygym_adapters, skygym_adapters.conformance, skygym_train.quickstart, skygym_sandboxes
out["ours"] = {m.__name__: m.__file__ for m in (skyrl_gym, skygym_adapters, skygym_train.quickstart, skygym_sandboxes)}
out["skyrl_gym_dist"] = str(metadata.distribution("skyrl-gym").locate_file(""))
out["adapters_imported_by_ours"] = "adapters" in sys.modules
try:
    import adapters
    out["import"] = {"ok": True, "file": adapters.__file__}
except Exception as exc:
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    out["import"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "frames": frames}
print(json.dumps(out))
"""


def _pip(venv_python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(venv_python), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def _clean_env(venv: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", RAY_AUTH_MODE="disabled")
    return env


def _run(cmd: List[str], venv: Path, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=_clean_env(venv), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(params=["editable", "wheel"])
def side_venv(request, tmp_path):
    """A venv with skyrl-gym (editable or wheel) and AdapterHub's ``adapters`` over the core venv's packages."""
    pytest.importorskip("torch", reason="the quickstart step needs the 'train' extra: pip install -e '.[train]'")
    pip_version = tuple(int(p) for p in __import__("pip").__version__.split(".")[:2])
    if pip_version < (22, 3):
        pytest.skip(f"pip {pip_version} has no --python option: python -m pip install -U 'pip>=22.3'")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_skygym_test_core_site.pth").write_text(CORE_SITE + "\n")

    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=COPY_IGNORE)
    if request.param == "editable":
        result = _pip(python, "install", "--no-deps", "--no-build-isolation", "-e", str(source), cwd=tmp_path)
        assert result.returncode == 0, f"editable install failed:\n{result.stdout}\n{result.stderr}"
    else:
        dist = tmp_path / "dist"
        result = _pip(python, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source), cwd=tmp_path)
        assert result.returncode == 0, f"pip wheel failed:\n{result.stdout}\n{result.stderr}"
        (wheel,) = dist.glob("skyrl_gym-*.whl")
        result = _pip(python, "install", "--no-deps", str(wheel), cwd=tmp_path)
        assert result.returncode == 0, f"wheel install failed:\n{result.stdout}\n{result.stderr}"
        shutil.rmtree(source)  # the installed wheel must not need the source tree
    result = _pip(python, "install", "--no-deps", "adapters", cwd=tmp_path)
    if result.returncode != 0:
        pytest.skip("pip could not install AdapterHub's `adapters` (is a package index reachable? try "
                    f"`pip download --no-deps adapters`): {result.stderr.strip()[-300:]}")
    return {"kind": request.param, "venv": venv, "python": python, "site": site, "source": source,
            "work": tmp_path / "work"}


def test_import_adapters_is_adapterhub_and_our_commands_work(side_venv):
    venv, python, site, work = side_venv["venv"], side_venv["python"], side_venv["site"], side_venv["work"]
    work.mkdir()

    probe = _run([str(python), "-c", PROBE, str(site)], venv, work, timeout=300)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    hub_init = site / "adapters" / "__init__.py"
    assert found["adapters_origin"] == str(hub_init)
    assert "adapters/__init__.py" in found["adapters_dist_files"]
    assert found["adapters_dist_owner"] == ["adapters"]
    assert not found["adapters_imported_by_ours"], "importing our packages imported a module named 'adapters'"
    expected_home = site if side_venv["kind"] == "wheel" else side_venv["source"]
    for name, file in found["ours"].items():
        assert Path(file).is_relative_to(expected_home), f"{name} came from {file}, not from {expected_home}"
        assert not Path(file).is_relative_to(REPO), f"{name} came from the repository ({file})"
    assert Path(found["skyrl_gym_dist"]) == site
    if found["import"]["ok"]:
        assert found["import"]["file"] == str(hub_init)
    else:  # AdapterHub's own __init__ ran (and failed on its transformers pin), not a module of ours
        assert str(hub_init) in found["import"]["frames"], found["import"]

    if side_venv["kind"] == "editable":
        return  # the commands below run from the core venv's own editable install in every other test session
    conform = _run([str(venv / "bin" / "skyrl-gym"), "conform", "multiply"], venv, work)
    assert conform.returncode == 0, conform.stdout + conform.stderr
    result = next(line for line in conform.stdout.splitlines() if line.startswith("result: "))
    assert "conform" in result and "MISMATCH" not in result and "nothing checked" not in result, conform.stdout

    from skygym_adapters.models import build_tiny_model

    out = work / "quickstart"
    quickstart = _run(
        [str(python), "-m", "skygym_train.quickstart", "--out", str(out), "--steps", "1", "--checkpoint",
         "--model", str(build_tiny_model()),
         "trainer.eval_batch_size=8", "trainer.progress_bar=false", "trainer.algorithm.zero_variance_filter=false",
         "generator.sampling_params.max_generate_length=4", "generator.eval_sampling_params.max_generate_length=4"],
        venv, work,
    )
    assert quickstart.returncode == 0, quickstart.stdout + quickstart.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1 and len(summary["reward_per_step"]) == 1
    assert (out / "ckpts" / "global_step_1").is_dir() and (out / "export" / "global_step_1" / "config.json").exists()
    first_row = json.loads((out / "data" / "train.jsonl").read_text().splitlines()[0])
    assert first_row["extra_info"]["origin"]["env_id"] == "multiply"  # rows came through skyrl_gym.datasets
