"""Reward fingerprints: a hash of what decides an env's reward. Editing the verifier changes it; resuming a
run whose env's fingerprint changed warns with both values; trajectories, checkpoints and model cards carry
it."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import skyrl_gym
from skyrl_gym import fingerprint
from skyrl_gym.cli import main

VERIFIER = """
from skyrl_gym import BaseTextEnv, StepOutput
from {package}.scoring import score


class ToyEnv(BaseTextEnv):
    def step(self, action):
        return StepOutput(observations=[], reward=score(action), done=True, metadata={{}})
"""


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    """A package with an env and its scoring module, registered by a string entry point (as a plugin would
    be)."""
    package = "skygym_fp_toy_" + tmp_path.name.replace("-", "_")
    folder = tmp_path / package
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "env.py").write_text(VERIFIER.format(package=package))
    (folder / "scoring.py").write_text(
        "def score(action):\n    return 1.0 if action.strip() == '42' else 0.0\n"
    )
    (folder / "README.md").write_text("not code")
    monkeypatch.syspath_prepend(str(tmp_path))
    env_id = f"{package}/toy"
    skyrl_gym.register(id=env_id, entry_point=f"{package}.env:ToyEnv")
    fingerprint.clear_cache()
    yield env_id, folder
    skyrl_gym.deregister(env_id)
    fingerprint.clear_cache()


def test_changing_the_verifier_changes_the_fingerprint(toy_package):
    env_id, folder = toy_package
    before = skyrl_gym.spec(env_id).fingerprint
    assert before.startswith("sha256:") and len(before) == len("sha256:") + 16
    assert skyrl_gym.spec(env_id).fingerprint == before  # stable
    (folder / "README.md").write_text("docs do not decide the reward")
    fingerprint.clear_cache()
    assert skyrl_gym.spec(env_id).fingerprint == before
    # the scoring module is imported by the env: editing it changes the fingerprint
    (folder / "scoring.py").write_text("def score(action):\n    return 1.0 if '42' in action else 0.0\n")
    fingerprint.clear_cache()
    after = skyrl_gym.spec(env_id).fingerprint
    assert after != before
    parts = fingerprint.fingerprint_parts(skyrl_gym.spec(env_id))
    assert any(line.startswith(f"file {env_id.split('/')[0]}.scoring ") for line in parts)


def test_reward_settings_are_part_of_the_fingerprint(toy_package):
    env_id, folder = toy_package
    other = env_id + "_strict"
    skyrl_gym.register(
        id=other, entry_point=skyrl_gym.spec(env_id).entry_point, kwargs={"env_config": {"strict": 1}}
    )
    try:
        assert skyrl_gym.spec(other).fingerprint != skyrl_gym.spec(env_id).fingerprint
    finally:
        skyrl_gym.deregister(other)


def test_shipped_fingerprints_and_the_command(capsys):
    assert main(["fingerprint", "gsm8k"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == skyrl_gym.spec("gsm8k").fingerprint
    assert main(["fingerprint", "math", "--explain"]) == 0
    explained = capsys.readouterr().out
    assert "file skyrl_gym.rewards.math " in explained and "uses math-verify==" in explained
    assert "skyrl_gym.registration" not in explained  # the contract's plumbing is not part of a reward
    assert skyrl_gym.spec("gsm8k").fingerprint != skyrl_gym.spec("math").fingerprint
    assert main(["fingerprint", "no_such_env_here"]) == 2


def test_import_stays_light():
    """``import skyrl_gym`` computes no fingerprint (nothing hashed, nothing read) until one is asked for."""
    code = ("import sys, skyrl_gym; "
            "print('skyrl_gym.fingerprint' in sys.modules, 'skyrl_gym.audit' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_resuming_with_a_changed_verifier_warns_with_both_values(toy_package, tmp_path):
    pytest.importorskip(
        "torch", reason="the trainer's checkpoints need torch: pip install 'skyrl-gym[train]'"
    )
    from skygym_train import checkpoint as ckpt

    env_id, folder = toy_package
    rows = [{"env_class": env_id, "prompt": [{"role": "user", "content": "?"}]}]
    saved = ckpt.env_fingerprints(rows)
    ckpt.save_checkpoint(tmp_path / "ckpts", 1, {}, {"global_step": 1, "env_fingerprints": saved})
    state = ckpt.load_trainer_state(ckpt.latest_checkpoint(tmp_path / "ckpts"))
    assert state["env_fingerprints"] == {env_id: skyrl_gym.spec(env_id).fingerprint}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ckpt.warn_on_fingerprint_change(state["env_fingerprints"], ckpt.env_fingerprints(rows)) == []

    (folder / "scoring.py").write_text("def score(action):\n    return 1.0\n")  # the verifier changed
    fingerprint.clear_cache()
    now = ckpt.env_fingerprints(rows)
    with pytest.warns(UserWarning, match="resuming with a changed reward") as caught:
        ckpt.warn_on_fingerprint_change(state["env_fingerprints"], now)
    message = str(caught[0].message)
    assert saved[env_id] in message and now[env_id] in message and saved[env_id] != now[env_id]

    card = ckpt.write_model_card(tmp_path, now, step=1)
    assert f"| {env_id} | `{now[env_id]}` |" in card.read_text()
