"""Closing a trainer ends what its run started: a run kept in a notebook or a script after its ``with`` block
held its env threads (up to 32), an event loop's descriptors and, with Ray env workers, a live actor until the
trainer object was collected (a resource audit)."""

from __future__ import annotations

import threading
import time

import pytest

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


def _alive(prefix: str) -> list:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def _ended(threads: list, timeout_s: float = 10.0) -> list:
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads if t.is_alive()]


def test_closing_a_trainer_ends_its_env_threads_and_its_event_loop(tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 1}))
    before = set(_alive("skyrl-env"))
    with PPOTrainer(cfg) as trainer:
        trainer.fit()
        started = [t for t in _alive("skyrl-env") if t not in before]
        assert started, "the run started no env threads: nothing here to check"
        loop = trainer._runner.loop
    assert _ended(started) == []
    assert loop.is_closed()
    trainer.close()  # a second close (the with block made the first) does nothing


def test_closing_leaves_a_generator_the_caller_gave_to_the_caller(tiny_chat_model, toy_data, tmp_path):
    from skygym_train.generation import build_generator

    closed = []
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 1}))

    class Given:
        def __init__(self) -> None:
            self.inner = None

        async def generate(self, batch):
            return await self.inner.generate(batch)

        def close(self) -> None:
            closed.append(True)

    given = Given()
    trainer = PPOTrainer(cfg, generator=given)
    try:
        trainer.setup()
        given.inner = build_generator(cfg, trainer.engine, trainer.tokenizer)
        trainer.fit()
    finally:
        trainer.close()
        if given.inner is not None:
            given.inner.close()
    assert closed == []


def test_closing_a_trainer_closes_its_weight_broadcast_group(tiny_chat_model, toy_data, tmp_path):
    """The gloo group's store (policy rank 0's, listening for the engine) and connections stayed open after
    close."""
    import socket

    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
        "trainer.max_training_steps": 1, "generator.weight_sync_backend": "gloo"}))
    with PPOTrainer(cfg) as trainer:
        trainer.fit()
        sync = trainer._weight_sync
        assert sync.backend == "gloo" and sync.receiver is not None
        port = sync.receiver._args[2]
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # the store listens during the run
    assert sync.receiver is None and getattr(trainer.policy.worker, "_broadcast_group", None) is None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_a_generator_that_never_closes_does_not_hold_the_close(tiny_chat_model, toy_data, tmp_path, monkeypatch,
                                                              caplog):
    """An env worker or HTTP session that never answers kept ``close()`` (and the CLI's exit) waiting forever."""
    import asyncio

    from skygym_train import trainer as trainer_module

    monkeypatch.setattr(trainer_module, "GENERATOR_CLOSE_S", 1)
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 1}))
    trainer = PPOTrainer(cfg)
    trainer.setup()
    built = trainer.generator

    class NeverCloses:
        async def generate(self, batch):
            return await built.generate(batch)

        async def aclose(self) -> None:
            built.close()
            await asyncio.Event().wait()

    trainer.generator = NeverCloses()
    loop = trainer._runner.loop
    started = time.monotonic()
    trainer.close()
    assert time.monotonic() - started < 20
    assert loop.is_closed()  # what came after the generator closed as ever
    assert "did not close within 1 s" in caplog.text
