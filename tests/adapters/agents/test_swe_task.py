"""``task: swe_bench`` (SWEBenchTask) against a real Docker engine and real instances built by ``skyrl-gym swe build``
(the session fixtures of tests/swe_fixtures.py). The model is a real OpenAI-compatible HTTP server
whose replies are scripted (tests/adapters/agents/chat_server.py): one that replays the gold patch through the
tools, one that submits nothing, one that only runs ```bash blocks, one that is cut off mid-run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

import pytest

from skygym_adapters.agents import (
    AgentConfigError,
    AgentRunner,
    SWEBenchTask,
    load_agent_config,
    parse_agent_config,
)
from skygym_adapters.agents.swe import SWE_SYSTEM_PROMPT, SWESettings
from skygym_adapters.agents.tasks import resolve_task
from skygym_sandboxes.containers import containers_of_kind
from skygym_sandboxes.docker_backend import OWNER_LABEL, owner_id
from skyrl_gym.envs.swe.dataset import instance_row
from skyrl_gym.envs.swe.replay import replay_actions
from tests.adapters.agents.chat_server import chat_server

docker_and_slow = [pytest.mark.docker, pytest.mark.slow]


def my_swe_containers(client):
    """The swe containers this process started (other sessions may share the engine)."""
    return [c for c in containers_of_kind(client, "swe") if c.labels.get(OWNER_LABEL) == owner_id()]


def instance_of(body, instances):
    """The instance whose problem statement the conversation carries."""
    text = "\n".join(str(m.get("content") or "") for m in body["messages"] if m["role"] == "user")
    return next(i for i in instances if i.problem_statement.strip() in text)


def turn_of(body) -> int:
    return sum(m["role"] == "assistant" for m in body["messages"])


def replaying_gold(instances):
    """A model that applies each instance's gold patch through str_replace_editor, one hunk a turn, then submits."""

    def respond(body):
        actions = replay_actions(instance_of(body, instances).patch)
        return actions[min(turn_of(body), len(actions) - 1)]

    return respond


def swe_config(url, **over):
    config = load_agent_config("swe_bench")  # the shipped YAML
    config.generator.backend_config.update(base_url=url, model="scripted-model")
    config.generator.max_iterations = over.pop("max_iterations", 12)
    config.dispatcher.max_parallel_agents = 2
    config.dispatcher.max_eval_parallel_agents = 2
    return config


# ----- without docker: names and bad input -------------------------------------------------------------


def test_swe_bench_is_reachable_by_our_name_and_by_skyagents_paths():
    for name in (
        "swe_bench",
        "skyrl_agent.tasks.swebench.utils.SWEBenchTask",
        "skyrl_agent.tasks.swebench.SWEBenchTask",
    ):
        assert isinstance(resolve_task(name), SWEBenchTask)
    runner = AgentRunner(
        load_agent_config("swe_bench")
    )  # the shipped config, as AutoAgentRunner.from_task finds it
    assert isinstance(runner.task, SWEBenchTask) and runner.agent_cls.__name__ == "CodeActAgent"
    skyagent = parse_agent_config(
        {
            "agent_cls": "skyrl_agent.agents.oh_codeact.OHCodeActAgent",
            "task": "skyrl_agent.tasks.swebench.utils.SWEBenchTask",
            "data": {"instance_key": "instance", "instance_id_key": "instance.instance_id"},
            "generator": {"backend_config": {"api_url": "http://127.0.0.1:1", "model_name": "m"}},
        }
    )
    assert isinstance(AgentRunner(skyagent).task, SWEBenchTask)


def test_bad_env_config_and_bad_rows_say_what_is_wrong():
    with pytest.raises(AgentConfigError, match=r"unknown env_config key\(s\) \['memory'\].*'memory_mb'"):
        SWESettings.from_env_config({"memory": 100})
    task = SWEBenchTask()
    with pytest.raises(Exception, match="missing the field"):
        asyncio.run(task.get_instruction({"instance_id": "x__y-1", "repo": "x/y"}))


