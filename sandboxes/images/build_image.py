"""Build the docker backend's image locally: a minimal Debian root filesystem with python3, numpy
and sympy made by ``debootstrap`` and loaded with ``docker import``. No image registry is involved.

    python -m skygym_sandboxes.images.build_image            # or: skygym-sandboxes build-image
    python -m skygym_sandboxes.images.build_image --rebuild

The root filesystem tarball is cached (``$XDG_CACHE_HOME/skyrl-gym``), so a rebuild after a
daemon reset takes seconds. ``debootstrap`` needs root and the Debian package mirror that apt
already uses on this machine (read from apt's sources).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

DEFAULT_SUITE = "bookworm"
# Debian packages in the image beside the minimal base: Python with numpy and sympy, which
# model-written solutions import. The tag names the set, so an image built without them is not reused.
PACKAGES = ("python3", "python3-numpy", "python3-sympy")
DEFAULT_TAG = "skyrl-gym-sandbox-python:bookworm-numpy-sympy"


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "skyrl-gym"


def apt_mirror() -> Optional[str]:
    """The Debian mirror apt uses here (deb822 ``URIs:`` or a ``deb URL suite`` line), if any."""
    candidates = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in candidates:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in re.finditer(r"^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(\S+)", text, re.MULTILINE):
            uri = match.group(1)
            if "debian" in uri and "security" not in uri:
                return uri
    return None


def build_rootfs_tarball(
    suite: str = DEFAULT_SUITE, rebuild: bool = False, packages: Sequence[str] = PACKAGES
) -> Path:
    """``debootstrap --variant=minbase --include=PACKAGES SUITE`` (by default python3, numpy and
    sympy) packed as a tarball (cached, per suite and package set)."""
    tarball = cache_dir() / f"sandbox-rootfs-{suite}-{'-'.join(packages)}.tar"
    if tarball.exists() and not rebuild:
        return tarball
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise RuntimeError("debootstrap needs root to build the sandbox root filesystem")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sandbox-rootfs-") as workdir:
        rootfs = Path(workdir) / "rootfs"
        command = ["debootstrap", "--variant=minbase", "--include=" + ",".join(packages), suite, str(rootfs)]
        mirror = apt_mirror()
        if mirror:
            command.append(mirror)
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"debootstrap failed ({done.returncode}): {done.stdout[-1500:]}{done.stderr[-1500:]}"
            )
        # Drop what a sandbox never needs: package caches and lists.
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / leftover).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], check=True)
        partial.replace(tarball)
    return tarball


def image_exists(client: Any, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_image(
    tag: Optional[str] = None,
    suite: str = DEFAULT_SUITE,
    rebuild: bool = False,
    client: Any = None,
    packages: Sequence[str] = PACKAGES,
) -> str:
    """Make sure the image ``tag`` exists in the Docker engine (import it from a root filesystem of
    ``packages`` if needed); return the tag."""
    import docker

    tag = tag or DEFAULT_TAG
    client = client or docker.from_env()
    if image_exists(client, tag) and not rebuild:
        return tag
    tarball = build_rootfs_tarball(suite, rebuild=rebuild, packages=packages)
    repository, _, version = tag.partition(":")
    client.api.import_image(
        src=str(tarball),
        repository=repository,
        tag=version or "latest",
        changes=['CMD ["/usr/bin/python3"]', "ENV LANG=C.UTF-8"],
    )
    if not image_exists(client, tag):
        raise RuntimeError(f"docker import did not produce the image {tag}")
    return tag


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tag", default=DEFAULT_TAG)
    parser.add_argument("--suite", default=DEFAULT_SUITE)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    print(build_image(args.tag, args.suite, args.rebuild))


if __name__ == "__main__":
    main()
