"""The trainer records the reward fingerprints of its envs: in every checkpoint, in the exported model's card,
and it warns, with both values, when a run resumes after its env's verifier changed."""

from __future__ import annotations

import warnings

import pytest

import skyrl_gym
from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import TARGET_ENV_ID, LetterShareEnv, toy_overrides

CHANGED_VERIFIER = """
from skyrl_gym.core import StepOutput
from skyrl_gym.envs.base_text_env import BaseTextEnv


class StricterLetterShareEnv(BaseTextEnv):
    def step(self, action):
        letters = [c for c in action.lower() if c.isalpha()]
        share = sum(c == "e" for c in letters) / len(letters) if len(letters) > 3 else 0.0
        return StepOutput(observations=[], reward=float(share), done=True, metadata={})
"""


def _config(model, data, tmp, steps):
    return load_config(
        toy_overrides(
            model,
            data,
            tmp,
            **{
                "trainer.max_training_steps": steps,
                "trainer.ckpt_interval": 1,
                "trainer.resume_mode": "latest",
            },
        )
    )


def test_a_resume_after_the_verifier_changed_warns_with_both_fingerprints(
    tiny_chat_model, toy_data, tmp_path, monkeypatch
):
    from skygym_train import checkpoint as ckpt

    before = skyrl_gym.spec(TARGET_ENV_ID).fingerprint
    with PPOTrainer(_config(tiny_chat_model, toy_data, tmp_path, steps=1)) as trainer:
        trainer.fit()
        card = (trainer.export_hf(str(tmp_path / "export")) / "README.md").read_text()
    assert f"| {TARGET_ENV_ID} | `{before}` |" in card
    state = ckpt.load_trainer_state(ckpt.latest_checkpoint(tmp_path / "ckpts"))
    assert state["env_fingerprints"] == {TARGET_ENV_ID: before}

    # the env id now names another verifier (as after an edit of the env's scoring code)
    package = tmp_path / "changed_verifier_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "env.py").write_text(CHANGED_VERIFIER)
    monkeypatch.syspath_prepend(str(tmp_path))
    skyrl_gym.deregister(TARGET_ENV_ID)
    skyrl_gym.register(TARGET_ENV_ID, entry_point="changed_verifier_pkg.env:StricterLetterShareEnv")
    try:
        after = skyrl_gym.spec(TARGET_ENV_ID).fingerprint
        assert after != before
        with pytest.warns(UserWarning, match="resuming with a changed reward") as caught:
            with PPOTrainer(_config(tiny_chat_model, toy_data, tmp_path, steps=2)) as trainer:
                result = trainer.fit()
        assert result["resumed_from"].endswith("global_step_1")
        message = next(str(w.message) for w in caught if "changed reward" in str(w.message))
        assert before in message and after in message
    finally:
        skyrl_gym.deregister(TARGET_ENV_ID)
        skyrl_gym.register(TARGET_ENV_ID, entry_point=LetterShareEnv)

    # resuming again with the verifier of the last save: no warning
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with PPOTrainer(_config(tiny_chat_model, toy_data, tmp_path / "again", steps=1)) as trainer:
            trainer.fit()
        with PPOTrainer(_config(tiny_chat_model, toy_data, tmp_path / "again", steps=2)) as trainer:
            trainer.fit()
    assert not [w for w in seen if "changed reward" in str(w.message)]


def test_a_run_that_resumes_says_so_and_says_when_nothing_is_left_to_train(tiny_chat_model, toy_data, tmp_path):
    """The default checkpoint folder is shared by runs that do not name their own: a run that picks up another's
    checkpoint says where from, how to start afresh, and that it trains nothing when that run got as far."""
    with PPOTrainer(_config(tiny_chat_model, toy_data, tmp_path, steps=1)) as trainer:
        trainer.fit()
    with pytest.warns(UserWarning, match=r"resumed from .*global_step_1 at step 1 .*resume_mode=none") as caught:
        with PPOTrainer(_config(tiny_chat_model, toy_data, tmp_path, steps=1)) as trainer:
            result = trainer.fit()
    assert result["global_step"] == 1 and result["resumed_from"].endswith("global_step_1")
    assert any("nothing is left to train" in str(w.message) for w in caught)
