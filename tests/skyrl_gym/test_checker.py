"""``skyrl_gym.check_env``: each kind of contract breach caught on a small, deliberately broken env,
and a clean report on the built-in envs."""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
import time
from typing import Any, Iterator

import pytest

import skyrl_gym
from skyrl_gym.checker import CheckReport, Finding, check_env
from skyrl_gym.envs.base_text_env import BaseTextEnv
from tests.skyrl_gym.builtin_rows import BUILTIN_ROWS, builtin_env_ids

ROWS = [
    {"prompt": [{"role": "user", "content": "Say 7."}], "reward_spec": {"ground_truth": "7"}},
    {"prompt": [{"role": "user", "content": "Say 8."}], "reward_spec": {"ground_truth": "8"}},
]


class SayTheNumberEnv(BaseTextEnv):
    """A correct env: 1.0 when the action contains the ground truth, one step."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.answer = self.extras["reward_spec"]["ground_truth"]

    def step(self, action):
        self.turns += 1
        return {"observations": [], "reward": float(self.answer in action), "done": True, "metadata": {}}


class WrongTypesEnv(SayTheNumberEnv):
    def step(self, action):
        return {"observations": "not a list", "reward": "1", "done": 1, "metadata": None}


class BadMessagesEnv(SayTheNumberEnv):
    def step(self, action):
        return {"observations": [{"role": "user"}, "hi"], "reward": 0.0, "done": True, "metadata": {}}


class NanRewardEnv(SayTheNumberEnv):
    def step(self, action):
        return {"observations": [], "reward": float("nan"), "done": True, "metadata": {}}


class MisspeltKeyEnv(SayTheNumberEnv):
    def step(self, action):
        return {"observations": [], "rewards": 1.0, "done": True, "metadata": {}}


class NeverDoneEnv(SayTheNumberEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.max_turns = 2

    def step(self, action):
        return {"observations": [{"role": "user", "content": "more"}], "reward": 0.0, "done": False, "metadata": {}}


class CrashesOnEmptyEnv(SayTheNumberEnv):
    def step(self, action):
        if not action:
            raise ValueError("cannot score an empty answer")
        return super().step(action)


_counter = itertools.count()


class FlakyRewardEnv(SayTheNumberEnv):
    def step(self, action):
        return {"observations": [], "reward": float(next(_counter) % 2), "done": True, "metadata": {}}


class CloseTwiceFailsEnv(SayTheNumberEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.handle = object()

    def close(self):
        if self.handle is None:
            raise RuntimeError("already closed")
        self.handle = None


class BadInitEnv(SayTheNumberEnv):
    def init(self, prompt=None):
        return "the prompt"


class HangsOnLongTextEnv(SayTheNumberEnv):
    def step(self, action):
        if len(action) > 1000:
            time.sleep(60)  # far past the test's bound: a check that waited for it cannot pass on a slow machine
        return super().step(action)


class SQLiteAnswerEnv(SayTheNumberEnv):
    """Keeps its answer in a real SQLite database; sqlite3 connections refuse use from another thread."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE answer (value TEXT)")
        self.db.execute("INSERT INTO answer VALUES (?)", (self.answer,))

    def step(self, action):
        (value,) = self.db.execute("SELECT value FROM answer").fetchone()
        return {"observations": [], "reward": float(value in action), "done": True, "metadata": {}}

    def close(self):
        self.db.close()  # sqlite3 allows closing twice


class EchoEnv(SayTheNumberEnv):
    """Echoes the action back as a user message: 10 MB of action become 10 MB of context."""

    def step(self, action):
        return {"observations": [{"role": "user", "content": f"You said: {action}"}], "reward": 0.0, "done": True,
                "metadata": {}}


class BadMetricsEnv(SayTheNumberEnv):
    def get_metrics(self):
        return ["accuracy", 1.0]


