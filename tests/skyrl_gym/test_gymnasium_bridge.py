"""skyrl_gym envs as real ``gymnasium.Env``s: ids, reset/step semantics, spaces and Gymnasium's own checker."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from typing import Any, Dict, Iterator

import pytest

gymnasium = pytest.importorskip("gymnasium", reason="needs gymnasium: pip install 'skyrl-gym[gymnasium]'")
from gymnasium.utils.env_checker import check_env as gymnasium_check_env  # noqa: E402

import skyrl_gym  # noqa: E402
from skyrl_gym import gymnasium_bridge as bridge  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402
from tests.skyrl_gym.builtin_rows import BUILTIN_ROWS, builtin_env_ids  # noqa: E402

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


# An env written exactly as SkyRL-gym's docs show it: positional env_config, a mutable default for
# extras, super().__init__() with no arguments, its own turn counting and a string entry point.
class GuessTheWordEnv(BaseTextEnv):
    def __init__(self, env_config, extras: Dict[str, Any] = {}):
        super().__init__()
        assert "reward_spec" in extras, "reward_spec field is required"
        self.word = extras["reward_spec"]["ground_truth"]
        self.max_turns = extras.get("max_turns", 3)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        if self.word in action:
            return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata={"turn": self.turns})
        done = self.turns >= self.max_turns
        observations = [] if done else [{"role": "user", "content": "No. Guess again."}]
        return BaseTextEnvStepOutput(observations=observations, reward=0.0, done=done, metadata={"turn": self.turns})


WORD_ROWS = [
    {"prompt": [{"role": "user", "content": "Guess my word; it is a fruit."}], "env_class": "guess_the_word",
     "reward_spec": {"method": "rule", "ground_truth": "apple"}},
    {"prompt": [{"role": "user", "content": "Guess my word; it is a colour."}], "env_class": "guess_the_word",
     "reward_spec": {"method": "rule", "ground_truth": "red"}},
    {"prompt": [{"role": "user", "content": "Guess my word; it is an animal."}], "env_class": "guess_the_word",
     "reward_spec": {"method": "rule", "ground_truth": "cat"}, "max_turns": 2},
]


@pytest.fixture
def guess_the_word() -> Iterator[str]:
    from skyrl_gym.envs import register  # where SkyRL's examples import it from

    register(id="guess_the_word", entry_point=f"{__name__}:GuessTheWordEnv")
    try:
        yield "guess_the_word"
    finally:
        skyrl_gym.deregister("guess_the_word")


def test_ids_registered_later_follow_into_gymnasium(guess_the_word):
    """The bridge listens to the registry: no sync call is needed after register or deregister."""
    assert "skyrl_gym/guess_the_word-v0" in gymnasium.envs.registration.registry
    skyrl_gym.register(id="guess_the_word_later", entry_point=f"{__name__}:GuessTheWordEnv")
    assert "skyrl_gym/guess_the_word_later-v0" in gymnasium.envs.registration.registry
    skyrl_gym.deregister("guess_the_word_later")
    assert "skyrl_gym/guess_the_word_later-v0" not in gymnasium.envs.registration.registry


def test_import_skyrl_gym_does_not_import_gymnasium():
    code = "import sys, skyrl_gym; print('gymnasium' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_module_colon_id_syntax_registers_on_import_in_a_fresh_process(tmp_path):
    rows_file = tmp_path / "gsm8k.jsonl"
    rows_file.write_text("\n".join(json.dumps(r) for r in BUILTIN_ROWS["gsm8k"]) + "\n")
    code = (
        "import gymnasium\n"
        f"env = gymnasium.make('skyrl_gym.gymnasium_bridge:skyrl_gym/gsm8k-v0', rows={str(rows_file)!r})\n"
        "obs, info = env.reset(options={'index': 0})\n"
        "print(obs[0]['role'], env.step('so 72 clips. #### 72')[1:4])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "user (1.0, True, False)"


def test_every_registered_env_has_a_gymnasium_id():
    bridged = bridge.sync_registry()
    for env_id in skyrl_gym.registry:
        gym_id = bridge.gymnasium_id(env_id)
        if env_id not in bridge.skipped:
            assert bridged[gym_id] == env_id and gym_id in gymnasium.registry
    assert bridge.gymnasium_id("gsm8k") == "skyrl_gym/gsm8k-v0"
    assert bridge.gymnasium_id("foo-v2") == "skyrl_gym/foo-v2"


def test_an_id_gymnasium_cannot_hold_is_skipped_naming_the_lazy_id_with_it():
    """The reason ended "use skyrl_gym/lazy-v0 with env_id=", the id cut off (a new user's cold run)."""
    skyrl_gym.register("test_bridge/with space", entry_point=GuessTheWordEnv)
    try:
        bridge.sync_registry()
        assert bridge.skipped["test_bridge/with space"].endswith(
            f"use {bridge.LAZY_ID} with env_id='test_bridge/with space'")
    finally:
        skyrl_gym.deregister("test_bridge/with space")


def test_reset_with_prompt_and_extras_then_step_returns_the_five_tuple():
    env = gymnasium.make("skyrl_gym/gsm8k-v0")
    prompt = [{"role": "user", "content": "How many clips?"}]
    obs, info = env.reset(seed=0, options={"prompt": prompt, "extras": {"reward_spec": {"ground_truth": "72"}}})
    assert obs == ({"role": "user", "content": "How many clips?"},)
    assert obs in env.observation_space and info == {}

    obs, reward, terminated, truncated, info = env.step("48 + 24 = 72\n#### 72")
    assert (obs, reward, terminated, truncated) == ((), 1.0, True, False)
    assert info["parsed_answer"] == "72"  # info is the step's metadata
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("again")

    env.reset(options={"prompt": "plain text prompt", "extras": {"reward_spec": {"ground_truth": "72"}}})
    assert env.step("#### 71")[1] == 0.0
    env.close()


def test_reset_samples_rows_with_the_seeded_rng(guess_the_word):
    env = gymnasium.make("skyrl_gym/guess_the_word-v0", rows=WORD_ROWS)
    first = [env.reset(seed=seed)[0] for seed in range(12)]
    again = [env.reset(seed=seed)[0] for seed in range(12)]
    assert first == again
    assert len({obs[0]["content"] for obs in first}) == 3  # every row is reachable
    assert env.unwrapped.row_index in range(3)
    obs, _ = env.reset(options={"index": 2})
    assert obs[0]["content"] == "Guess my word; it is an animal."
    with pytest.raises(IndexError, match="out of range for 3 rows"):
        env.reset(options={"index": 3})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"ground_truth": "x"})


