"""The README's code is real: its snippets are run here, and must match the files they come from."""

from __future__ import annotations

import runpy
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_custom_env_snippet_is_in_the_readme_and_runs(capsys):
    snippet = (REPO / "docs" / "snippets" / "custom_env.py").read_text()
    assert snippet.strip() in (REPO / "README.md").read_text()
    assert len(snippet.strip().splitlines()) < 30
    import skyrl_gym

    try:
        runpy.run_path(str(REPO / "docs" / "snippets" / "custom_env.py"))
        assert "'reward': 1.0, 'done': True" in capsys.readouterr().out
    finally:
        skyrl_gym.deregister("reverse")