class WrongAnswerKeyEnv(SayTheNumberEnv):
    def step(self, action):
        return {"observations": [], "reward": 0.0, "done": True, "metadata": {}}


@pytest.fixture
def registered() -> Iterator[Any]:
    ids = []

    def register(env_class) -> str:
        env_id = f"checker_test_{env_class.__name__}"
        skyrl_gym.register(id=env_id, entry_point=env_class)
        ids.append(env_id)
        return env_id

    yield register
    for env_id in ids:
        skyrl_gym.deregister(env_id)


@contextlib.contextmanager
def _with_builder(registered, builder, env_class=None) -> Iterator[str]:
    """A registered ``env_class`` (SayTheNumberEnv) whose dataset builder is ``builder``, its rows naming the env."""
    from skyrl_gym import datasets

    env_id = registered(env_class or SayTheNumberEnv)

    def with_env_class(split="train", size=None, seed=0):
        for row in builder(split, size, seed):
            yield {**row, "env_class": env_id} if "env_class" in row else row

    datasets.register_dataset(env_id, with_env_class)
    try:
        yield env_id
    finally:
        datasets.deregister_dataset(env_id)


def _errors_of_kind(report: CheckReport, kind: str) -> list:
    return [f for f in report.errors if f.kind == kind]


def test_a_correct_env_passes(registered):
    report = check_env(registered(SayTheNumberEnv), ROWS)
    assert report.ok and report.findings == [], str(report)
    assert report.rows_checked == 2
    assert report.episodes == 2 * 5  # empty, huge, unicode, unclosed tags, junk in well-formed tags per row
    assert str(report).startswith("check checker_test_SayTheNumberEnv: OK - 2 row(s), 10 episode(s)")


def test_wrong_types_are_named(registered):
    report = check_env(registered(WrongTypesEnv), ROWS[:1], check_determinism=False)
    messages = " | ".join(f.message for f in _errors_of_kind(report, "types"))
    assert "step() observations (turn 1) must be a list of chat messages, got str" in messages
    assert "reward must be a float, got str '1'" in messages
    assert "done must be a bool, got int 1" in messages
    assert "metadata must be a dict, got NoneType" in messages
    assert not report.ok


def test_malformed_messages_are_named(registered):
    report = check_env(registered(BadMessagesEnv), ROWS[:1], adversarial=False, actions={"seven": "7"})
    messages = [f.message for f in _errors_of_kind(report, "types")]
    assert any("[0] needs string 'role' and 'content'" in m for m in messages)
    assert any("[1] must be a dict with 'role' and 'content', got str" in m for m in messages)


def test_non_finite_reward(registered):
    report = check_env(registered(NanRewardEnv), ROWS[:1], adversarial=False, actions={"seven": "7"})
    [finding] = _errors_of_kind(report, "reward")
    assert "reward is nan on turn 1; rewards must be finite" in finding.message
    assert (finding.row_index, finding.action) == (0, "seven")
    assert not _errors_of_kind(report, "determinism")  # nan != nan, but the same reward twice is deterministic


def test_a_misspelt_key_of_the_step_output_is_named(registered):
    """A cold run: `{"rewards": ...}` read only as "step() output lacks ['reward']"."""
    report = check_env(registered(MisspeltKeyEnv), ROWS[:1], adversarial=False, actions={"seven": "7"})
    [finding] = _errors_of_kind(report, "types")
    assert "lacks ['reward'] on turn 1; 'rewards' is not a key of it (did you mean 'reward'?)" in finding.message


def test_a_misspelt_class_in_an_entry_point_is_named_with_the_right_one():
    from skyrl_gym.errors import EnvCreationError
    from skyrl_gym.registration import load_env_creator

    with pytest.raises(EnvCreationError, match="has no attribute 'GSM8kEnvv'.*did you mean 'GSM8kEnv'"):
        load_env_creator("skyrl_gym.envs.gsm8k.env:GSM8kEnvv")


