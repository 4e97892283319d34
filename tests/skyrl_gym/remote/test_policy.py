"""The policy of what a serve-env client may set (``skyrl_gym.remote.policy``), without a server: every key a
built-in env reads is classified, and the rules hold at their edges."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from skyrl_gym.remote.policy import (
    CLIENT_KEYS,
    OPERATOR_KEYS,
    PolicyError,
    Rule,
    check_operator_config,
    client_rules,
    effective_env_config,
)

REPO = Path(__file__).resolve().parents[3]
READS = re.compile(
    r"""config_value\(\s*(?:self\.)?env_config,\s*["'](\w+)["']"""  # config_value(env_config, "key", ...)
    r"""|config\.get\(\s*["'](\w+)["']"""  # config = config_dict(env_config); config.get("key")
    r"""|config_dict\([^)]*\)\.get\(\s*["'](\w+)["']"""
    r"""|config_number\(\s*\w+,\s*["'](\w+)["']"""  # config_number(config, "key", default, env_id)
)


# Matches of the scan that are not env_config keys: reasoning_gym's composite reads "datasets" from its
# settings.
NOT_ENV_CONFIG = {"datasets"}


def keys_read_by_envs() -> set:
    found = set()
    for folder in (REPO / "skyrl_gym" / "envs", REPO / "envs_contrib"):
        for source in folder.rglob("*.py"):
            for match in READS.finditer(source.read_text(encoding="utf-8")):
                found.add(next(group for group in match.groups() if group))
    return found - NOT_ENV_CONFIG


def test_every_env_config_key_a_built_in_env_reads_is_classified():
    """A new key an env reads must be listed as a client key (with its bounds) or an operator key, or a client
    of serve-env gets a 422 for it while nobody decided whether a client may set it."""
    client = {key for rules in CLIENT_KEYS.values() for key in rules}
    read = keys_read_by_envs()
    assert {"sandbox", "db_path", "search_url", "timeout", "docker_host"} <= read  # the scan sees the envs
    unclassified = sorted(read - client - set(OPERATOR_KEYS))
    assert unclassified == [], f"classify in skyrl_gym/remote/policy.py: {unclassified}"
    assert not client & set(OPERATOR_KEYS)


def test_ceilings_come_from_the_operator_else_the_table():
    operator = {"*": {"judge": {"base_url": "http://judge"}}, "code_interpreter": {"timeout": 30}}
    config = effective_env_config(operator, "code_interpreter", {"timeout": 25, "verify_timeout": None})
    assert config == {"judge": {"base_url": "http://judge"}, "timeout": 25}  # null: the operator's value
    with pytest.raises(PolicyError, match="env_config.timeout .* ceiling of 30"):
        effective_env_config(operator, "code_interpreter", {"timeout": 31})
    with pytest.raises(PolicyError, match="env_config.verify_timeout .* ceiling of 5"):
        effective_env_config(operator, "code_interpreter", {"verify_timeout": 6})
    with pytest.raises(PolicyError, match="whole number"):
        effective_env_config(operator, "code_interpreter", {"max_output_chars": 10.5})
    with pytest.raises(PolicyError, match="true or false"):
        effective_env_config(operator, "code_interpreter", {"stateful": 1})
    assert effective_env_config({}, "gsm8k_multi_turn", {"format_score": 0}) == {"format_score": 0}  # no stalling
    with pytest.raises(PolicyError, match="env_config.format_score"):
        effective_env_config({}, "gsm8k_multi_turn", {"format_score": 2})
    with pytest.raises(PolicyError, match="env_config.seed must be from 0"):
        effective_env_config({}, "games/nim", {"seed": -1})
    assert effective_env_config({"games/*": {"seed": 3}}, "games/nim", {"max_turns": 4}) == {
        "seed": 3,
        "max_turns": 4,
    }


def test_operator_configs_are_checked_at_start():
    with pytest.raises(ValueError, match="--allow-no-isolation"):
        check_operator_config({"lcb": {"sandbox": {"isolation": "none"}}})
    assert check_operator_config({"lcb": {"sandbox": {"isolation": "none"}}}, allow_no_isolation=True)
    with pytest.raises(ValueError, match="section 'gsm8k' must be an object"):
        check_operator_config({"gsm8k": 3})
    with pytest.raises(ValueError, match="JSON object"):
        check_operator_config([1])


def test_a_section_naming_no_registered_env_is_refused_at_start():
    """A misspelt section applied to no env: the operator's 1 s ceiling was silently the env's default 5 (a new
    operator's cold run)."""
    with pytest.raises(ValueError, match=r"section 'mth': no env registered with id 'mth'\. Did you mean: 'math'"):
        check_operator_config({"mth": {"verify_timeout": 1}})
    with pytest.raises(ValueError, match=r"section 'gmes/\*': no registered env id starts with 'gmes/'"):
        check_operator_config({"gmes/*": {"max_turns": 3}})
    assert check_operator_config({"*": {}, "games/*": {"max_turns": 3}, "math": {"verify_timeout": 1}})


def test_the_docs_example_of_an_operator_config_is_accepted():
    page = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    example = json.loads(re.search(r"```json\n(.*?)```", page, re.DOTALL).group(1))
    operator = check_operator_config(example)
    config = effective_env_config(operator, "code_interpreter", {"timeout": 20, "max_turns": 3})
    assert config["sandbox"] == example["code_interpreter"]["sandbox"] and config["timeout"] == 20
    assert config["judge"] == example["*"]["judge"]


def test_a_contributed_env_may_declare_its_client_keys():
    class Contributed:
        client_env_config = {"difficulty": Rule("range", "how hard", low=1, high=5, whole=True)}

    assert client_rules("acme/puzzle", Contributed) == Contributed.client_env_config
    assert effective_env_config({}, "acme/puzzle", {"difficulty": 3}, Contributed) == {"difficulty": 3}
    with pytest.raises(PolicyError, match="env_config.difficulty must be from 1 to 5"):
        effective_env_config({}, "acme/puzzle", {"difficulty": 9}, Contributed)
    with pytest.raises(PolicyError, match="env_config.difficulty is not a key a client may set"):
        effective_env_config({}, "acme/puzzle", {"difficulty": 3}, object)  # undeclared: no client keys
    # two million keys were sorted on the server's event loop before the first was refused: the count says it
    with pytest.raises(PolicyError, match=r"env_config has 100,000 keys; a client may set at most these 1 of env "
                                          r"'acme/puzzle': \['difficulty'\]"):
        effective_env_config({}, "acme/puzzle", {f"k{i}": 0 for i in range(100_000)}, Contributed)


def test_a_ceiling_is_the_envs_own_default_written_once():
    """Every limit a client may lower has a ceiling: the operator's, else an explicit one, else the default
    the env itself uses (its class's ``config_defaults``, which the env reads: one place holds each
    default)."""
    from skyrl_gym.registration import spec

    for env_id, rules in CLIENT_KEYS.items():
        if env_id.endswith("/*"):
            continue
        defaults = getattr(spec(env_id).load_entry_point(), "config_defaults", {})
        operator = {env_id: {"db_path": "/srv/data", "images": ["skyrl-gym-swe-"]}}  # what servers need for sql, swe
        for key, rule in rules.items():
            if rule.kind == "ceiling" and rule.ceiling is None and key in defaults and defaults[key] is None:
                # unbounded unless the operator bounds it (lcb's total_timeout): a client may only lower that bound
                with pytest.raises(PolicyError, match=f"env_config.{key} has no ceiling on this server"):
                    effective_env_config(operator, env_id, {key: 10})
                bounded = {env_id: {**operator[env_id], key: 30}}
                assert effective_env_config(bounded, env_id, {key: 10})[key] == 10
                assert effective_env_config(bounded, env_id, {})[key] == 30
                with pytest.raises(PolicyError, match="above this server's ceiling of 30"):
                    effective_env_config(bounded, env_id, {key: 60})
            elif rule.kind == "ceiling" and rule.ceiling is None:
                assert isinstance(defaults.get(key), (int, float)), f"{env_id}: no default for {key}"
                default = defaults[key]
                assert effective_env_config(operator, env_id, {key: default})[key] == default
                with pytest.raises(PolicyError, match=f"env_config.{key} .* ceiling of {default:g}"):
                    effective_env_config(operator, env_id, {key: default * 2})
    # lcb's tests run with 2048 MB by default: a client may ask for that (the table said 1024: a stale copy)
    assert effective_env_config({}, "lcb", {"memory_mb": 2048})["memory_mb"] == 2048


def test_a_limit_with_no_ceiling_anywhere_is_refused_not_unbounded():
    class Contributed:  # declares a limit a client may lower, but no default for it
        client_env_config = {"budget_s": Rule("ceiling", "seconds of budget")}

    with pytest.raises(PolicyError, match="env_config.budget_s has no ceiling on this server"):
        effective_env_config({}, "acme/puzzle", {"budget_s": 10}, Contributed)
    operator = {"acme/puzzle": {"budget_s": 20}}
    assert effective_env_config(operator, "acme/puzzle", {"budget_s": 10}, Contributed) == {"budget_s": 10}
