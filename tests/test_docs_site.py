"""The docs site builds with MkDocs in strict mode: every page in the nav exists and every internal link resolves."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_the_docs_site_builds_strictly(tmp_path):
    pytest.importorskip("material", reason="the docs site needs mkdocs-material: pip install -e '.[dev]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for page in ("index.html", "configuration/index.html", "troubleshooting/index.html", "sandboxes/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    shutil.rmtree(tmp_path / "site")


def test_every_docs_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert [p for p in pages if p not in nav] == []
