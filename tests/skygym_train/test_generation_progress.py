"""Generation shows its progress: a bar of token positions with the time left, in training steps and evaluation."""

from __future__ import annotations

from typing import Any, List

import pytest

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


class RecordingBar:
    """Stands in for tqdm: records what the trainer shows."""

    bars: List["RecordingBar"] = []

    def __init__(self, iterable: Any = None, desc: str = "", total: int = 0, unit: str = "", **kwargs: Any) -> None:
        self.iterable, self.total, self.desc, self.unit, self.n = iterable, total, desc, unit, 0
        self.postfixes = [kwargs.get("postfix")]
        RecordingBar.bars.append(self)

    def __iter__(self) -> Any:  # model loaders wrap iterables
        return iter(self.iterable)

    def __enter__(self) -> "RecordingBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # set_description, refresh, ...: nothing to record
        return lambda *args, **kwargs: None

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, refresh: bool = True, **postfix: Any) -> None:
        self.postfixes.append(postfix)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("max_turns", [1, 2])
def test_training_and_evaluation_show_token_progress(max_turns, tiny_chat_model, toy_data, tmp_path, monkeypatch):
    """Both bars count token positions, and generations as rows, or as turns of episodes where an episode may take
    several (the evaluation bar read rows=27/16 there)."""
    import tqdm.auto

    RecordingBar.bars = []
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
        "trainer.max_training_steps": 1, "trainer.progress_bar": "true", "data.val_data": f"[{toy_data}]",
        "trainer.eval_batch_size": 16, "trainer.eval_interval": 1, "generator.max_turns": max_turns,
    }))
    monkeypatch.setattr(tqdm.auto, "tqdm", RecordingBar)
    with PPOTrainer(cfg) as trainer:
        trainer.fit()
    by_desc = {}
    for bar in RecordingBar.bars:
        by_desc.setdefault(bar.desc, []).append(bar)
    budget = 8  # generator.sampling_params.max_generate_length in toy_overrides
    generating = by_desc["generating"]
    (evaluating,) = by_desc["evaluating"]

    def shown(done: int, total: int) -> dict:
        return {"rows": f"{done}/{total}"} if max_turns == 1 else {"turns": str(done), "episodes": str(total)}

    assert len(generating) == 1 and generating[0].unit == "tok"
    # 4 prompts x 4 samples, every position settled (a toy episode ends after one turn: its second turn's budget too)
    assert generating[0].n == generating[0].total == 4 * 4 * budget * max_turns
    assert generating[0].postfixes[0] == shown(0, 16) and generating[0].postfixes[-1] == shown(16, 16)
    assert evaluating.unit == "tok" and evaluating.n == evaluating.total == 64 * 1 * budget * max_turns
    assert evaluating.postfixes[-1] == shown(64, 64)
    done = [int(next(iter(p.values())).split("/")[0]) for p in evaluating.postfixes]
    assert done == sorted(done) and len(set(done)) > 2  # row by row


def test_a_multi_turn_bar_counts_turns_not_rows():
    """The engine reports each generation; with two turns per episode the bar read rows=52/32."""
    from skygym_train.trainer import _TokenProgress

    single, multi = _TokenProgress("generating", 100, 2), _TokenProgress("generating", 100, 2, multi_turn=True)
    try:
        for rows in (1, 1):
            single(10, rows)
        for rows in (1, 2):  # episode 1 ended after its first turn; episode 2 took two
            multi(10, rows)
        assert single.bar.postfix == "rows=2/2" and multi.bar.postfix == "episodes=2, turns=3"
    finally:
        single.close()
        multi.close()


def test_a_piped_log_gets_the_training_bar_and_not_the_bars_within_a_step(tiny_chat_model, toy_data, tmp_path,
                                                                          capfd):
    """Real tqdm, stderr not a terminal (a log piped to a file): the generating and evaluating bars wrote about
    nine lines a step there, burying the training bar and the metrics."""
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
        "trainer.max_training_steps": 1, "trainer.progress_bar": "true", "data.val_data": f"[{toy_data}]",
        "trainer.eval_batch_size": 16, "trainer.eval_interval": 1,
    }))
    with PPOTrainer(cfg) as trainer:
        trainer.fit()
    err = capfd.readouterr().err
    assert "training:" in err and "1/1" in err, err[-2000:]
    assert "generating" not in err and "evaluating" not in err, err[-2000:]
