"""``skyrl-gym agent eval --local-model``: an agent evaluated with no server, its model on the HF engine in the
command's own process (the token backend), as a user without a GPU or a vLLM server tries one."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml

import skyrl_gym
from skyrl_gym.cli import main
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.data import write_jsonl
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows


def _agent_yaml(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({
        "agent_cls": "react", "task": "env", "env_class": "gsm8k",
        "generator": {"infer_backend": "openai_server", "backend_config": {"base_url": "http://127.0.0.1:9"},
                      "sampling_params": {"temperature": 0.0, "max_tokens": 8}, "max_iterations": 2,
                      "num_trajectories": 1},
    }))
    return path


def test_an_agent_runs_on_a_local_model_without_a_server(tmp_path, tiny_model_dir, gsm8k_test_file, capsys):
    rows = tmp_path / "rows.jsonl"
    write_jsonl(list(gsm8k_rows(gsm8k_test_file, limit=3)), rows)
    out = tmp_path / "trajectories.jsonl"
    # the YAML names a server that is not there (port 9): --local-model never reaches for it
    assert main(["agent", "eval", str(_agent_yaml(tmp_path)), "--data", str(rows), "--output", str(out),
                 "--local-model", str(tiny_model_dir), "--no-progress"]) == 0, capsys.readouterr().err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["instance_id"] for line in lines] == [0, 1, 2]
    for line in lines:
        assert line["error"] is None and line["reward"] == 0.0  # random weights: a reply, scored by the env
        replies = [m for m in line["messages"] if m["role"] == "assistant"]
        assert replies and all(isinstance(m["content"], str) for m in replies)
    assert "wrote 3 trajectories" in capsys.readouterr().out


@pytest.mark.parametrize("given, named", [(["--base-url", "http://127.0.0.1:8000"], "--base-url"),
                                          (["--model", "m", "--api-key", "k"], "--model, --api-key")])
def test_a_servers_settings_beside_a_local_model_are_refused_before_it_loads(given, named, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": [{"role": "user", "content": "1+1?"}], "env_class": "gsm8k", '
                    '"reward_spec": {"method": "rule", "ground_truth": "2"}}\n')
    code = main(["agent", "eval", str(_agent_yaml(tmp_path)), "--data", str(rows),
                 "--local-model", str(tmp_path / "no-such-model"), *given])
    assert code == 2
    assert capsys.readouterr().err.strip() == (f"error: {named}: a server's settings; --local-model runs the model "
                                               "in this process, without one")


def test_a_local_model_that_is_not_there_is_one_error_line(tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": [{"role": "user", "content": "1+1?"}], "env_class": "gsm8k", '
                    '"reward_spec": {"method": "rule", "ground_truth": "2"}}\n')
    assert main(["agent", "eval", str(_agent_yaml(tmp_path)), "--data", str(rows),
                 "--local-model", str(tmp_path / "no-such-model")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --local-model: ") and "no-such-model" in err and "\n" not in err, err


def test_max_iterations_and_max_tokens_override_the_config(tmp_path, tiny_model_dir, gsm8k_test_file, capsys):
    """A shipped config's 30 iterations of 2048 tokens took minutes a trajectory on a CPU (a cold run): the flags
    bound both without a copy of the YAML."""
    from transformers import AutoTokenizer

    rows = tmp_path / "rows.jsonl"  # gsm8k_multi_turn: a wrong answer gets another turn (the YAML allows 2)
    write_jsonl([dict(row, env_class="gsm8k_multi_turn") for row in gsm8k_rows(gsm8k_test_file, limit=2)], rows)
    out = tmp_path / "trajectories.jsonl"
    config = _agent_yaml(tmp_path)
    config.write_text(config.read_text().replace("env_class: gsm8k", "env_class: gsm8k_multi_turn"))
    assert main(["agent", "eval", str(config), "--data", str(rows), "--output", str(out),
                 "--local-model", str(tiny_model_dir), "--no-progress", "--max-iterations", "1",
                 "--max-tokens", "3"]) == 0, capsys.readouterr().err
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for line in map(json.loads, out.read_text().splitlines()):
        replies = [m["content"] for m in line["messages"] if m["role"] == "assistant"]
        assert len(replies) == 1 and len(tokenizer(replies[0], add_special_tokens=False)["input_ids"]) <= 3, line
        assert line["reward"] == 0.0, line  # a wrong answer: only the limit of 1 (the env is told it) ended it
    assert main(["agent", "eval", str(_agent_yaml(tmp_path)), "--data", str(rows), "--max-iterations", "0"]) == 2
    assert "error: --max-iterations must be at least 1, got 0" in capsys.readouterr().err


class CtrlCEnv(BaseTextEnv):
    """Presses Ctrl-C (SIGINT to this process) in the step of a row that asks for it, as a user would mid-run."""

    def step(self, action):
        if self.extras.get("press_ctrl_c"):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the interrupt reaches the main thread meanwhile
        return {"observations": [], "reward": 1.0, "done": True, "metadata": {}}


@pytest.fixture
def ctrl_c_env():
    skyrl_gym.register(id="agent_ctrl_c", entry_point=CtrlCEnv)
    yield "agent_ctrl_c"
    skyrl_gym.deregister("agent_ctrl_c")


def test_ctrl_c_writes_the_trajectories_that_had_finished(tmp_path, tiny_model_dir, ctrl_c_env, capsys):
    rows = tmp_path / "rows.jsonl"
    write_jsonl([{"prompt": [{"role": "user", "content": f"row {i}"}], "env_class": ctrl_c_env,
                  "press_ctrl_c": i == 1} for i in range(3)], rows)
    config = _agent_yaml(tmp_path)
    spec = yaml.safe_load(config.read_text())
    spec["env_class"] = ctrl_c_env
    spec["dispatcher"] = {"type": "async_pipeline", "max_parallel_agents": 1}  # one row at a time, in order
    config.write_text(yaml.safe_dump(spec))
    out = tmp_path / "trajectories.jsonl"
    code = main(["agent", "eval", str(config), "--data", str(rows), "--output", str(out),
                 "--local-model", str(tiny_model_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 130, err
    assert f"interrupted: 1 of 3 trajectories had finished; the 1 finished are in {out} (no summary)" in err, err
    (line,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert line["instance_id"] == 0 and line["reward"] == 1.0 and line["error"] is None


def test_the_progress_bar_counts_turns_as_they_end(tmp_path, tiny_model_dir, gsm8k_test_file, capsys):
    """A SWE trajectory takes minutes: a bar that moved only when one ended looked stuck."""
    rows = tmp_path / "rows.jsonl"  # gsm8k_multi_turn: a wrong answer gets another turn (the YAML allows 2)
    write_jsonl([dict(row, env_class="gsm8k_multi_turn") for row in gsm8k_rows(gsm8k_test_file, limit=2)], rows)
    config = _agent_yaml(tmp_path)
    config.write_text(config.read_text().replace("env_class: gsm8k", "env_class: gsm8k_multi_turn"))
    out = tmp_path / "trajectories.jsonl"
    assert main(["agent", "eval", str(config), "--data", str(rows), "--output", str(out),
                 "--local-model", str(tiny_model_dir)]) == 0
    err = capsys.readouterr().err
    turns = sum(json.loads(line)["num_turns"] for line in out.read_text().splitlines())
    assert turns == 4  # two rows, two wrong answers each (random weights)
    assert "2/2 [" in err and f"turns={turns}]" in err, err


def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    """The trajectories were written after the run: an evaluation of hours was lost to a misspelt folder."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": [{"role": "user", "content": "1+1?"}], "env_class": "gsm8k", '
                    '"reward_spec": {"method": "rule", "ground_truth": "2"}}\n')
    output = rows / "out.jsonl"  # under a file
    for flag in ("--output", "--summary-json"):
        assert main(["agent", "eval", str(_agent_yaml(tmp_path)), "--data", str(rows), flag, str(output),
                     "--local-model", str(tmp_path / "no-such-model")]) == 2
        assert capsys.readouterr().err == f"error: {flag}: cannot write {output}: {rows} is a file, not a folder\n"


