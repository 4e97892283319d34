"""The agent layer against an OpenAI-compatible server on 127.0.0.1: gsm8k rows through ``task: env``, scored by
the gsm8k env, from Python (``AutoAgentRunner``) and from the command line (``skyrl-gym agent eval``)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from skygym_adapters.agents import AutoAgentRunner
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows
from tests.adapters.agents.chat_server import chat_server
from tests.fixtures.extras import require_extra


@pytest.fixture
def rows(gsm8k_test_file):
    return list(gsm8k_rows(gsm8k_test_file, limit=6))


def truth_for(body, rows):
    question = (
        body["messages"][-1]["content"]
        if body["messages"][-1]["role"] == "user"
        else body["messages"][0]["content"]
    )
    for index, row in enumerate(rows):
        if row["prompt"][0]["content"] == question:
            return index, row["reward_spec"]["ground_truth"]
    raise AssertionError(f"unknown question {question[:60]!r}")


def answers_even_rows(rows):
    """Right (``#### N``) for rows 0, 2, 4; a wrong number for rows 1, 3, 5."""

    def respond(body):
        index, truth = truth_for(body, rows)
        number = int(truth.replace(",", ""))
        return f"Working it out... #### {number if index % 2 == 0 else number + 1}"

    return respond


def write_config(tmp_path: Path, url: str, **generator) -> Path:
    import yaml

    config = {
        "agent_cls": "react",
        "task": "env",
        "env_class": "gsm8k",
        "generator": {
            "infer_backend": "openai_server",
            "backend_config": {"base_url": url, "model": "scripted-model"},
            "sampling_params": {"temperature": 0.0, "max_tokens": 64},
            "max_iterations": 1,
            "num_trajectories": 1,
            **generator,
        },
        "dispatcher": {"type": "async_pipeline", "max_parallel_agents": 4, "max_eval_parallel_agents": 2},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_python_entry_scores_each_gsm8k_row_through_the_env_task(tmp_path, rows):
    with chat_server(answers_even_rows(rows)) as server:
        runner = AutoAgentRunner.from_task(
            str(write_config(tmp_path, server.url)), infer_engine=None, tokenizer=None
        )
        out = asyncio.run(runner.run(rows, val_mode=True))
    assert out["rewards"] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    first = out["results"][0]
    assert first["instance_id"] == 0 and first["trajectory_id"] == 0 and first["finish_reason"] == "FINISH"
    assert first["error"] is None and first["eval_error"] is None
    assert [m["role"] for m in out["messages"][0]] == ["user", "assistant"]
    assert out["summary"]["mean_reward"] == 0.5 and out["summary"]["finish_reasons"] == {"FINISH": 6}
    # the request the server saw: the row's prompt, the configured model and sampling parameters
    request = server.requests[0]
    assert (
        request["model"] == "scripted-model" and request["temperature"] == 0.0 and request["max_tokens"] == 64
    )
    assert "tools" not in request  # gsm8k has no tools


def test_pass_at_k_over_several_trajectories_per_instance(tmp_path, rows):
    seen = {}

    def first_try_only(body):  # right on each question's first request, wrong afterwards
        index, truth = truth_for(body, rows)
        seen[index] = seen.get(index, 0) + 1
        return f"#### {truth if seen[index] == 1 else 'nope'}"

    with chat_server(first_try_only) as server:
        config = write_config(tmp_path, server.url, num_trajectories=3)
        out = asyncio.run(AutoAgentRunner.from_task(str(config), None, None).run(rows[:2], val_mode=True))
    assert len(out["results"]) == 6 and sorted(out["rewards"]) == [0, 0, 0, 0, 1, 1]
    assert [(r["instance_id"], r["trajectory_id"]) for r in out["results"]] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
    ]
    assert out["summary"]["pass@1"] == pytest.approx(1 / 3) and out["summary"]["pass@3"] == 1.0


def test_a_backend_timeout_fails_that_trajectory_and_the_batch_goes_on(tmp_path, rows):
    """A reply past the backend timeout fails only its own trajectory. Row 2's reply is held until the batch is
    done, and the timeout is 5 s (0.3 s, which the quick rows had to meet too, failed them on a loaded machine)."""
    respond = answers_even_rows(rows)
    released = threading.Event()

    def held_on_row_two(body):
        index, _ = truth_for(body, rows)
        if index == 2:
            released.wait(timeout=120)  # past any timeout: only the client's cut ends the call
        return respond(body)

    with chat_server(held_on_row_two) as server:
        config = write_config(
            tmp_path, server.url, backend_config={"base_url": server.url, "model": "m", "timeout": 5}
        )
        try:
            out = asyncio.run(AutoAgentRunner.from_task(str(config), None, None).run(rows[:4], val_mode=True))
        finally:
            released.set()
    assert out["rewards"] == [1.0, 0.0, 0.0, 0.0]
    failed = out["results"][2]
    assert failed["finish_reason"] == "error_backend" and "timed out after 5 s" in failed["error"]
    assert [r["finish_reason"] for r in out["results"]] == ["FINISH", "FINISH", "error_backend", "FINISH"]
    assert out["summary"]["errors"] == 1


def test_agent_eval_command_writes_one_line_per_trajectory(tmp_path, rows):
    require_extra("remote")  # the command reports a missing extra as exit 2, which a test cannot tell apart
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    output = tmp_path / "agent_trajectories.jsonl"  # the default: beside the rows, not in the current folder
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    with chat_server(answers_even_rows(rows)) as server:
        config = write_config(tmp_path, server.url)
        # a subprocess: the installed command, and proof that chat evaluation never imports transformers or torch
        code = (
            "import sys; from skyrl_gym.cli import main; rc = main(sys.argv[1:]); "
            "assert 'transformers' not in sys.modules and 'torch' not in sys.modules, 'heavy import'; sys.exit(rc)"
        )
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                code,
                "agent",
                "eval",
                str(config),
                "--data",
                str(data),
                "--limit",
                "4",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=elsewhere,
        )
    assert proc.returncode == 0, proc.stderr
    assert list(elsewhere.iterdir()) == [] and f"trajectories to {output}" in proc.stdout
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["reward"] for line in lines] == [1.0, 0.0, 1.0, 0.0]
    assert set(lines[0]) >= {"instance_id", "trajectory_id", "reward", "finish_reason", "messages", "error", "results"}
    assert "model_patch" not in lines[0]  # only SWE tasks' results carry a patch
    assert lines[1]["messages"][-1]["content"].endswith(
        str(int(rows[1]["reward_spec"]["ground_truth"].replace(",", "")) + 1)
    )
    assert re.search(r"mean_reward\s*│?\s*0\.5", proc.stdout), proc.stdout
    assert "FINISH" in proc.stdout