def test_not_done_within_max_turns(registered):
    report = check_env(registered(NeverDoneEnv), ROWS[:1], adversarial=False, actions={"seven": "7"},
                       max_turns_slack=1)
    [finding] = _errors_of_kind(report, "done")
    assert "not done after 3 steps (max_turns=2 + 1 slack)" in finding.message


def test_exceptions_are_reported_with_where_they_came_from(registered):
    report = check_env(registered(CrashesOnEmptyEnv), ROWS)
    crashes = _errors_of_kind(report, "step")
    assert [(f.row_index, f.action) for f in crashes] == [(0, "empty string"), (1, "empty string")]
    assert "raised ValueError: cannot score an empty answer" in crashes[0].message
    assert "test_checker.py:" in crashes[0].message and "in step" in crashes[0].message
    assert report.episodes == 10  # the other actions still ran


class SkipsTheBaseInitEnv(BaseTextEnv):
    """Sets its own fields and forgets ``super().__init__()``: ``self.turns`` does not exist."""

    def __init__(self, env_config=None, extras=None):
        self.answer = (extras or {})["reward_spec"]["ground_truth"]

    def step(self, action):
        self.turns += 1
        return {"observations": [], "reward": float(self.answer in action), "done": True, "metadata": {}}


def test_an_env_that_skips_the_base_init_is_told_to_call_it_once(registered):
    """It read as twelve lines of "no attribute 'turns'", one per row and action, none naming the cause."""
    report = check_env(registered(SkipsTheBaseInitEnv), ROWS, check_determinism=False)
    crashes = _errors_of_kind(report, "step")
    assert len(crashes) == 10 and len({f.message for f in crashes}) == 1
    assert crashes[0].message.endswith("; BaseTextEnv.__init__ sets turns: SkipsTheBaseInitEnv.__init__ must call "
                                       "super().__init__(env_config, extras)")
    lines = str(report).splitlines()[1:]
    assert lines[0] == f"  {crashes[0]} (and 9 more like it, also on row 2)"
    assert lines[1].startswith("  note: 2 row(s) have no ")
    assert len(lines) == 2


def test_rows_without_a_reference_answer_are_noted_as_unchecked_for_a_correct_answer():
    """`check multiply` said OK over rows without a reference answer, where no correct answer was played (five
    episodes a row, not six): an env whose reward never pays would pass it. The report says so."""
    from skyrl_gym import datasets

    bare = check_env("multiply", datasets.build_rows("multiply", split="test", size=2, seed=0),
                     check_determinism=False)
    assert bare.ok and bare.rows_without_reference == 2 and bare.episodes == 10
    assert "note: 2 row(s) have no reference answer" in str(bare) and "`skyrl-gym audit`" in str(bare)
    answered = [dict(row, reference_action=rf"\boxed{{{row['reward_spec']['ground_truth']}}}")
                for row in datasets.build_rows("multiply", split="test", size=2, seed=0)]
    full = check_env("multiply", answered, check_determinism=False)
    assert full.ok and full.rows_without_reference == 0 and full.episodes == 12 and "note:" not in str(full)


def _builder_needing_an_extra(split, size, seed, **kwargs):
    if kwargs:
        raise TypeError(f"the builder takes no option {sorted(kwargs)}")
    raise ImportError("these rows need the foo package: pip install 'skyrl-gym[foo]'")


class SettingsError(ValueError):
    """What reasoning_gym's builder raises without its package: not an ImportError."""


def _builder_saying_what_to_install(split, size, seed, **kwargs):
    raise SettingsError("the foo tasks need the foo package: pip install 'skyrl-gym[foo]'")


@pytest.mark.parametrize("builder, kwargs, advice", [
    (_builder_needing_an_extra, {}, "Install what it names, or pass rows"),
    (_builder_saying_what_to_install, {}, "Install what it names, or pass rows"),
    (_builder_needing_an_extra, {"colour": 1}, "Correct the --builder-args it names, or pass rows")])