def test_truncated_when_max_turns_pass_without_done():
    env = gymnasium.make("skyrl_gym/gsm8k_multi_turn-v0", rows=BUILTIN_ROWS["gsm8k_multi_turn"])  # max_turns 3
    env.reset(options={"index": 0})
    steps = [env.step("#### 1") for _ in range(3)]
    assert [(s[2], s[3]) for s in steps[:2]] == [(False, False), (False, False)]
    assert steps[0][0][0]["role"] == "user"  # the env asks to try again
    # the env itself says done on its last turn: that is termination, not truncation
    assert steps[2][2] is True and steps[2][3] is False

    # max_turns= caps the env's own limit and is told to the env (the episode driver's rule), so the env itself
    # ends on turn 2
    env = gymnasium.make("skyrl_gym/gsm8k_multi_turn-v0", rows=BUILTIN_ROWS["gsm8k_multi_turn"], max_turns=2)
    env.reset(options={"index": 0})
    env.step("#### 1")
    _, _, terminated, truncated, _ = env.step("#### 1")
    assert (terminated, truncated) == (True, False) and env.unwrapped.max_turns == 2


def test_an_env_that_never_ends_by_itself_is_truncated_at_the_cap():
    class Endless(skyrl_gym.BaseTextEnv):
        def step(self, action):
            return {"observations": [{"role": "user", "content": "more"}], "reward": 0.0, "done": False, "metadata": {}}

    skyrl_gym.register("test_bridge_endless", entry_point=Endless)
    try:
        env = gymnasium.make("skyrl_gym/test_bridge_endless-v0", max_turns=2)
        env.reset(options={"prompt": [{"role": "user", "content": "go"}]})
        assert env.step("a")[2:4] == (False, False)
        assert env.step("b")[2:4] == (False, True)
    finally:
        skyrl_gym.deregister("test_bridge_endless")


