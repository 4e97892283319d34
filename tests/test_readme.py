"""The README's code is real: every snippet it shows comes verbatim from docs/snippets/, where tests run it."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "docs" / "snippets").glob("*.py")))
def test_every_snippet_is_shown_verbatim_in_the_readme(name):
    assert (REPO / "docs" / "snippets" / name).read_text().strip() in README


def test_custom_env_snippet_runs_and_is_short(capsys):
    snippet = (REPO / "docs" / "snippets" / "custom_env.py").read_text()
    assert len(snippet.strip().splitlines()) < 30
    import skyrl_gym

    try:
        runpy.run_path(str(REPO / "docs" / "snippets" / "custom_env.py"))
        assert "'reward': 1.0, 'done': True" in capsys.readouterr().out
        # the checker: a cold run's check of the snippet FAILED on a KeyError for its stand-in row
        from skyrl_gym.checker import check_env

        alone = check_env("reverse")  # no rows: nothing can be checked, and the report says to pass some
        assert not alone.ok and "refused the checker's stand-in row" in str(alone) and "pass rows" in str(alone)
        assert "skyrl-gym check reverse --rows FILE" in str(alone)
        # a class is no id the command line knows: the advice stays in Python (a contributor's cold run)
        by_class = check_env(skyrl_gym.registry["reverse"].load_entry_point())
        assert "pass rows: check_env(env, rows)" in str(by_class) and "skyrl-gym check" not in str(by_class)
        row = {"prompt": [{"role": "user", "content": "Reverse 'gym'."}], "reward_spec": {"ground_truth": "gym"},
               "extra_info": {"reference_action": "\\boxed{myg}"}}
        checked = check_env("reverse", [row])
        assert checked.ok and not checked.warnings and not checked.skipped, checked
    finally:
        skyrl_gym.deregister("reverse")


def test_gymnasium_snippet_runs_as_written(capsys):
    """The README's Gymnasium code builds its own rows, so a new user can paste it (it read a Parquet file the
    user did not have)."""
    pytest.importorskip("gymnasium", reason="the Gymnasium bridge needs the 'gymnasium' extra: "
                                            "pip install -e '.[gymnasium]'")
    runpy.run_path(str(REPO / "docs" / "snippets" / "gymnasium_quickstart.py"))
    assert capsys.readouterr().out.strip().splitlines()[-1] == "1.0 True False"