def test_rows_that_cannot_be_built_are_met_with_what_to_do(registered, builder, kwargs, advice):
    """A builder short of an extra was answered with "give it --builder-args '{"key": "value"}'", whether it said
    so with an ImportError or another error, and so was a mistaken --builder-args."""
    from skyrl_gym import datasets
    from skyrl_gym.checker import NoRowsFor, default_rows

    env_id = registered(SayTheNumberEnv)
    datasets.register_dataset(env_id, builder)
    try:
        with pytest.raises(NoRowsFor) as refused:
            default_rows(env_id, builder_kwargs=kwargs)
    finally:
        datasets.deregister_dataset(env_id)
    assert advice in str(refused.value) and "'{\"key\"" not in str(refused.value)
    assert ("skyrl-gym[foo]" in str(refused.value)) is not bool(kwargs)
    assert f"pass rows: skyrl-gym check {env_id} --rows FILE" in str(refused.value)


def test_a_builder_that_cannot_reach_the_hub_names_the_offline_switch(registered, monkeypatch):
    """A cold run: with the `hf` extra and no network, `check gsm8k` spent 24 s in the Hub's retries, and what it
    said after did not name HF_HUB_OFFLINE."""
    from skyrl_gym import datasets
    from skyrl_gym.checker import NoRowsFor, default_rows

    def offline(split="train", size=None, seed=0):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    env_id = registered(SayTheNumberEnv)
    datasets.register_dataset(env_id, offline)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    try:
        with pytest.raises(NoRowsFor, match="HF_HUB_OFFLINE=1 skips the Hub at once"):
            default_rows(env_id)
    finally:
        datasets.deregister_dataset(env_id)


def _unseeded_builder(split="train", size=None, seed=0):
    import random

    rng = random.Random()  # the contributor's mistake: not seeded with (seed, split, i)
    for _ in range(size or 2):
        number = str(rng.randrange(10**9))
        yield {"prompt": [{"role": "user", "content": f"say {number}"}], "env_class": "",
               "reward_spec": {"ground_truth": number}, "extra_info": {"reference_action": number}}


def _builder_of_invalid_rows(split="train", size=None, seed=0):
    for i in range(size or 2):
        yield {"question": f"say {i}", "reward_spec": {"ground_truth": str(i)}}  # "question" is not "prompt"


@pytest.mark.parametrize("builder, said", [
    (_unseeded_builder, "made another row 1 when built again with the same seed=0 and split='test' (fields that "
                        "differ: extra_info, prompt, reward_spec): row i must depend only on (seed, split, i)"),
    (_builder_of_invalid_rows, "made an invalid row")])
def test_a_builder_that_breaks_its_contract_fails_check_and_audit(registered, builder, said, capsys):
    """A contributor's cold run: an unseeded builder passed check and audit (rebuild_row then gave another row);
    a builder of invalid rows was told to take --builder-args, with the exit status of a bad argument."""
    from skyrl_gym.cli import main

    with _with_builder(registered, builder) as env_id:
        for command in ("check", "audit"):
            assert main([command, env_id]) == 1, command
            err = capsys.readouterr().err
            assert said in err and "--builder-args" not in err, err
        report = check_env(env_id)  # the library's check says the same, as a finding
        assert [f.kind for f in report.errors] == ["builder"] and said in report.errors[0].message
    if builder is _builder_of_invalid_rows:
        assert "fix the env's dataset builder" in report.errors[0].message