def test_agent_eval_command_reports_bad_config_with_the_choices(tmp_path, rows, capsys):
    require_extra("remote")  # the command reports a missing extra as exit 2, which a test cannot tell apart
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(rows[0]) + "\n")
    config = tmp_path / "bad.yaml"
    config.write_text("task: env\ngenerator:\n  infer_backend: nope\n")
    from skyrl_gym.cli import main

    assert (
        main(["agent", "eval", str(config), "--data", str(data), "--output", str(tmp_path / "o.jsonl")]) == 2
    )
    assert "nope" in capsys.readouterr().err


def test_agent_eval_command_exits_1_naming_the_first_error_unless_errors_are_allowed(tmp_path, rows, capsys):
    """A server that answers errors: the table counts them, and the command says why and exits 1, as `skyrl-gym
    eval` does (it exited 0 with the reason only inside the trajectories file)."""
    require_extra("remote")  # the command reports a missing extra as exit 2, which a test cannot tell apart
    from skyrl_gym.cli import main

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    with chat_server(lambda body: ("status", 503, "the model is loading")) as server:
        config = write_config(tmp_path, server.url)
        args = ["agent", "eval", str(config), "--data", str(data), "--output", str(tmp_path / "o.jsonl"),
                "--no-progress"]
        assert main(args) == 1
        err = capsys.readouterr().err
        assert "error: 2 of 2 trajectories errored (first: " in err and "HTTP 503" in err and "--allow-errors" in err
        assert main(args + ["--allow-errors"]) == 0
        assert "warning: 2 of 2 trajectories errored" in capsys.readouterr().err


