"""The catalogue: a one-line description for every env, and docs/catalogue.md generated from the registry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import skyrl_gym
from skyrl_gym.catalogue import PROVIDER, entries

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_env_has_a_one_line_description_that_reads_as_a_sentence():
    for env_id, env_spec in skyrl_gym.registry.items():
        if env_spec.provider != PROVIDER or env_id.startswith("test"):
            continue
        description = env_spec.get_description()
        assert description and "\n" not in description and "``" not in description, (env_id, description)
        assert len(description) <= 120 and description.endswith((".", ")")), (env_id, description)
        assert not description.startswith("(cannot load"), (env_id, description)


def test_the_committed_catalogue_is_up_to_date():
    # a fresh process: the registry as installed, without the envs other tests register
    generated = subprocess.run([sys.executable, "-m", "skyrl_gym.catalogue"], capture_output=True, text=True,
                               check=True, cwd=REPO_ROOT).stdout
    committed = (REPO_ROOT / "docs" / "catalogue.md").read_text(encoding="utf-8")
    assert committed == generated, ("docs/catalogue.md is out of date: "
                                    "run python -m skyrl_gym.catalogue > docs/catalogue.md")


def test_the_catalogue_lists_families_and_where_rows_come_from():
    families = entries()
    assert {"core", "games", "reasoning_gym"} <= set(families)
    rows = {env["id"]: env["rows"] for envs in families.values() for env in envs}
    assert rows["games/wordle"] == "builder" and rows["aime"] == "golden cases"
    assert rows["gsm8k"] == "builder, golden cases" and rows["search"] == "golden cases"
    assert sum(len(envs) for envs in families.values()) >= 130


def test_skyrl_gym_list_json_lists_the_whole_catalogue(capsys):
    from skyrl_gym.cli import main

    assert main(["list", "--json"]) == 0
    listed = {env["id"] for env in json.loads(capsys.readouterr().out)["envs"]}
    assert len(listed) >= 130 and {"games/wordle", "reasoning_gym/sudoku", "gsm8k"} <= listed
