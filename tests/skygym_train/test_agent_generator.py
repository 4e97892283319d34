"""The agent layer's runner is a generator the bundled trainer trains with (``PPOTrainer(cfg, generator=runner)``)."""

from __future__ import annotations

import json

from skygym_adapters.agents import AgentRunner
from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


def test_the_trainer_takes_an_agent_runner_as_its_generator(tiny_chat_model, toy_data, tmp_path):
    from skygym_adapters.engines import EngineClient
    from skygym_adapters.engines.hf import HFEngine
    from skygym_adapters.models import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_chat_model))
    engine = EngineClient([HFEngine(str(tiny_chat_model), tokenizer)])
    runner = AgentRunner(
        {
            "task": "env",
            "generator": {"infer_backend": "skyrl-train", "max_iterations": 1},
            "dispatcher": {"max_parallel_agents": 8},
        },
        infer_engine=engine,
        tokenizer=tokenizer,
    )
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 2}))
    with PPOTrainer(cfg, generator=runner, engine=engine, tokenizer=tokenizer) as trainer:
        trainer.fit()
        assert trainer.global_step == 2
    logs = [
        json.loads(line)
        for path in (tmp_path / "logs").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    logged = {key for entry in logs for key in entry}
    assert any(key.endswith("agent/finish_reason/FINISH") for key in logged), sorted(logged)[:40]
