"""A remote env (``skyrl-gym serve-env`` + ``make("remote", ...)``) passes the same checks as the local env: the
checker (``skyrl_gym.check_env``) and the conformance kit (every installed adapter replays the same episodes and
gets the same rewards), on gsm8k and on the multi-turn tool env text2sql (a real SQLite database)."""

from __future__ import annotations

import copy
import functools
import json
import tempfile

import pytest

pytest.importorskip(
    "fastapi", reason="serve-env needs fastapi and uvicorn: pip install 'skyrl-gym[env-service]'"
)
pytest.importorskip(
    "uvicorn", reason="serve-env needs fastapi and uvicorn: pip install 'skyrl-gym[env-service]'"
)

import skyrl_gym  # noqa: E402
from skygym_adapters.conformance import Case, Context, builtin_case_set, format_table, run_conformance  # noqa: E402
from skyrl_gym.checker import check_env, golden_rows  # noqa: E402
from skyrl_gym.remote.client import RemoteEnv  # noqa: E402
from tests.skyrl_gym.remote.service_support import env_service  # noqa: E402


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    # The operator's data folder for text2sql: the built-in cases write their database under the temp folder.
    # A client may not choose db_path (docs/security.md): the remote envs below are built without env_config.
    operator = tmp_path_factory.mktemp("operator") / "server.json"
    operator.write_text(json.dumps({"text2sql": {"db_path": tempfile.gettempdir()}}))
    with env_service("--envs", "gsm8k,text2sql", "--env-config", str(operator)) as running:
        yield running


@pytest.fixture(scope="module")
def context(tiny_model_dir, tokenizer):
    return Context(model_dir=tiny_model_dir, tokenizer=tokenizer)


def _findings(report) -> list:
    return sorted((f.severity, f.kind) for f in report.findings)


def test_the_checker_finds_the_same_on_a_remote_gsm8k_as_on_the_local_one(service):
    rows = golden_rows("gsm8k")[0][:2]
    local = check_env("gsm8k", rows)
    far = check_env(functools.partial(RemoteEnv, url=service.url, env_id="gsm8k"), rows)
    assert local.ok and far.ok, str(far)
    assert far.episodes == local.episodes and _findings(far) == _findings(local)


def test_the_checker_finds_the_same_on_a_remote_text2sql_as_on_the_local_one(service):
    with builtin_case_set("text2sql") as cases:
        rows = [
            {
                **case.row,
                "extra_info": {**case.row.get("extra_info", {}), "reference_action": case.actions[-1]},
            }
            for case in cases
        ]
        config = cases[0].env_config
        local = check_env("text2sql", rows, env_config=config)
        far = check_env(functools.partial(RemoteEnv, url=service.url, env_id="text2sql"), rows)
    assert local.ok and far.ok, str(far)
    assert far.episodes == local.episodes and _findings(far) == _findings(local)


@pytest.mark.parametrize("env_id", ["gsm8k", "text2sql"])
def test_every_installed_adapter_conforms_on_a_remote_env(service, context, env_id):
    remote_id = f"test_remote/{env_id}"  # "test" first: suites that walk the registry skip test envs
    skyrl_gym.register(
        remote_id, entry_point=functools.partial(RemoteEnv, url=service.url, env_id=env_id), provider="tests"
    )
    try:
        with builtin_case_set(env_id) as cases:
            remote_cases = [
                Case({**copy.deepcopy(c.row), "env_class": remote_id}, list(c.actions), None)
                for c in cases
            ]
            local = run_conformance(env_id, [copy.deepcopy(c) for c in cases], context=context)
            far = run_conformance(remote_id, remote_cases, context=context)
    finally:
        skyrl_gym.deregister(remote_id)
    assert local.ok, format_table(local)
    assert far.ok, format_table(far)
    assert {"rollout", "gymnasium", "openai"} <= set(far.ran()) and set(far.ran()) == set(local.ran())
