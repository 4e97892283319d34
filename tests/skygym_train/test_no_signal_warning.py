"""A run whose rewards never differ within a prompt's samples learns nothing (every advantage is 0); the
trainer says so once, with what to try, instead of printing reward/mean=0.000 step after step."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from skyrl_gym.data import write_jsonl
from skygym_train.config import load_config
from skygym_train.trainer import NO_SIGNAL_STEPS, PPOTrainer
from tests.skygym_train.toy_envs import register_toy_env, toy_overrides, toy_rows


def _train(model, data, tmp_path, steps):
    cfg = load_config(toy_overrides(model, data, tmp_path, **{"trainer.max_training_steps": steps}))
    with PPOTrainer(cfg) as trainer:
        return trainer.fit()


def test_steps_with_every_advantage_zero_are_named_once_with_what_to_try(tiny_chat_model, tmp_path, caplog):
    register_toy_env()
    rows = toy_rows(16)
    for row in rows:  # a letter no answer contains: every sample scores 0.0
        row["reward_spec"]["ground_truth"] = "#"
    data = tmp_path / "never.jsonl"
    write_jsonl(rows, data)
    with caplog.at_level(logging.WARNING, logger="skygym_train.trainer"):
        result = _train(tiny_chat_model, data, tmp_path, NO_SIGNAL_STEPS + 1)
    assert result["global_step"] == NO_SIGNAL_STEPS + 1
    said = [r.getMessage() for r in caplog.records if "trained nothing" in r.getMessage()]
    assert len(said) == 1, said  # once a run, not once a step
    assert said[0].startswith(f"steps 1-{NO_SIGNAL_STEPS} trained nothing: every advantage was 0, as each "
                              "prompt's 4 samples got the same reward (rewards seen in the last step: 0)")
    assert "generator.sampling_params.max_generate_length (now 8;" in said[0]


@pytest.mark.parametrize("steps", [1, 2])
def test_a_run_shorter_than_that_says_so_once_all_its_steps_trained_nothing(tiny_chat_model, tmp_path, caplog, steps):
    """`skyrl-gym train --help`'s two-step example ended at reward 0 and grad norm 0 with no word why (a new user's
    cold run): the note waited for three steps in a row."""
    register_toy_env()
    rows = toy_rows(16)
    for row in rows:
        row["reward_spec"]["ground_truth"] = "#"
    data = tmp_path / "never.jsonl"
    write_jsonl(rows, data)
    with caplog.at_level(logging.WARNING, logger="skygym_train.trainer"):
        _train(tiny_chat_model, data, tmp_path, steps)
    said = [r.getMessage() for r in caplog.records if "trained nothing" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"{'step 1' if steps == 1 else 'steps 1-2'} trained nothing: "), said


def test_a_run_with_a_reward_that_varies_says_nothing(tiny_chat_model, toy_data, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="skygym_train.trainer"):
        _train(tiny_chat_model, toy_data, tmp_path, NO_SIGNAL_STEPS)
    assert not [r for r in caplog.records if "trained nothing" in r.getMessage()]


@pytest.mark.parametrize("rewards, advice", [
    ([0.0] * 8, "The model may never solve this env's task as set up"),
    ([0.1] * 8, "The model may never solve this env's task as set up"),  # partial credit only: not learned
    ([1.0] * 8, "Every sample got the full reward: the model has learned these rows."),
    ([1.0] * 4 + [0.1] * 4, "The prompts differ but each one's samples agree"),  # the quickstart's late steps
])
def test_the_advice_follows_the_rewards_the_samples_agreed_on(tiny_chat_model, toy_data, tmp_path, caplog,
                                                               rewards, advice):
    """What to try differs: a task never solved, a task learned, or prompts each all-or-nothing."""
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path))
    trainer = PPOTrainer(cfg)
    batch = SimpleNamespace(tensors={"advantages": torch.zeros(8, 3), "response_mask": torch.ones(8, 3)})
    output = {"rewards": rewards, "stop_reasons": ["stop"] * 8}
    with caplog.at_level(logging.WARNING, logger="skygym_train.trainer"):
        for _ in range(NO_SIGNAL_STEPS + 1):
            trainer._warn_without_signal(batch, output)
            trainer._say_notes()
    said = [r.getMessage() for r in caplog.records if "trained nothing" in r.getMessage()]
    assert len(said) == 1 and advice in said[0], said
    assert "generator.n_samples_per_prompt" in said[0]


def test_without_logging_set_up_the_note_comes_after_its_step_line_not_in_the_progress_bar(capsys):
    """Through logging's last resort the note was written into the progress bar's line, before the [step N] line
    it is about (a new user's run); now it is a line of its own, said after the step's."""
    trainer = PPOTrainer.__new__(PPOTrainer)
    trainer._notes = ["steps 1-3 trained nothing: ..."]
    handlers = logging.getLogger().handlers[:]  # pytest's own: a user's script has none
    for handler in handlers:
        logging.getLogger().removeHandler(handler)
    try:
        trainer._say_notes()
    finally:
        for handler in handlers:
            logging.getLogger().addHandler(handler)
    assert capsys.readouterr().err == "warning: steps 1-3 trained nothing: ...\n"
    assert trainer._notes == []


def test_a_step_whose_every_loss_mask_is_empty_is_named_at_once_with_how_trajectories_ended(tiny_chat_model, toy_data,
                                                                                          tmp_path, caplog):
    """The agent layer masks out trajectories that ran out of iterations (a cold run of the tiny SWE agent example:
    every one `max_iterations_reached`, reward/mean=0.000 grad_norm=0.000 and nothing said)."""
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path))
    trainer = PPOTrainer(cfg)
    batch = SimpleNamespace(tensors={"advantages": torch.zeros(4, 3), "response_mask": torch.zeros(4, 3)})
    output = {"rewards": [0.0, 1.0, 0.0, 0.0], "stop_reasons": ["max_iterations_reached"] * 3 + ["error_runtime"]}
    with caplog.at_level(logging.WARNING, logger="skygym_train.trainer"):
        for _ in range(2):
            trainer._warn_without_signal(batch, output)
            trainer._say_notes()
    said = [r.getMessage() for r in caplog.records if "masked out every token" in r.getMessage()]
    assert len(said) == 1, said  # at once, and once a run
    assert said[0].startswith("step 1 trained nothing: the generator masked out every token of every trajectory "
                              "(loss masks all 0; how they ended: max_iterations_reached x3, error_runtime x1)")
    assert "generator.max_iterations" in said[0]