def test_agent_eval_command_says_once_that_no_server_answers(tmp_path, rows, capsys):
    """Nothing listening at base_url: each trajectory failed on it in turn, and the command said so only after all
    of them (a new user's cold run). It is an error before the first, naming the address and the way without a
    server, and no trajectories file is written; without a model name, asking the server for it says the same."""
    require_extra("remote")  # the command reports a missing extra as exit 2, which a test cannot tell apart
    import socket

    from skyrl_gym.cli import main

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    output = tmp_path / "o.jsonl"
    args = ["--data", str(data), "--output", str(output), "--no-progress", "--allow-errors"]
    assert main(["agent", "eval", str(write_config(tmp_path, url)), *args]) == 1
    err = capsys.readouterr().err
    assert f"error: nothing answers at {url} (" in err, err
    assert f"check that an OpenAI-compatible server is running at {url}" in err and "--local-model MODEL" in err
    assert "trajectories errored" not in err and not output.exists()
    # no model named: asking the server for it fails first, and says what to check and how to name it
    config = write_config(tmp_path, url, backend_config={"base_url": url})
    assert main(["agent", "eval", str(config), *args]) == 1
    err = capsys.readouterr().err
    assert f"check that an OpenAI-compatible server is running at {url}, or name the model: " in err, err
    assert "--model for `skyrl-gym agent eval`" in err  # said only "set generator.backend_config.model"
    assert not output.exists()


def test_a_multi_turn_env_is_played_until_it_is_done(tmp_path, gsm8k_test_file):
    rows = list(gsm8k_rows(gsm8k_test_file, limit=1, env_class="gsm8k_multi_turn"))
    truth = rows[0]["reward_spec"]["ground_truth"]
    replies = iter(["#### 1", f"#### {truth}"])
    with chat_server(lambda body: next(replies)) as server:
        config = write_config(tmp_path, server.url, max_iterations=4)
        text = config.read_text().replace("env_class: gsm8k\n", "")  # each row's env_class
        config.write_text(text)
        out = asyncio.run(AutoAgentRunner.from_task(str(config), None, None).run(rows, val_mode=True))
    result = out["results"][0]
    assert result["reward"] == pytest.approx(0.2 / 5 + 1.0) and result["num_turns"] == 2
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "user", "assistant"]
    assert result["finish_reason"] == "FINISH"


def test_shipped_config_by_name_with_command_line_overrides(tmp_path, rows):
    require_extra("remote")  # the command reports a missing extra as exit 2, which a test cannot tell apart
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    output = tmp_path / "out.jsonl"
    from skyrl_gym.cli import main

    with chat_server(answers_even_rows(rows)) as server:
        rc = main(
            [
                "agent",
                "eval",
                "gsm8k_env",
                "--data",
                str(data),
                "--output",
                str(output),
                "--base-url",
                server.url,
                "--model",
                "served-name",
                "--no-progress",
            ]
        )
    assert rc == 0 and server.requests[0]["model"] == "served-name"
    assert [json.loads(line)["reward"] for line in output.read_text().splitlines()] == [1.0, 0.0]