def test_the_audit_is_told_to_pass_rows_to_the_audit(registered):
    """`skyrl-gym audit reasoning_gym/ab` without its extra ended "or pass rows: skyrl-gym check ...": the wrong
    command."""
    from skyrl_gym import datasets
    from skyrl_gym.audit import audit_env
    from skyrl_gym.checker import NoRowsFor

    env_id = registered(SayTheNumberEnv)
    datasets.register_dataset(env_id, _builder_needing_an_extra)
    try:
        with pytest.raises(NoRowsFor, match=rf"Install what it names, or pass rows: skyrl-gym audit {env_id} --rows"):
            audit_env(env_id)
    finally:
        datasets.deregister_dataset(env_id)


def test_the_attributes_the_base_init_sets_are_listed():
    assert set(vars(SayTheNumberEnv(extras=ROWS[0]))) - {"answer"} == BaseTextEnv.INIT_ATTRIBUTES


def test_non_deterministic_reward(registered):
    report = check_env(registered(FlakyRewardEnv), ROWS[:1], adversarial=False, actions={"seven": "7"})
    [finding] = _errors_of_kind(report, "determinism")
    assert "gave rewards" in finding.message and "must be deterministic" in finding.message


def test_close_not_idempotent(registered):
    report = check_env(registered(CloseTwiceFailsEnv), ROWS[:1], adversarial=False, actions={"seven": "7"})
    [finding] = _errors_of_kind(report, "close")
    assert "a second close() (close must be idempotent) raised RuntimeError: already closed" in finding.message


def test_init_returning_the_wrong_shape(registered):
    report = check_env(registered(BadInitEnv), ROWS)
    init_errors = _errors_of_kind(report, "init")
    # reported once per row, not once per action
    assert [f.row_index for f in init_errors] == [0, 1]
    assert "init() must return (observation, info), got 'the prompt'" in init_errors[0].message


def test_rows_failing_validation_are_reported_and_the_rest_checked(registered):
    rows = [ROWS[0], {"prompt": "a bare string"}, {"reward_spec": {"ground_truth": "1"}}, ROWS[1]]
    report = check_env(registered(SayTheNumberEnv), rows)
    row_errors = _errors_of_kind(report, "row")
    assert [f.row_index for f in row_errors] == [1, 2]
    assert "field 'prompt' is a string" in row_errors[0].message
    assert "field 'prompt' is missing" in row_errors[1].message
    assert report.rows_checked == 2


def test_a_row_the_env_cannot_be_built_from(registered):
    report = check_env(registered(SayTheNumberEnv), [{"prompt": [{"role": "user", "content": "no answer"}]}])
    [finding] = report.errors
    assert finding.kind == "make" and "KeyError: 'reward_spec'" in finding.message
    assert finding.action is None and "action" not in str(finding)  # none was played: it was "action 'empty string'"


class IntAnswerEnv(SayTheNumberEnv):
    """Reads <answer>N</answer> with int(): a well-formed tag with junk inside crashes it."""

    def step(self, action):
        import re

        found = re.search(r"<answer>(.*?)</answer>", action)
        reward = float(found is not None and int(found.group(1)) == int(self.answer))
        return {"observations": [], "reward": reward, "done": True, "metadata": {}}


def test_junk_inside_a_well_formed_tag_is_played(registered):
    report = check_env(registered(IntAnswerEnv), ROWS[:1], actions={"right": "<answer>7</answer>"})
    [finding] = report.errors
    assert finding.kind == "step" and finding.action == "junk in well-formed tags"
    assert "ValueError: invalid literal for int()" in finding.message


class NeedsAnEngineEnv(SayTheNumberEnv):
    """Like the swe env on a machine without a Docker engine: init cannot start what the env runs in."""

    def init(self, prompt=None):
        from skygym_sandboxes.types import SandboxUnavailable

        raise SandboxUnavailable("cannot reach a Docker engine at the default socket; start dockerd")


def test_a_row_this_machine_cannot_run_is_skipped_naming_what_is_missing(registered):
    report = check_env(registered(NeedsAnEngineEnv), ROWS)
    assert report.ok and report.errors == [] and len(report.skipped) == len(ROWS)
    assert all(f.kind == "init" and "start dockerd" in f.message for f in report.skipped)
    assert str(report).startswith(f"check {report.env_id}: SKIPPED - {len(ROWS)} row(s)")


