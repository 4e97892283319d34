"""The agent layer's runner is a generator the bundled trainer trains with (``PPOTrainer(cfg, generator=runner)``)."""

from __future__ import annotations

import json

from skygym_adapters.agents import AgentRunner
from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides
from tests.tiny_models import CHAT_MODEL


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


def _agent_yaml(path, **generator):
    import yaml

    path.write_text(yaml.safe_dump({
        "agent_cls": "react",
        "task": "env",
        # the shipped configs name a chat server; the trainer runs them on its own engines
        "generator": {"infer_backend": "openai_server", "max_iterations": 1, **generator},
        "dispatcher": {"max_parallel_agents": 8},
    }))
    return path


def _logged(tmp_path):
    return [
        json.loads(line)
        for path in (tmp_path / "logs").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]


def test_generator_task_makes_the_agent_runner_the_generator(tiny_chat_model, toy_data, tmp_path):
    from skygym_train.agent_generator import AgentGenerator
    from skygym_train.config.validation import config_warnings

    task = _agent_yaml(tmp_path / "agent.yaml", sampling_params={"max_tokens": 3})
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
        "trainer.max_training_steps": 2, "generator.task": str(task),
        "generator.sampling_params.max_generate_length": 12}))
    assert any("replaced by skyrl-train" in w for w in config_warnings(cfg, has_cuda=False))
    with PPOTrainer(cfg) as trainer:
        trainer.fit()
        assert isinstance(trainer.generator, AgentGenerator)
        assert trainer.global_step == 2
    logs = _logged(tmp_path)
    steps = [entry for entry in logs if any(key.endswith("agent/avg_reward") for key in entry)]
    assert len(steps) == 2, sorted({key for entry in logs for key in entry})[:40]
    # the YAML's max_tokens (3) won over the trainer's max_generate_length (12)
    lengths = [value for entry in steps for key, value in entry.items() if key.endswith("generate/max_response_length")]
    assert lengths and max(lengths) <= 4, lengths


def test_the_agent_training_examples_comment_names_what_the_console_and_the_log_show(
        tiny_chat_model, toy_data, tmp_path, capsys):
    """examples/agents/train_agent_cpu.sh said rewards show on the console as agent/avg_reward,
    generate/avg_reward, eval/reward; the console line shows reward/mean. A step of the same generator
    (generator.task) with the script's console logger, and the jsonl one its comment names."""
    import re
    from pathlib import Path

    script = (Path(__file__).resolve().parents[2] / "examples/agents/train_agent_cpu.sh").read_text()
    comment = " ".join(line.lstrip("# ") for line in script.splitlines() if line.startswith("#"))
    on_console = re.search(r"console line: ((?:[\w/]+ )+)and timings", comment).group(1).split()
    in_log = re.search(r"agent's ([\w/]+) included, is in metrics.jsonl", comment).group(1)
    task = _agent_yaml(tmp_path / "agent.yaml", sampling_params={"max_tokens": 3})
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
        "trainer.max_training_steps": 1, "generator.task": str(task), "trainer.logger": "console,jsonl"}))
    with PPOTrainer(cfg) as trainer:
        trainer.fit()
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[step 1] ")]
    shown = [item.split("=")[0] for item in line.split()[2:]]
    assert [key for key in shown if "/" in key] == on_console, line  # the metrics, in the order shown
    assert any(key.endswith("s") and "/" not in key for key in shown), line  # and timings
    logged = {key for entry in _logged(tmp_path) for key in entry}
    assert in_log in logged, " ".join(sorted(logged))


def test_generator_task_is_checked_before_anything_loads(tmp_path, capsys):
    from skygym_train.entrypoints.main_base import main

    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply", '
                    '"reward_spec": {"ground_truth": "6"}}\n')
    keys = [f"data.train_data=[{data}]", f"trainer.policy.model.path={CHAT_MODEL}", "trainer.use_ray=false",
            "trainer.train_batch_size=1", "trainer.policy_mini_batch_size=1"]
    assert main(["--check", *keys, "generator.task=gsm8k_env"]) == 0
    assert main(["--check", *keys, "generator.task=no_such_agent"]) == 2
    err = capsys.readouterr().err
    assert "generator.task=no_such_agent" in err and "'gsm8k_env'" in err and "'swe_bench'" in err
    agent = _agent_yaml(tmp_path / "agent.yaml", max_iterations=3, num_trajectories=4)
    assert main(["--check", *keys, f"generator.task={agent}", "generator.max_turns=2",
                 "generator.n_samples_per_prompt=2", "environment.env_config.db_path=/x"]) == 2
    err = capsys.readouterr().err
    assert "generator.max_turns=2: with generator.task=" in err and "max_iterations (3)" in err
    assert "generator.n_samples_per_prompt=2" in err and "4 trajectories per instance" in err
    assert "environment.env_config={'db_path': '/x'}: not read" in err


def test_the_agent_training_example_passes_check(tmp_path):
    import os
    import runpy
    import subprocess
    import sys
    from pathlib import Path

    from skyrl_gym.data import write_jsonl

    root = Path(__file__).resolve().parents[2]
    # the example's rows, written here so that the script's --check is its only Python start
    tool_rows = runpy.run_path(str(root / "examples/agents/make_rows.py"))["tool_rows"]
    (tmp_path / "data").mkdir()
    write_jsonl(tool_rows("train", 8), tmp_path / "data" / "train.jsonl")
    write_jsonl(tool_rows("validation", 4), tmp_path / "data" / "validation.jsonl")
    env = {**os.environ, "DATA_DIR": str(tmp_path / "data"),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.run(["bash", str(root / "examples/agents/train_agent_cpu.sh"), "--check"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "configuration is valid" in proc.stdout + proc.stderr
    assert "multiply_tool_agent.yaml: its generator.infer_backend=openai_server is replaced" in proc.stderr


def test_the_trainer_refuses_a_generator_output_that_answers_another_batch():
    """A generator that mixed two batches run at once (the agent runner once did, with async training and
    evaluation) would have the trainer train another batch's rows under this batch's groups: the step stops."""
    import pytest

    from skygym_train.trainer import _check_answers_its_input

    asked = {"prompts": [[{"role": "user", "content": "q"}]] * 2,
             "trajectory_ids": [{"instance_id": "train-3-0", "repetition_id": r} for r in range(2)]}
    answered = {"response_ids": [[1], [2]], "trajectory_ids": [dict(t) for t in asked["trajectory_ids"]]}
    _check_answers_its_input(asked, answered)  # the same ids, in order
    swapped = {**answered, "trajectory_ids": [{"instance_id": "eval-3-0", "repetition_id": 0}, answered["trajectory_ids"][1]]}
    with pytest.raises(RuntimeError, match=r"row 0 is trajectory \('eval-3-0', 0\), not the \('train-3-0', 0\) asked"):
        _check_answers_its_input(asked, swapped)
    with pytest.raises(RuntimeError, match="returned 1 rows for 2 prompts"):
        _check_answers_its_input(asked, {"response_ids": [[1]]})
