"""veRL's own agent-loop worker plays agent-layer trajectories through the ``skyrl_agent_runner`` loop.

As in test_agent_loop.py: rows converted to veRL Parquet, read by veRL's ``RLHFDataset``, collated and handed to
``AgentLoopWorker.generate_sequences``, which finds the loop through an agent-loop config file and pads the results.
Generation goes through veRL's server-manager interface (``EngineServerManager``) over a scripted engine or a tiny
transformers model; the agent layer talks to it with ``infer_backend: verl``. No Ray, no vLLM.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import List

import pytest

pytest.importorskip("verl", reason="needs the 'verl' extra, in a venv of its own: nox -s verl")
pytestmark = pytest.mark.verl

import yaml  # noqa: E402

from skygym_adapters.agents.tools import NO_TOOL_CALL  # noqa: E402
from skygym_adapters.scripted import ScriptedEngine  # noqa: E402
from skygym_adapters.verl.local import compose_config, generate_sequences, load_batch  # noqa: E402
from skygym_adapters.verl.rows import rows_to_verl  # noqa: E402
from skygym_adapters.verl.server import EngineServerManager  # noqa: E402
from skyrl_gym.data import write_parquet  # noqa: E402
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows  # noqa: E402
from skyrl_gym.envs.gsm8k.multi_turn_env import LAST_TURN_MESSAGE, RETRY_MESSAGE  # noqa: E402

PROMPT_LENGTH = 384
LOOP_NAME = "skyrl_agent_runner"
EXAMPLE_LOOP_FILE = Path(__file__).resolve().parents[3] / "examples" / "verl" / "agent_runner_loop.yaml"


def _run(tmp_path, model_dir, tokenizer, rows, agent: dict, engine, response_length: int):
    """veRL's worker over ``rows`` with the example agent-loop file pointing at ``agent`` (an agent YAML)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    agent_file = tmp_path / "agent.yaml"
    agent_file.write_text(yaml.safe_dump(agent))
    entries = yaml.safe_load(EXAMPLE_LOOP_FILE.read_text())
    assert [e["name"] for e in entries] == [LOOP_NAME]
    entries[0]["agent_config"] = str(agent_file)
    loop_file = tmp_path / "agent_loop.yaml"
    loop_file.write_text(yaml.safe_dump(entries))
    config = compose_config(
        model_dir,
        [
            f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={response_length}",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_file}",
        ],
    )
    path = write_parquet(rows_to_verl(rows, agent_name=LOOP_NAME), tmp_path / "train.parquet")
    batch = load_batch(path, config, tokenizer)
    server = EngineServerManager(engine)
    return asyncio.run(generate_sequences(config, server, batch)), server


def _segments(mask: List[int]) -> List[tuple]:
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def _sample(output, i):
    length = int(output.batch["attention_mask"][i, PROMPT_LENGTH:].sum())
    return output.batch["responses"][i, :length].tolist(), output.batch["response_mask"][i, :length].tolist()


def test_env_task_and_react_tools_run_as_agent_trajectories(tmp_path, gsm8k_test_file, tiny_model_dir, tokenizer):
    """task: env (any registered env) and task: general_react (the finish tool, graded by the task)."""
    rows = list(gsm8k_rows(gsm8k_test_file, limit=3, env_class="gsm8k_multi_turn"))
    for row in rows:
        row["max_turns"] = 3
    truth = [row["reward_spec"]["ground_truth"] for row in rows]
    scripts = {
        rows[0]["extra_info"]["question"]: ["I think #### 1", f"#### {truth[0]}"],
        rows[1]["extra_info"]["question"]: ["wrong #### 1", "still #### 2", "no idea"],
    }
    unknown_env = {"data_source": "t", "prompt": [{"role": "user", "content": "row of an unknown env"}],
                   "env_class": "gsm9k", "reward_spec": {"method": "rule", "ground_truth": "4"}}
    agent = {"agent_cls": "react", "task": "env", "generator": {"max_iterations": 3, "sampling_params": {"max_tokens": 48}}}
    engine = ScriptedEngine(tokenizer, scripts)
    output, server = _run(tmp_path, tiny_model_dir, tokenizer, rows[:2] + [unknown_env], agent, engine, 256)
    extra = output.non_tensor_batch

    # Row 0: a wrong formatted answer (0.2 / 3), then the right one; the env ended the episode.
    assert extra["finish_reason"][0] == "FINISH" and extra["error"][0] is None
    assert list(extra["turn_scores"][0]) == pytest.approx([0.2 / 3, 1.0])
    assert extra["skyrl_gym_reward"][0] == pytest.approx(1.0 + 0.2 / 3)
    assert extra["__num_turns__"][0] == 1 + 2 + 1  # prompt, two assistant turns, one env message
    ids, mask = _sample(output, 0)
    model_runs = [(s, e) for v, s, e in _segments(mask) if v == 1]
    env_runs = [(s, e) for v, s, e in _segments(mask) if v == 0]
    assert [tokenizer.decode(ids[s:e], skip_special_tokens=True) for s, e in model_runs] == scripts[
        rows[0]["extra_info"]["question"]
    ]
    assert len(env_runs) == 1 and RETRY_MESSAGE in tokenizer.decode(ids[env_runs[0][0] : env_runs[0][1]])
    assert list(extra["turn_reward_positions"][0]) == [e - 1 for s, e in model_runs]
    # veRL put the trajectory's reward on its last response token.
    rm_scores = output.batch["rm_scores"][0]
    assert float(rm_scores[len(mask) - 1]) == pytest.approx(1.0 + 0.2 / 3) and int((rm_scores != 0).sum()) == 1
    assert output.batch["rollout_log_probs"].shape == output.batch["responses"].shape

    # Row 1: three wrong answers end the env's episode at its turn limit; the env's messages are masked out.
    assert extra["finish_reason"][1] == "FINISH" and extra["assistant_turns"][1] == 3
    ids, mask = _sample(output, 1)
    assert [v for v, _, _ in _segments(mask)] == [1, 0, 1, 0, 1]
    assert LAST_TURN_MESSAGE in tokenizer.decode(ids[[(s, e) for v, s, e in _segments(mask) if v == 0][1][0]:])
    assert server.calls == 5 and engine.turns == {key: len(a) for key, a in scripts.items()}

    # Row 2: a row the task cannot start is one masked sample with its reason, not a failed batch.
    assert extra["finish_reason"][2] == "error_runtime" and "gsm9k" in extra["error"][2]
    assert extra["skyrl_gym_reward"][2] == 0.0 and extra["assistant_turns"][2] == 0
    assert set(_sample(output, 2)[1]) <= {0}

    # task: general_react, same rows: the agent's tools are the env; its answer is graded by the task.
    react = {"agent_cls": "react", "task": "general_react", "tools": ["finish"],
             "generator": {"max_iterations": 2, "sampling_params": {"max_tokens": 48}}}
    scripts = {
        rows[0]["extra_info"]["question"]: ["Let me think.", f"<finish>\\boxed{{{truth[0]}}}</finish>"],
        rows[1]["extra_info"]["question"]: ["Hmm.", "Still thinking."],
        rows[2]["extra_info"]["question"]: ["<finish>\\boxed{-1}</finish>"],
    }
    engine = ScriptedEngine(tokenizer, scripts)
    output, _ = _run(tmp_path / "react", tiny_model_dir, tokenizer, rows, react, engine, response_length=256)
    extra = output.non_tensor_batch
    assert list(extra["finish_reason"]) == ["FINISH_TOOL", "max_iterations_reached", "FINISH_TOOL"]
    assert list(extra["skyrl_gym_reward"]) == [1.0, 0.0, 0.0]
    ids, mask = _sample(output, 0)
    runs = _segments(mask)
    assert [v for v, _, _ in runs] == [1, 0, 1]
    assert NO_TOOL_CALL.split("{")[0].strip() in tokenizer.decode(ids[runs[1][1] : runs[1][2]])
    assert float(output.batch["rm_scores"][0][len(mask) - 1]) == 1.0
    # SkyAgent's rule: a trajectory cut at max_iterations is not trained on (tokens kept, mask all 0).
    ids, mask = _sample(output, 1)
    assert len(ids) > 0 and set(mask) == {0}