def test_a_hanging_step_is_reported_and_the_check_moves_on(registered):
    """A 60 s hang, cut at 2 s; the bound of 20 s leaves a loaded machine room (a 3 s hang against a bound of
    3 s did not), and every other call of the check has 2 s too."""
    started = time.monotonic()
    report = check_env(registered(HangsOnLongTextEnv), ROWS[:1], step_timeout_s=2, huge_action_chars=5000)
    assert time.monotonic() - started < 20  # did not wait for the hung call
    [finding] = _errors_of_kind(report, "step")
    assert finding.action == "huge string (5,000 chars)" and "did not return within 2 s" in finding.message


def test_an_env_with_thread_bound_resources_is_driven_from_one_thread(registered):
    report = check_env(registered(SQLiteAnswerEnv), ROWS, step_timeout_s=30)
    assert report.ok and report.findings == [], str(report)


def test_observations_that_echo_a_huge_action_are_a_warning(registered):
    report = check_env(registered(EchoEnv), ROWS[:1], check_determinism=False)
    assert report.ok
    [warning] = report.warnings
    assert warning.action == "huge string (10,000,000 chars)" and "holds 10,000,010 characters" in warning.message


def test_metrics_must_be_a_dict(registered):
    report = check_env(registered(BadMetricsEnv), ROWS[:1], adversarial=False, actions={"seven": "7"})
    [finding] = _errors_of_kind(report, "metrics")
    assert "get_metrics() must return a dict, got list" in finding.message


def test_reference_answer_that_earns_nothing_is_a_warning(registered):
    rows = [{**ROWS[0], "extra_info": {"reference_action": "7"}}]
    assert check_env(registered(SayTheNumberEnv), rows, adversarial=False).findings == []
    report = check_env(registered(WrongAnswerKeyEnv), rows, adversarial=False)
    assert report.ok
    [warning] = report.warnings
    assert warning.action == "reference answer" and "earned [0.0]" in warning.message


def test_the_envs_own_rows_with_a_wrong_reference_or_env_class_are_errors(registered):
    """A cold run: a builder whose reference answers earn 0, or whose rows name a misspelt env_class, passed
    `check` with a warning and exit 0; a CI running only `check` let them through. Rows given stay warnings."""
    from skyrl_gym import datasets

    env_id = registered(WrongAnswerKeyEnv)
    row = {**ROWS[0], "env_class": env_id, "extra_info": {"reference_action": "7"}}
    for builder_row, kind, words in ((row, "reward", "reference answer earned [0.0]"),
                                     ({**row, "env_class": env_id + "x"}, "row", "own rows name env_class")):
        datasets.register_dataset(env_id, lambda split="train", size=None, seed=0, r=builder_row: [r] * (size or 1))
        try:
            report = check_env(env_id, adversarial=False)
        finally:
            datasets.deregister_dataset(env_id)
        assert not report.ok and any(words in f.message for f in _errors_of_kind(report, kind)), report
        assert check_env(env_id, [builder_row], adversarial=False).ok  # rows given: a warning


def test_accepts_a_class_an_instance_and_a_rows_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    by_class = check_env(SayTheNumberEnv, path)
    by_instance = check_env(SayTheNumberEnv(extras=ROWS[0]), str(path))
    assert by_class.ok and by_instance.ok and by_class.rows_checked == by_instance.rows_checked == 2
    missing = check_env(SayTheNumberEnv, tmp_path / "missing.jsonl")
    assert not missing.ok and "cannot read rows" in missing.errors[0].message


def test_finding_reads_as_one_line():
    finding = Finding("error", "reward", "reward is nan", "my_env", 3, "empty string")
    assert str(finding) == "ERROR   reward [row 4, action 'empty string']: reward is nan"


