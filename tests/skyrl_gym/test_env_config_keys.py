"""Each env says which ``env_config`` keys it reads (``config_defaults``), so a misspelt key is named where it is
given (the trainer's sections, ``--env-config`` of the CLI, serve-env's operator file) instead of leaving the env
at its default, silently."""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

import skyrl_gym
from skyrl_gym.cli import main
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.registration import declared_config, registry, unknown_config_keys
from skyrl_gym.remote.policy import check_operator_config

# How the shipped envs read a key: config_value(env_config, "k" ...), config_number(config, "k" ...),
# config.get("k" ...), and the code envs' sandbox (env_config["sandbox"], read by _code_sandbox.sandbox_for).
_READ = re.compile(r"""(?:config_value\(\s*\w+\s*,\s*|config_number\(\s*\w+\s*,\s*|config\.get\(\s*)["'](\w+)["']""")


def _shipped_classes() -> Dict[type, str]:
    classes: Dict[type, str] = {}
    for env_id in list(registry):
        creator = skyrl_gym.spec(env_id).load_entry_point()
        creator = getattr(creator, "func", creator)
        if isinstance(creator, type) and creator.__module__.startswith(("skyrl_gym.", "skygym_contrib.")):
            classes.setdefault(creator, env_id)
    return classes


def test_every_shipped_env_declares_the_keys_it_reads() -> None:
    """The declaration is what the checks read, so it must be there and whole: every key a shipped env's module
    reads from its env_config is declared by an env class of that module."""
    classes = _shipped_classes()
    assert len(classes) >= 15, sorted(c.__name__ for c in classes)
    undeclared = [cls.__name__ for cls in classes if not isinstance(cls.config_defaults, dict)]
    assert undeclared == [], f"shipped env classes without config_defaults: {undeclared}"
    by_module: Dict[str, set] = {}
    for cls in classes:
        for klass in cls.__mro__:
            if isinstance(klass.__dict__.get("config_defaults"), dict):
                by_module.setdefault(klass.__module__, set()).update(klass.__dict__["config_defaults"])
    missing = {}
    for module, declared in by_module.items():
        read = set(_READ.findall(inspect.getsource(sys.modules[module])))
        if "sandbox_for" in inspect.getsource(sys.modules[module]):
            read.add("sandbox")
        if read - declared:
            missing[module] = sorted(read - declared)
    assert missing == {}, f"keys read but not in config_defaults: {missing}"
    # the regular expression finds what it is for (a check that could not fail would prove nothing)
    assert {"search_url", "topk", "retry_attempts"} <= set(_READ.findall(inspect.getsource(
        sys.modules["skyrl_gym.envs.search.env"])))


def test_a_key_no_env_reads_is_named_with_the_closest_one() -> None:
    assert unknown_config_keys("search", {"search_url": "http://x", "topk": 3}) == {}
    problems = unknown_config_keys("search", {"serch_url": "http://x", "color": "red"})
    assert problems["serch_url"].startswith("env 'search' has no env_config key 'serch_url' (did you mean "
                                            "'search_url'? it reads: log_requests, max_turns, retry_attempts")
    assert problems["color"] == ("env 'search' has no env_config key 'color' (it reads: log_requests, max_turns, "
                                 "retry_attempts, retry_delay_s, search_url, timeout, topk)")
    # an alias reads its class's keys; an env that reads none says so
    assert unknown_config_keys("sql", {"db_path": "/d"}) == {} and "db_pth" in unknown_config_keys("sql", {"db_pth": 1})
    assert unknown_config_keys("gsm8k", {"x": 1}) == {"x": "env 'gsm8k' has no env_config key 'x' (it reads no "
                                                            "env_config key)"}
    # reasoning-gym ids are partials of one class: they read its keys
    assert declared_config("reasoning_gym/basic_arithmetic")["seed"] == 0


@pytest.mark.parametrize("env_id", ["gsm8k", "math", "search", "reasoning_gym/chain_sum"])
def test_the_judge_is_a_key_of_every_env(env_id) -> None:
    """make() reads ``judge`` for any env whose rows are judged: the trainer's check, serve-env's --env-config and
    the commands refused environment.skyrl_gym.gsm8k.judge, the way the docs set a judge."""
    assert unknown_config_keys(env_id, {"judge": {"base_url": "http://127.0.0.1:9/v1"}}) == {}


class _Undeclared(BaseTextEnv):
    def step(self, action: str) -> Any:
        raise NotImplementedError


class _Declared(_Undeclared):
    config_defaults: Dict[str, Any] = {"rounds": 3}