def test_tiny_model_trajectories_with_logprobs(tmp_path, gsm8k_test_file, tiny_model_dir, tokenizer):
    """A real transformers model generates; veRL gets its logprobs on the model's tokens."""
    from skygym_adapters.engines.hf import HFEngine

    rows = list(gsm8k_rows(gsm8k_test_file, limit=1, env_class="gsm8k_multi_turn"))
    rows[0]["max_turns"] = 2
    agent = {"task": "env", "generator": {"max_iterations": 2, "sampling_params": {"max_tokens": 12}}}
    output, server = _run(tmp_path, tiny_model_dir, tokenizer, rows, agent, HFEngine(str(tiny_model_dir)), 160)
    extra = output.non_tensor_batch
    assert server.calls == 2
    ids, mask = _sample(output, 0)
    assert extra["error"][0] is None and extra["assistant_turns"][0] == 2
    runs = _segments(mask)
    assert [v for v, _, _ in runs] == [1, 0, 1]  # model turn, the env's message, model turn
    assert LAST_TURN_MESSAGE in tokenizer.decode(ids[runs[1][1] : runs[1][2]])
    assert all(e - s <= 12 + 1 for v, s, e in runs if v == 1)  # the YAML's max_tokens (+ an end-of-turn token)
    logprobs = output.batch["rollout_log_probs"][0, : len(mask)].tolist()
    assert all(lp < 0 for lp, m in zip(logprobs, mask) if m == 1)  # the model's own sampled tokens
    assert all(lp == 0 for lp, m in zip(logprobs, mask) if m == 0)


def test_no_turn_asks_for_more_than_the_response_budget_left(tmp_path, gsm8k_test_file, tiny_model_dir, tokenizer):
    """The second turn's max_tokens is cut to what rollout.response_length leaves after turn one and the env's
    message, so the turn ends exactly at the budget (its reward on the last response token) instead of being cut
    off afterwards."""
    rows = list(gsm8k_rows(gsm8k_test_file, limit=1, env_class="gsm8k_multi_turn"))
    rows[0]["max_turns"] = 2
    long_answer = "I keep counting the apples one by one " * 20
    engine = ScriptedEngine(tokenizer, {rows[0]["extra_info"]["question"]: ["#### 1", long_answer]})
    agent = {"task": "env", "generator": {"max_iterations": 2, "sampling_params": {"max_tokens": 400}}}
    output, server = _run(tmp_path, tiny_model_dir, tokenizer, rows, agent, engine, response_length=96)
    extra = output.non_tensor_batch
    ids, mask = _sample(output, 0)
    runs = [(v, s, e) for v, s, e in _segments(mask)]
    assert [v for v, _, _ in runs] == [1, 0, 1] and len(ids) == 96
    assert extra["finish_reason"][0] == "FINISH" and server.calls == 2
    assert list(extra["turn_reward_positions"][0]) == [runs[0][2] - 1, 95]
    assert long_answer.startswith(tokenizer.decode(ids[runs[2][1] :], skip_special_tokens=True))
