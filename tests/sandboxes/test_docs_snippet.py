"""The quick-start snippet of docs/sandboxes.md is real: it is run here and must match the page."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SNIPPET = REPO / "docs" / "snippets" / "sandbox_quickstart.py"


def test_snippet_is_in_the_docs():
    assert SNIPPET.read_text().strip() in (REPO / "docs" / "sandboxes.md").read_text()


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")
def test_snippet_runs_and_prints_what_it_says(capsys):
    runpy.run_path(str(SNIPPET))
    assert capsys.readouterr().out == "ok cba\ntimeout killed\n"