@pytest.fixture
def temporary_envs():
    skyrl_gym.register(id="test_undeclared_cfg", entry_point=_Undeclared)
    skyrl_gym.register(id="test_declared_cfg", entry_point=_Declared)
    yield
    skyrl_gym.deregister("test_undeclared_cfg")
    skyrl_gym.deregister("test_declared_cfg")


def test_an_env_that_declares_nothing_is_not_checked(temporary_envs) -> None:
    """A third-party env from before the declaration keeps working with any key; one that declares is checked."""
    assert declared_config("test_undeclared_cfg") is None
    assert unknown_config_keys("test_undeclared_cfg", {"anything": 1}) == {}
    assert list(unknown_config_keys("test_declared_cfg", {"round": 1})) == ["round"]
    assert unknown_config_keys("no_such_env", {"x": 1}) == {}  # an unknown id is reported where ids are


def _cli(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", [
    ["check", "multiply"],
    ["step", "multiply", "--extras", '{"reward_spec": {"ground_truth": "12"}}'],
    ["audit", "multiply"],
])
def test_the_cli_refuses_a_key_the_env_does_not_read(capsys, command) -> None:
    code, _, err = _cli(capsys, [*command, "--env-config", '{"boxed_wrong_rewrd": 0.2}'])
    assert code == 2
    assert ("--env-config: env 'multiply' has no env_config key 'boxed_wrong_rewrd' (did you mean "
            "'boxed_wrong_reward'? it reads: boxed_wrong_reward)") in err, err


def test_score_refuses_a_key_the_envs_of_its_rows_do_not_read(capsys, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    row = {"prompt": [{"role": "user", "content": "3*4?"}], "env_class": "multiply",
           "reward_spec": {"ground_truth": "12"}, "response": "\\boxed{12}"}
    rows.write_text(json.dumps(row) + "\n")
    code, _, err = _cli(capsys, ["score", "--rows", str(rows), "--quiet", "--env-config", '{"timeout": 5}'])
    assert code == 2 and "env 'multiply' has no env_config key 'timeout'" in err, err
    config = tmp_path / "config.json"  # @file, as the other commands take it
    config.write_text('{"boxed_wrong_reward": 0.25}')
    code, out, err = _cli(capsys, ["score", "--rows", str(rows), "--quiet", "--response-field", "response",
                                   "--env-config", f"@{config}"])
    assert code == 0 and "multiply" in out, err


def test_info_lists_the_keys_an_env_reads(capsys, temporary_envs) -> None:
    code, out, _ = _cli(capsys, ["info", "search"])
    assert code == 0 and "env_config:   log_requests=false, max_turns=2, retry_attempts=" in out, out
    assert 'search_url="http://127.0.0.1:8000/retrieve"' in out
    _, out, _ = _cli(capsys, ["info", "swe", "--json"])
    assert json.loads(out)["env_config"]["docker_host"] is None
    _, out, _ = _cli(capsys, ["info", "gsm8k"])
    assert "env_config:   none (it reads no key)" in out
    _, out, _ = _cli(capsys, ["info", "test_undeclared_cfg"])
    assert "env_config:   (its keys are not declared: config_defaults)" in out


def test_serve_env_refuses_an_operator_key_its_env_does_not_read() -> None:
    with pytest.raises(ValueError, match=r"--env-config text2sql\.db_pth: env 'text2sql' has no env_config key "
                                         r"'db_pth' \(did you mean 'db_path'\?"):
        check_operator_config({"text2sql": {"db_pth": "/data"}})
    # "*" and "namespace/*" sections hold keys for envs of many kinds: not checked against one
    assert check_operator_config({"*": {"sandbox": {"backend": "local"}, "judge": {"model": "m"}},
                                  "reasoning_gym/*": {"whatever": 1}, "text2sql": {"db_path": "/data"}})




def test_make_warns_once_of_a_key_the_env_does_not_read() -> None:
    """``make`` took ``env_config={"max_turn": 3}`` and left the env at its defaults without a word."""
    import warnings

    from skyrl_gym import registration

    row = {"reward_spec": {"ground_truth": "6"}}
    registration._CHECKED_CONFIGS.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            skyrl_gym.make("multiply", extras=row, env_config={"max_turn": 3, "boxed_wrong_reward": 0.0})
        skyrl_gym.make("multiply", extras=row, env_config={"boxed_wrong_reward": 0.0, "judge": None})
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert said == ["env 'multiply' has no env_config key 'max_turn' (it reads: boxed_wrong_reward); it is ignored"]
    assert caught[0].filename == __file__  # pointed at the caller's line, not at make's