def test_the_package_level_check_env_is_this_checker(registered):
    report = skyrl_gym.check_env(registered(NanRewardEnv), ROWS[:1], adversarial=False, actions={"a": "7"})
    assert isinstance(report, CheckReport) and not report.ok


@pytest.mark.parametrize("env_id", builtin_env_ids())
def test_builtin_envs_pass(env_id):
    if env_id not in BUILTIN_ROWS:
        pytest.skip(f"no sample rows for {env_id!r} in tests/skyrl_gym/builtin_rows.py")
    report = check_env(env_id, BUILTIN_ROWS[env_id])
    assert report.ok and not report.warnings, str(report)
    assert report.episodes == len(BUILTIN_ROWS[env_id]) * 6  # reference answer + 5 adversarial actions


class UnseededRandomPromptEnv(SayTheNumberEnv):
    """Picks its prompt with the global random module: Gymnasium's seeded-reset check must catch it."""

    def init(self, prompt=None):
        import random

        return [{"role": "user", "content": f"Say {self.answer} (nonce {random.random()})"}], {}


def test_gymnasiums_own_checker_runs_through_the_bridge(registered):
    pytest.importorskip("gymnasium", reason="needs gymnasium: pip install 'skyrl-gym[gymnasium]'")
    report = check_env("gsm8k", BUILTIN_ROWS["gsm8k"], gymnasium=True, huge_action_chars=0)
    assert report.ok and report.findings == [], str(report)

    report = check_env(registered(UnseededRandomPromptEnv), ROWS, gymnasium=True, adversarial=False,
                       actions={"seven": "7"}, check_determinism=False)
    [finding] = report.errors
    assert finding.kind == "gymnasium" and "reset(seed=123)` is non-deterministic" in finding.message


def test_without_rows_a_registered_id_is_checked_on_the_rows_the_command_line_checks():
    """`skyrl_gym.check_env("gsm8k")` once checked one bare user message: every env that needs a reward_spec failed
    to build ("MissingRewardSpec"), where `skyrl-gym check gsm8k` passed on the env's own rows."""
    from skyrl_gym.checker import default_rows

    report = check_env("gsm8k", huge_action_chars=1000, check_determinism=False)
    rows, source, _ = default_rows("gsm8k")
    assert report.ok, str(report)
    assert report.rows_from == source and report.rows_checked == len(rows) == 2
    assert f"  rows: {source}" in str(report).splitlines()
    # a class has no rows of its own: the single user message, as before
    bare = check_env(SayTheNumberEnv, huge_action_chars=1000, check_determinism=False)
    assert bare.rows_from == "" and bare.rows_checked == 1


def test_a_crash_on_model_output_is_told_the_rule_it_breaks(registered):
    """A contributor's cold run: the crash was named to the line, but not the rule or the fix."""
    report = check_env(registered(CrashesOnEmptyEnv), ROWS, check_determinism=False)
    [crash, *_] = _errors_of_kind(report, "step")
    assert crash.action == "empty string" and "raised ValueError: cannot score an empty answer" in crash.message
    assert crash.message.endswith("; step() must not raise on model output: give it a reward of 0 with "
                                  "metadata['reason'] saying why"), crash.message


def _seeded_builder_with_nan(split="train", size=None, seed=0):
    for i in range(size or 2):
        yield {"prompt": [{"role": "user", "content": f"say {i}"}], "env_class": "",
               "reward_spec": {"ground_truth": str(i)}, "extra_info": {"reference_action": str(i), "score": float("nan")}}


def test_a_repeatable_builder_with_nan_in_its_rows_is_not_called_unrepeatable(registered, capsys):
    """A review: rows compared with == called a seeded builder unrepeatable for a NaN (NaN != NaN)."""
    from skyrl_gym.checker import default_rows

    with _with_builder(registered, _seeded_builder_with_nan) as env_id:
        rows, source, _ = default_rows(env_id)
    assert len(rows) == 2 and "from the dataset builder" in source