def test_skyrl_style_env_runs_unchanged_through_make_and_through_the_bridge(guess_the_word):
    # through skyrl_gym.make, as SkyRL's generator drives it
    env = skyrl_gym.make(guess_the_word, env_config={}, extras={"reward_spec": {"ground_truth": "apple"}})
    prompt, _ = env.init([{"role": "user", "content": "Guess"}])
    assert prompt[0]["content"] == "Guess"
    assert env.step("pear")["observations"] == [{"role": "user", "content": "No. Guess again."}]
    assert env.step("an apple")["reward"] == 1.0

    # through Gymnasium
    gym_env = gymnasium.make("skyrl_gym/guess_the_word-v0", rows=WORD_ROWS)
    gym_env.reset(options={"index": 1})
    obs, reward, terminated, truncated, info = gym_env.step("blue")
    assert (obs, reward, terminated, truncated, info) == (
        ({"role": "user", "content": "No. Guess again."},), 0.0, False, False, {"turn": 1})
    assert gym_env.step("red")[1:4] == (1.0, True, False)
    assert [m["role"] for m in gym_env.unwrapped.conversation] == ["user", "assistant", "user", "assistant"]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gymnasium_check_env(gym_env.unwrapped, skip_render_check=True)
    assert not [str(w.message) for w in caught]


def _check_quietly(env: gymnasium.Env) -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gymnasium_check_env(env.unwrapped)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("env_id", builtin_env_ids())
def test_every_builtin_env_passes_gymnasiums_check_env(env_id, capsys):
    if env_id not in BUILTIN_ROWS:
        pytest.skip(f"no sample rows for {env_id!r} in tests/skyrl_gym/builtin_rows.py")
    env = gymnasium.make(bridge.gymnasium_id(env_id), rows=BUILTIN_ROWS[env_id])
    assert _check_quietly(env) == []
    env.close()


def test_spaces_describe_chat_messages():
    text = bridge.UnicodeText(10)
    for value in ["", "héllo 🙂", "中文\u200d", "\x00\n\t"]:
        assert value in text
    assert "x" * 11 not in text and 5 not in text and None not in text
    text.seed(0)
    samples = [text.sample() for _ in range(50)]
    assert all(s in text for s in samples) and len(set(samples)) > 40

    space = bridge.conversation_space()
    space.seed(1)
    for _ in range(20):
        assert space.sample() in space
    assert ({"role": "user", "content": "hi"},) in space
    assert [{"role": "user", "content": "hi"}] not in space  # observations are tuples
    assert ({"role": "user", "content": "hi", "name": "x"},) not in space