def test_a_misspelt_env_class_is_refused_before_any_trajectory_runs(tmp_path, capsys):
    """It started every trajectory, and each failed on it: "12 of 12 trajectories errored"."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": [{"role": "user", "content": "1+1?"}], "env_class": "gsm8k", '
                    '"reward_spec": {"method": "rule", "ground_truth": "2"}}\n')
    config = _agent_yaml(tmp_path)
    config.write_text(config.read_text().replace("env_class: gsm8k", "env_class: gsm8kk"))
    assert main(["agent", "eval", str(config), "--data", str(rows), "--local-model",
                 str(tmp_path / "no-such-model")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the agent config's env_class 'gsm8kk': no env registered with id 'gsm8kk'. "
                          "Did you mean: 'gsm8k'?"), err
    config.write_text(config.read_text().replace("env_class: gsm8kk\n", ""))  # each row's own, then
    rows.write_text(rows.read_text().replace('"gsm8k"', '"gsm8kk"'))
    assert main(["agent", "eval", str(config), "--data", str(rows), "--local-model",
                 str(tmp_path / "no-such-model")]) == 2
    assert capsys.readouterr().err.startswith("error: row 1's env_class 'gsm8kk': no env registered")


def test_replies_cut_at_max_tokens_are_counted(tmp_path, tiny_model_dir, gsm8k_test_file, capsys):
    """On the token backend a cut reply is played as it was and a one-turn env ends FINISH: nothing said it."""
    rows = tmp_path / "rows.jsonl"
    write_jsonl(list(gsm8k_rows(gsm8k_test_file, limit=2)), rows)
    out = tmp_path / "trajectories.jsonl"
    summary = tmp_path / "summary.json"
    assert main(["agent", "eval", str(_agent_yaml(tmp_path)), "--data", str(rows), "--output", str(out),
                 "--local-model", str(tiny_model_dir), "--no-progress", "--summary-json", str(summary)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["replies_cut"] for line in lines] == [1, 1]  # random weights never stop before 8 tokens
    assert json.loads(summary.read_text())["trajectories_with_replies_cut"] == 2
    assert "trajectories_with_replies_cut" in capsys.readouterr().out
