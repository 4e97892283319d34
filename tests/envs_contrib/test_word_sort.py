"""envs_contrib/word_sort, the worked example of ``skyrl-gym init``: a package of its own that installs with
pip and passes ``skyrl-gym check`` and its own tests; and it still has the scaffold's shape."""

from __future__ import annotations

from pathlib import Path

from skyrl_gym.scaffold import scaffold
from tests.env_packages import check_and_test

PACKAGE = Path(__file__).resolve().parents[2] / "envs_contrib" / "word_sort"


def test_word_sort_installs_and_passes_the_checker_and_its_own_tests(tmp_path):
    summary = check_and_test("word_sort", PACKAGE, tmp_path / "site", cwd=tmp_path)
    assert "10 passed" in summary, summary


def test_word_sort_keeps_the_files_and_entry_points_that_skyrl_gym_init_writes(tmp_path):
    fresh = scaffold("word_sort", tmp_path / "fresh")
    files = sorted(str(path.relative_to(fresh)) for path in fresh.rglob("*") if path.is_file())
    ours = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*")
                  if path.is_file() and "__pycache__" not in path.parts)
    assert ours == files
    pyproject = (PACKAGE / "pyproject.toml").read_text()
    for line in (fresh / "pyproject.toml").read_text().splitlines():
        if "entry-points" in line or line.startswith("word_sort ="):
            assert line in pyproject