def test_observations_normalise_messages_without_losing_the_conversation():
    obs = bridge.to_observation([{"role": "tool", "content": None, "tool_call_id": "1"},
                                 {"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert obs == ({"role": "tool", "content": ""}, {"role": "user", "content": '[{"type": "text", "text": "hi"}]'})


def test_ids_registered_later_are_reachable(guess_the_word):
    skyrl_gym.register(id="guess_later-v3", entry_point=GuessTheWordEnv)
    try:
        assert "skyrl_gym/guess_later-v3" in gymnasium.registry  # the bridge follows the registry
        env = gymnasium.make(bridge.LAZY_ID, env_id="guess_later-v3", rows=WORD_ROWS)  # resolves at make
        env.reset(seed=3)
        assert bridge.make("guess_later", rows=WORD_ROWS).reset(seed=0)[0][0]["role"] == "user"
    finally:
        skyrl_gym.deregister("guess_later-v3")
    bridge.sync_registry()
    assert "skyrl_gym/guess_later-v3" not in gymnasium.registry


def test_bad_use_gets_clear_errors(guess_the_word):
    with pytest.raises(skyrl_gym.errors.UnregisteredEnv, match="no_such_env"):
        gymnasium.make(bridge.LAZY_ID, env_id="no_such_env")
    env = gymnasium.make("skyrl_gym/guess_the_word-v0", rows=WORD_ROWS, disable_env_checker=True)
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("apple")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be the model's text"):
        env.step(["apple"])
    with pytest.raises(skyrl_gym.errors.DataError, match="row 1"):
        gymnasium.make("skyrl_gym/guess_the_word-v0", rows=[{"prompt": "a string"}])


def test_render_ansi_shows_the_conversation(guess_the_word):
    env = gymnasium.make("skyrl_gym/guess_the_word-v0", rows=WORD_ROWS, render_mode="ansi")
    env.reset(options={"index": 0})
    env.step("banana")
    assert env.render() == "[user] Guess my word; it is a fruit.\n[assistant] banana\n[user] No. Guess again."


def test_rows_from_a_jsonl_file(tmp_path, guess_the_word):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in WORD_ROWS))
    env = gymnasium.make("skyrl_gym/guess_the_word-v0", rows=str(path))
    obs, _ = env.reset(options={"index": 2})
    assert obs[0]["content"].endswith("an animal.")


def test_vector_envs_batch_episodes():
    rows = BUILTIN_ROWS["gsm8k"]
    vec = gymnasium.make_vec("skyrl_gym/gsm8k-v0", num_envs=2, vectorization_mode="sync", rows=rows)
    obs, _ = vec.reset(seed=0)
    assert len(obs) == 2 and all(o[0]["role"] == "user" for o in obs)
    answers = [f"#### {rows[0]['reward_spec']['ground_truth']}" if "Natalia" in o[0]["content"] else "#### 10"
               for o in obs]
    _, rewards, terminated, truncated, info = vec.step(answers)
    assert rewards.tolist() == [1.0, 1.0] and terminated.tolist() == [True, True] and not truncated.any()
    assert sorted(info["parsed_answer"].tolist()) == ["10", "72"]
    vec.close()


@pytest.mark.parametrize("order", ["skyrl_gym first", "gymnasium first"])
def test_the_gymnasium_idiom_works_after_import_skyrl_gym_in_either_order(order):
    """``gymnasium.make("skyrl_gym/<id>-v0")`` in a fresh interpreter, with no bridge import and no module prefix."""
    import subprocess
    import sys

    imports = "import skyrl_gym, sys; assert 'gymnasium' not in sys.modules; import gymnasium" if order == "skyrl_gym first" \
        else "import gymnasium, skyrl_gym"
    code = imports + """
env = gymnasium.make("skyrl_gym/gsm8k-v0", rows=[{"prompt": [{"role": "user", "content": "q"}], "env_class": "gsm8k",
                     "reward_spec": {"method": "rule", "ground_truth": "72"}}])
env.reset(seed=0)
print(env.step("#### 72")[1])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1.0"


def test_an_availability_check_of_gymnasium_does_not_undo_the_registration():
    """``importlib.util.find_spec("gymnasium")`` (``skyrl-gym doctor`` and other libraries' availability
    checks) asked the waiting finder for a spec, which removed it without loading anything: the later
    ``import gymnasium`` then registered nothing (``NamespaceNotFound: Namespace skyrl_gym not found``)."""
    import subprocess
    import sys

    code = """
import importlib.util, sys
import skyrl_gym
assert 'gymnasium' not in sys.modules
assert importlib.util.find_spec("gymnasium") is not None  # a check, twice, before the import
assert importlib.util.find_spec("gymnasium") is not None
import gymnasium
row = {"prompt": [{"role": "user", "content": "q"}], "env_class": "gsm8k",
       "reward_spec": {"method": "rule", "ground_truth": "72"}}
env = gymnasium.make("skyrl_gym/gsm8k-v0", rows=[row])
env.reset(seed=0)
print(env.step("#### 72")[1])
print(sum(type(f).__name__ == "_GymnasiumImportFinder" for f in sys.meta_path))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1.0", "0"]  # registered, and the finder gone once Gymnasium loaded


def test_made_without_rows_reset_says_how_to_give_it_episodes():
    from skyrl_gym.errors import MissingRewardSpec

    env = gymnasium.make("skyrl_gym/multiply-v0")
    with pytest.raises(MissingRewardSpec, match=r"made without rows.*pass rows=\.\.\. to gymnasium\.make.*"
                                                r"build_rows\('multiply'\)"):
        env.reset()
    env.close()