SWE_BENCH_ROW = {
    "instance_id": "acme__widgets-7",
    "repo": "acme/widgets",
    "base_commit": "a" * 40,
    "problem_statement": "Widget.size() returns the size in bytes, the docs say kilobytes.",
    "patch": "diff --git a/widgets.py b/widgets.py\n",
    "test_patch": "",
    "FAIL_TO_PASS": ["tests/test_widget.py::test_size"],
    "image_name": "acme-widgets:1",
}


def test_the_instruction_is_the_tool_guide_and_the_problem_statement():
    from skyrl_gym.envs.swe.instances import normalize_row

    instance = normalize_row(SWE_BENCH_ROW)
    for row in (instance_row(instance), SWE_BENCH_ROW, instance):
        system, user = asyncio.run(SWEBenchTask().get_instruction(row))
        assert system == {"role": "system", "content": SWE_SYSTEM_PROMPT}
        assert instance.problem_statement.strip() in user["content"] and instance.repo in user["content"]


# ----- a real engine, real instances -------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
def test_an_agent_replaying_the_gold_patch_through_the_tools_resolves_and_earns_1(
    swe_instances, docker_client_for_tests
):
    instances = swe_instances[:2]
    rows = [instance_row(i) for i in instances]
    with chat_server(replaying_gold(instances)) as server:
        runner = AgentRunner(swe_config(server.url))
        out = asyncio.run(runner.run(rows, val_mode=True))
    assert out["rewards"] == [1.0, 1.0], [r.get("error") or r.get("eval_error") for r in out["results"]]
    for instance, result in zip(instances, out["results"]):
        assert result["instance_id"] == instance.instance_id
        assert (
            result["finish_reason"] == "FINISH_TOOL"
            and result["error"] is None
            and result["eval_error"] is None
        )
        evaluated = result["results"]
        assert evaluated["submitted"] and evaluated["resolved"]
        assert evaluated["git_patch"].count("@@") == instance.patch.count("@@")
        report = evaluated["report"]
        assert report["fail_to_pass"] == {"success": instance.FAIL_TO_PASS, "failure": []}
        assert report["pass_to_pass"]["failure"] == []
        assert result["num_turns"] == len(replay_actions(instance.patch))
        edits = [m["content"] for m in result["messages"] if m["role"] in ("user", "tool")][1:]
        assert edits and all(text.startswith("The file /testbed/") for text in edits)  # the editor's answers
    assert out["summary"]["pass@1"] == 1.0
    assert {t["function"]["name"] for t in server.requests[0]["tools"]} == {
        "bash",
        "str_replace_editor",
        "submit",
    }
    assert runner.task.live_runtimes == 0 and my_swe_containers(docker_client_for_tests) == []


