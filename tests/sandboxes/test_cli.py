"""The ``sandboxes`` command line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")
def test_run_a_file_and_get_json(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text("import sys\nprint(sys.stdin.read().upper())\nsys.exit(3)\n")
    stdin = tmp_path / "in.txt"
    stdin.write_text("abc")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "skygym_sandboxes.cli",
            "run",
            str(program),
            "--stdin",
            str(stdin),
            "--json",
            "--option",
            "warm=false",
            "--wall-s",
            "5",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["status"] == "error" and result["exit_code"] == 3
    assert result["stdout"] == "ABC\n" and result["backend"] == "local-bwrap"


def test_help_lists_the_commands():
    done = subprocess.run(
        [sys.executable, "-m", "skygym_sandboxes.cli", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0
    assert all(command in done.stdout for command in ("serve", "run", "build-image"))