def test_a_config_env_class_that_replaces_the_rows_own_is_warned_once(tmp_path, rows, caplog):
    """gsm8k_env on multiply rows scored them with the gsm8k verifier without a word."""
    mixed = [dict(row, env_class="multiply") for row in rows[:2]] + [rows[2]]
    logger = "skygym_adapters.agents.runner"
    with chat_server(answers_even_rows(rows)) as server:
        runner = AutoAgentRunner.from_task(str(write_config(tmp_path, server.url)), None, None)
        with caplog.at_level("WARNING", logger=logger):
            asyncio.run(runner.run(rows[2:4], val_mode=True))  # gsm8k rows under a gsm8k config: nothing to say
            assert not [r for r in caplog.records if r.name == logger]
            asyncio.run(runner.run(mixed, val_mode=True))
            asyncio.run(runner.run(mixed, val_mode=True))  # once per runner, not per row or per batch
    warnings = [r.getMessage() for r in caplog.records if r.name == logger]
    assert warnings == [
        "the agent config's env_class 'gsm8k' replaces the env_class of 2 of 3 rows ('multiply' x2): they are "
        "played and scored by 'gsm8k'; leave env_class out of the config to use each row's own"
    ]


def test_data_keys_pick_the_instance_and_its_id_out_of_nested_rows(tmp_path, rows):
    nested = [{"instance": row, "meta": {"id": f"gsm-{i}"}} for i, row in enumerate(rows[:2])]
    with chat_server(answers_even_rows(rows)) as server:
        config = write_config(tmp_path, server.url)
        text = config.read_text() + "data:\n  instance_key: instance\n  instance_id_key: meta.id\n"
        config.write_text(text)
        out = asyncio.run(AutoAgentRunner.from_task(str(config), None, None).run(nested, val_mode=True))
    assert [r["instance_id"] for r in out["results"]] == ["gsm-0", "gsm-1"] and out["rewards"] == [1.0, 0.0]


def test_a_rows_max_turns_bounds_the_episode(tmp_path, gsm8k_test_file):
    rows = [
        {**row, "max_turns": 2} for row in gsm8k_rows(gsm8k_test_file, limit=1, env_class="gsm8k_multi_turn")
    ]
    with chat_server(lambda body: "#### 1") as server:
        config = write_config(tmp_path, server.url, max_iterations=4)
        config.write_text(config.read_text().replace("env_class: gsm8k\n", ""))
        out = asyncio.run(AutoAgentRunner.from_task(str(config), None, None).run(rows, val_mode=True))
    assert out["results"][0]["num_turns"] == 2 and len(server.requests) == 2


_RUN_AND_COLLECT = """
import asyncio, gc, json, sys
from skygym_adapters.agents import AutoAgentRunner

config, rows_path, how = sys.argv[1:]
with open(rows_path) as handle:
    rows = [json.loads(line) for line in handle]

async def with_context_manager():
    async with AutoAgentRunner.from_task(config, None, None) as runner:
        return (await runner.run(rows, val_mode=True))["rewards"]

if how == "run":  # the documented call, with nothing closed by hand
    runner = AutoAgentRunner.from_task(config, None, None)
    rewards = asyncio.run(runner.run(rows, val_mode=True))
    rewards = rewards["rewards"] + asyncio.run(runner.run(rows, val_mode=True))["rewards"]  # a second loop
    del runner
else:
    rewards = asyncio.run(with_context_manager())
gc.collect()
print(rewards)
"""


@pytest.mark.parametrize("how", ["run", "context_manager"])
def test_an_agent_run_leaves_no_unclosed_http_session(tmp_path, rows, how):
    """The OpenAI backend's aiohttp session is closed when the run ends (and by ``aclose``/``async with``): no
    "Unclosed client session" once the loop and the runner are gone."""
    require_extra("remote")
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    with chat_server(answers_even_rows(rows)) as server:
        config = write_config(tmp_path, server.url)
        proc = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", _RUN_AND_COLLECT, str(config),
                               str(data), how], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("[1.0, 0.0, 1.0, 0.0]" if how == "run" else "[1.0, 0.0]")
    assert "Unclosed" not in proc.stderr, proc.stderr