@pytest.mark.docker
@pytest.mark.slow
def test_submitting_nothing_or_only_running_bash_earns_0_on_skyagent_shaped_rows(
    swe_instances, docker_client_for_tests
):
    quitter, explorer, vandal = swe_instances[2], swe_instances[3], swe_instances[4]

    def respond(body):
        instance = instance_of(body, [quitter, explorer, vandal])
        if instance is quitter:
            return "I give up. <finish></finish>"
        if instance is vandal:  # no repository left to diff: that raised out of complete_runtime
            return "```bash\nrm -rf .git && echo gone\n```"
        return "Let me look around.\n```bash\npwd && ls -a\n```"

    # SkyAgent's YAML names and row shape: the SWE-bench row under "instance"
    rows = [
        {"prompt": i.problem_statement, "data_source": "swe-bench", "instance": i.to_row()}
        for i in (quitter, explorer, vandal)
    ]
    config = {
        "agent_cls": "skyrl_agent.agents.oh_codeact.OHCodeActAgent",
        "task": "skyrl_agent.tasks.swebench.utils.SWEBenchTask",
        "data": {"instance_key": "instance", "instance_id_key": "instance.instance_id"},
        "env_config": {"bash_timeout_s": 30, "output_cap": 2000},
        "generator": {
            "backend_config": {"model": "scripted-model"},
            "max_iterations": 2,
        },
        "dispatcher": {"max_parallel_agents": 3},
    }
    with chat_server(respond) as server:
        config["generator"]["backend_config"]["api_url"] = server.url
        out = asyncio.run(AgentRunner(config).run(rows, val_mode=True))
    gave_up, explored, vandalized = out["results"]
    assert out["rewards"] == [0.0, 0.0, 0.0]
    assert vandalized["results"]["git_patch"] == "" and vandalized["eval_error"] is None
    assert gave_up["instance_id"] == quitter.instance_id and gave_up["finish_reason"] == "FINISH_TOOL"
    assert gave_up["results"]["git_patch"] == "" and gave_up["results"]["resolved"] is False
    assert gave_up["eval_error"] is None and gave_up["results"]["report"]["error"].startswith(
        "the patch is empty"
    )
    assert explored["finish_reason"] == "max_iterations_reached" and explored["num_turns"] == 2
    assert explored["results"]["git_patch"] == "" and explored["results"]["submitted"] is False
    observation = explored["messages"][3]  # the ```bash block ran in /testbed
    assert observation["role"] == "user" and observation["content"].startswith("/testbed\n")
    assert ".git" in observation["content"].split()
    assert my_swe_containers(docker_client_for_tests) == []


@pytest.mark.docker
@pytest.mark.slow
def test_a_broken_instance_fails_its_trajectory_only_and_leaves_no_container(
    swe_instances, docker_client_for_tests
):
    good, broken = swe_instances[4], dict(instance_row(swe_instances[0]))
    broken["base_commit"] = "0" * 40  # the image and setup_patch give another commit: setup refuses it
    with chat_server(lambda body: '<tool_call>{"name": "submit", "arguments": {}}</tool_call>') as server:
        out = asyncio.run(
            AgentRunner(swe_config(server.url)).run([instance_row(good), broken], val_mode=True)
        )
    ok, failed = out["results"]
    assert ok["finish_reason"] == "FINISH_TOOL" and ok["error"] is None and ok["reward"] == 0.0
    assert failed["finish_reason"] == "error_runtime" and "base_commit" in failed["error"]
    assert my_swe_containers(docker_client_for_tests) == []


@pytest.mark.docker
@pytest.mark.slow
def test_a_run_cut_short_removes_its_containers(swe_instances, docker_client_for_tests):
    asked = threading.Event()

    def respond(body):
        asked.set()
        return ("sleep", 2.0, "<bash>sleep 1</bash>")

    rows = [instance_row(i) for i in swe_instances[:2]]

    async def cut_short(runner):
        run = asyncio.ensure_future(runner.run(rows, val_mode=True))
        while not asked.is_set():  # both containers are up once the model is asked (init precedes generation)
            await asyncio.sleep(0.1)
        while runner.task.live_runtimes < 2 and not run.done():
            await asyncio.sleep(0.1)
        assert len(my_swe_containers(docker_client_for_tests)) == 2
        run.cancel()  # what Ctrl-C does to the run
        with pytest.raises(asyncio.CancelledError):
            await run

    with chat_server(respond) as server:
        runner = AgentRunner(swe_config(server.url))
        asyncio.run(cut_short(runner))
    assert runner.task.live_runtimes == 0 and my_swe_containers(docker_client_for_tests) == []