class PercentScaleEnv(SayTheNumberEnv):
    """Rewards on a 0-100 scale."""

    def step(self, action):
        return {"observations": [], "reward": 100.0 * (self.answer in action), "done": True, "metadata": {}}


def test_a_reward_outside_minus_one_to_one_is_a_warning(registered):
    """A contributor's cold run: a 0-100 reward passed `check` without a word."""
    report = check_env(registered(PercentScaleEnv), ROWS, check_determinism=False)
    assert report.ok  # it runs: a warning, not an error
    scale = [f for f in report.warnings if f.kind == "reward"]
    assert scale and scale[0].message.startswith("reward 100 on turn 1 is outside -1..1"), report


def _word_builder(split_apart: bool):
    """The scaffold's first builder: every split drew from the same few numbers, so test rows were train rows."""
    import random

    from skyrl_gym.datasets import split_items

    def build(split="train", size=None, seed=0):
        pool = [str(n) for n in range(20)]
        numbers = split_items(pool, split) if split_apart else pool
        for index in range(size or 2):
            number = random.Random(f"{seed}:{split}:{index}").choice(numbers)
            yield {"prompt": [{"role": "user", "content": f"say {number}"}], "env_class": "",
                   "reward_spec": {"ground_truth": number}, "extra_info": {"reference_action": number}}
    return build


@pytest.mark.parametrize("split_apart", [False, True])
def test_test_rows_that_repeat_train_rows_are_a_warning(registered, split_apart, capsys):
    from skyrl_gym.cli import main

    with _with_builder(registered, _word_builder(split_apart)) as env_id:
        report = check_env(env_id)
        assert main(["check", env_id]) == 0  # a warning: the contract holds
        out = capsys.readouterr().out
    split_warnings = [f for f in report.warnings if f.kind == "split"]
    if split_apart:
        assert split_warnings == [] and "WARNING split" not in out
        return
    [warning] = split_warnings
    assert report.ok and warning.message.startswith("20 of the first 20 test rows repeat a task")
    assert "split_items(pool, split)" in warning.message and "test rows 1, 2, 3, 4, 5, 6, 7, 8, ..." in warning.message
    assert "WARNING split: 20 of the first 20 test rows" in out


def test_no_split_check_where_the_machine_cannot_run_the_env(registered, capsys):
    """`check swe` without a Docker engine checked nothing, then built 100 train rows to compare the splits."""
    from skyrl_gym.cli import main

    with _with_builder(registered, _word_builder(split_apart=False), NeedsAnEngineEnv) as env_id:
        report = check_env(env_id)
        assert main(["check", env_id]) == 3  # nothing was checked
        out = capsys.readouterr().out
    assert report.all_skipped and [f for f in report.warnings if f.kind == "split"] == []
    assert "SKIPPED" in out and "WARNING split" not in out


def test_a_row_the_envs_own_builder_made_and_the_env_refuses_is_the_envs_fault():
    """A builder that drops a field the env needs: the env's DataError advises building rows with that same builder
    (circular, a cold run found), so the checker says the row is the env's own and one of the two is wrong."""
    row = {key: value for key, value in BUILTIN_ROWS["gsm8k"][0].items() if key != "reward_spec"}
    own = check_env("gsm8k", [row], own_rows=True, adversarial=False, check_determinism=False)
    given = check_env("gsm8k", [row], adversarial=False, check_determinism=False)
    for report in (own, given):
        assert [(f.severity, f.kind) for f in report.findings if f.severity == "error"] == [("error", "make")]
    said = [f.message for f in own.findings if f.kind == "make"][0]
    assert "MissingRewardSpec" in said and "the env's own dataset builder (or golden cases) made" in said
    assert "own dataset builder" not in [f.message for f in given.findings if f.kind == "make"][0]