@pytest.mark.docker
@pytest.mark.slow
def test_agent_eval_command_scores_swe_rows_through_an_openai_compatible_server(
    swe_instances, docker_client_for_tests, tmp_path
):
    instance = swe_instances[1]
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(instance_row(instance)) + "\n")
    output = tmp_path / "out.jsonl"
    with chat_server(replaying_gold([instance])) as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "skyrl_gym.cli",
                "agent",
                "eval",
                "swe_bench",
                "--data",
                str(data),
                "--output",
                str(output),
                "--base-url",
                server.url,
                "--model",
                "scripted-model",
                "--no-progress",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        printed, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, printed
    (line,) = [json.loads(text) for text in output.read_text().splitlines()]
    assert line["instance_id"] == instance.instance_id and line["reward"] == 1.0
    assert line["finish_reason"] == "FINISH_TOOL" and "mean_reward" in printed
    child = owner_id().rpartition(":")[0] + f":{proc.pid}"
    assert [
        c for c in containers_of_kind(docker_client_for_tests, "swe") if c.labels.get(OWNER_LABEL) == child
    ] == []


@pytest.mark.docker
@pytest.mark.slow
def test_training_output_through_the_token_backend_carries_the_resolved_reward(
    swe_instances, docker_client_for_tests, tokenizer
):
    from skygym_adapters.scripted import ScriptedEngine

    solved, idle = swe_instances[0], swe_instances[2]
    engine = ScriptedEngine(
        tokenizer,
        {
            solved.problem_statement.strip(): replay_actions(solved.patch),
            idle.problem_statement.strip(): [
                "Nothing to do. <tool_call>" + '{"name": "submit", "arguments": {}}</tool_call>'
            ],
        },
    )
    config = {
        "agent_cls": "codeact",
        "task": "swe_bench",
        "data": {"instance_id_key": "instance_id"},
        "generator": {
            "infer_backend": "skyrl-train",
            "sampling_params": {"max_tokens": 1024},
            "max_iterations": 12,
        },
        "dispatcher": {"max_parallel_agents": 2},
    }
    runner = AgentRunner(config, infer_engine=engine, tokenizer=tokenizer)
    out = asyncio.run(runner.run([instance_row(solved), instance_row(idle)]))
    assert out["trajectory_rewards"] == [1.0, 0.0]
    assert [r[-1] for r in out["rewards"]] == [1.0, 0.0]  # the task's verdict sits on the last token
    assert all(len(ids) == len(mask) for ids, mask in zip(out["response_ids"], out["loss_masks"]))
    assert (
        0 in out["loss_masks"][0] and 1 in out["loss_masks"][0]
    )  # observations are masked, the model's tokens not
    assert out["rollout_metrics"]["agent/finish_reason/FINISH_TOOL"] == 1.0
    assert runner.task.live_runtimes == 0 and my_swe_containers(docker_client_for_tests) == []


def test_a_container_being_made_when_the_run_is_cut_short_is_removed_too(monkeypatch):
    """A unit-test double beside the real test above: close_all_runtimes found no live runtime while a cancelled
    trajectory's thread was still making its container, which then outlived the run."""
    import skygym_adapters.agents.swe as swe_module

    entered, finish, made = threading.Event(), threading.Event(), []

    class SlowToMake:
        def __init__(self, instance, limits, base_url):
            self.closed, self.set_up = 0, False
            made.append(self)
            entered.set()
            assert finish.wait(30)

        def setup(self):
            self.set_up = True

        def close(self):
            self.closed += 1

    monkeypatch.setattr(swe_module, "SWERuntime", SlowToMake)
    task, abandoned = swe_module.SWEBenchTask(), threading.Event()
    abandoned.set()  # the trajectory was cancelled: its thread goes on making the container
    starting = threading.Thread(target=task._start, args=(None, SWESettings(), abandoned))
    starting.start()
    assert entered.wait(30)
    closing = threading.Thread(target=task.close_all_runtimes)
    closing.start()
    closing.join(0.5)
    assert closing.is_alive()  # it waits for the container being made
    finish.set()
    closing.join(30)
    starting.join(30)
    [runtime] = made
    assert not closing.is_alive() and runtime.closed >= 1 and not runtime.set_up and task.live_runtimes == 0
