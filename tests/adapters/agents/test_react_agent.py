"""The ReAct agent: tools parsed in JSON and XML forms, tool errors as observations, the finish tool, the iteration
and context limits; GeneralReactTask grading; and the YAML's errors, which list the valid choices."""

from __future__ import annotations

import asyncio
import json

import pytest

from skygym_adapters.agents import (
    AgentConfigError,
    AgentRunner,
    AgentToolEnv,
    FinishTool,
    TOOL_REGISTRY,
    parse_agent_config,
    register_tool,
)
from skygym_adapters.agents.tools import CodeInterpreterTool
from skyrl_gym.tools.core import ToolGroup, tool
from tests.adapters.agents.chat_server import chat_server


class Divide(ToolGroup):
    def __init__(self):
        super().__init__("divide")

    @tool
    def divide(self, a: int, b: int) -> str:
        """Divide a by b.

        Args:
            a: the dividend
            b: the divisor
        """
        return str(a / b)


@pytest.fixture
def divide_tool():
    register_tool("divide")(Divide)
    yield
    TOOL_REGISTRY.pop("divide")


def test_tool_env_runs_json_and_xml_calls_and_reports_problems_as_observations():
    env = AgentToolEnv([FinishTool(), Divide()])
    out = env.step('<tool_call>{"name": "divide", "arguments": {"a": 6, "b": 3}}</tool_call>')
    assert out["observations"] == [{"role": "user", "content": "2.0"}] and not out["done"]
    out = env.step('<tool_call>{"name": "divide", "arguments": {"a": 1, "b": 0}}</tool_call>')
    assert out["observations"][0]["content"] == "Tool 'divide' failed: ZeroDivisionError: division by zero"
    out = env.step('<tool_call>{"name": "search", "arguments": {}}</tool_call>')
    assert "does not exist; the tools are ['finish', 'divide']" in out["observations"][0]["content"]
    out = env.step('<tool_call>{"name": "divide", "arguments": {"a": 1,</tool_call>')
    assert out["observations"][0]["content"].startswith(
        "Your tool call could not be parsed: tool call 1 is not valid JSON"
    )
    out = env.step("I think the answer is 2.")
    assert "No tool call was found" in out["observations"][0]["content"]
    out = env.step(r"Done. <finish>\boxed{2}</finish>")  # XML form: the body fills the tool's first parameter
    assert out["done"] and env.finished and env.answer == r"\boxed{2}"
    assert env.get_metrics() == {"tool_calls": 3, "finished": True}


def react_config(url, **over):
    config = {
        "agent_cls": "react",
        "task": "general_react",
        "tools": ["finish", "code_interpreter"],
        "generator": {
            "infer_backend": "openai_server",
            "backend_config": {"base_url": url, "model": "m"},
            "sampling_params": {"temperature": 0.0, "max_tokens": 128},
            "max_iterations": 3,
        },
        "dispatcher": {"max_parallel_agents": 2},
    }
    for key, value in over.items():
        section, _, name = key.partition("__")
        if name:
            config[section][name] = value
        else:
            config[key] = value
    return config


MATH_ROW = {
    "data_source": "math",
    "prompt": [{"role": "user", "content": "What is 6 times 7?"}],
    "reward_spec": {"method": "rule", "ground_truth": "42"},
}


def test_react_agent_uses_a_native_tool_call_then_finishes_with_the_right_answer():
    def respond(body):
        if body["messages"][-1]["role"] != "tool":
            return {
                "role": "assistant",
                "content": "Let me compute.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "code_interpreter",
                            "arguments": json.dumps({"code": "print(6*7)"}),
                        },
                    }
                ],
            }
        return r"The tool printed it. <finish>\boxed{" + body["messages"][-1]["content"] + "}</finish>"

    with chat_server(respond) as server:
        out = asyncio.run(AgentRunner(react_config(server.url)).run([MATH_ROW], val_mode=True))
    result = out["results"][0]
    assert (
        result["finish_reason"] == "FINISH_TOOL"
        and result["reward"] == 1.0
        and result["results"] == r"\boxed{42}"
    )
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert result["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "42",
    }  # from the sandbox
    first = server.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["finish", "code_interpreter"]
    assert "call finish with it" in first["messages"][0]["content"]


def test_backend_settings_edited_after_the_runner_was_made_take_effect_at_the_next_run():
    """A cold run: `runner.cfg.generator.backend_config.update(base_url=...)` after `from_task` (as docs/agents.md
    shows) was silently ignored, and every request went to the URL the runner was made with."""
    runner = AgentRunner(react_config("http://127.0.0.1:9"))  # nothing listens there
    with chat_server(lambda body: r"<finish>\boxed{42}</finish>") as server:
        runner.cfg.generator.backend_config.update(base_url=server.url)
        out = asyncio.run(runner.run([MATH_ROW], val_mode=True))
        assert out["results"][0]["reward"] == 1.0 and len(server.requests) == 1
        runner.cfg.generator.backend_config.update(base_url="http://127.0.0.1:9")
        out = asyncio.run(runner.run([MATH_ROW], val_mode=True))
    assert out["results"][0]["reward"] == 0.0 and "127.0.0.1:9" in str(out["results"][0])


def test_a_wrong_answer_scores_zero_and_an_agent_that_never_finishes_stops_at_max_iterations():
    with chat_server(lambda body: r"<finish>\boxed{41}</finish>") as server:
        wrong = asyncio.run(AgentRunner(react_config(server.url)).run([MATH_ROW], val_mode=True))["results"][
            0
        ]
    assert wrong["reward"] == 0.0 and wrong["finish_reason"] == "FINISH_TOOL"
    with chat_server(lambda body: "Still thinking about it.") as server:
        stuck = asyncio.run(AgentRunner(react_config(server.url)).run([MATH_ROW], val_mode=True))["results"][
            0
        ]
    assert (
        stuck["finish_reason"] == "max_iterations_reached"
        and stuck["num_turns"] == 3
        and stuck["reward"] == 0.0
    )
    assert len(server.requests) == 3
    assert "No tool call was found" in server.requests[-1]["messages"][-1]["content"]


def test_a_reply_cut_for_length_ends_with_context_window_exceeded():
    with chat_server(lambda body: ("<finish>\\boxed{4", "length")) as server:
        out = asyncio.run(AgentRunner(react_config(server.url)).run([MATH_ROW], val_mode=True))
    result = out["results"][0]
    assert result["finish_reason"] == "CONTEXT_WINDOW_EXCEEDED" and result["reward"] == 0.0
    assert result["messages"][-1]["content"] == "<finish>\\boxed{4"  # kept in the history, not run


def test_max_prompt_length_is_counted_with_a_tokenizer_when_one_is_given(tokenizer):
    with chat_server(lambda body: r"<finish>\boxed{42}</finish>") as server:
        config = react_config(server.url, generator__max_prompt_length=20)
        out = asyncio.run(AgentRunner(config, tokenizer=tokenizer).run([MATH_ROW], val_mode=True))
        assert server.requests == []  # the system prompt alone is longer than 20 tokens: no request was sent
    assert out["results"][0]["finish_reason"] == "CONTEXT_WINDOW_EXCEEDED"


def test_qa_rows_are_graded_by_exact_match(divide_tool):
    row = {
        "data_source": "nq",
        "prompt": [{"role": "user", "content": "Capital of France?"}],
        "reward_spec": {"ground_truth": ["Paris", "paris, france"]},
    }
    with chat_server(
        lambda body: '<tool_call>{"name": "finish", "arguments": {"answer": "The Paris"}}</tool_call>'
    ) as s:
        out = asyncio.run(
            AgentRunner(react_config(s.url, tools=["finish", "divide"])).run([row], val_mode=True)
        )
    assert out["rewards"] == [1.0]


def test_qa_rows_of_the_hub_are_graded_against_their_targets():
    """The hub's search rows hold ``{"target": [...]}``: the answer is matched with the targets, not with the
    dict's text (before, "target: Paris" was paid and "Paris" was not)."""
    from skygym_adapters.agents.tasks import GeneralReactTask

    row = {"prompt": [{"role": "user", "content": "Capital of France?"}],
           "reward_spec": {"ground_truth": {"target": ["Paris", "Paris, France"]}}}
    task = GeneralReactTask()
    scores = {answer: asyncio.run(task.evaluate_result(answer, row, "nq", 0, 0))
              for answer in ("Paris", "paris, france", "target: Paris", "{'target': ['Paris', 'Paris, France']}")}
    assert scores == {"Paris": 1.0, "paris, france": 1.0, "target: Paris": 0.0,
                      "{'target': ['Paris', 'Paris, France']}": 0.0}


def test_code_interpreter_runs_in_the_sandbox():
    assert CodeInterpreterTool().code_interpreter("print(sum(range(10)))") == "45"


def test_the_code_interpreters_calls_of_one_message_share_twice_one_calls_time():
    env = AgentToolEnv([FinishTool(), CodeInterpreterTool(timeout=1.0)])
    hang = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "import time; time.sleep(100)"}}</tool_call>'
    out = env.step(hang * 4)["observations"]
    assert len(out) == 4 and "timed out after 1.0 seconds" in out[0]["content"], out
    assert "Not run: this message's calls used up their 2 s" in out[-1]["content"], out


def test_codeact_agent_acts_with_code_blocks_whose_state_persists():
    replies = iter(
        [
            "```python\nx = 6 * 7\nprint(x)\n```",
            "```python\nprint(x + 0)\n```",
            "No code here.",
            r"<finish>\boxed{42}</finish>",
        ]
    )
    with chat_server(lambda body: next(replies)) as server:
        config = react_config(server.url, agent_cls="codeact", tools=[], generator__max_iterations=5)
        result = asyncio.run(AgentRunner(config).run([MATH_ROW], val_mode=True))["results"][0]
    observations = [m["content"] for m in result["messages"] if m["role"] == "user"][1:]
    assert observations[:2] == ["Execution output:\n42", "Execution output:\n42"]  # x survived between turns
    assert observations[2].startswith("No code was found in your message")
    assert result["finish_reason"] == "FINISH_TOOL" and result["reward"] == 1.0
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == [
        "finish"
    ]  # codeact's default tools
    assert "```python block" in server.requests[0]["messages"][0]["content"]


# ---------------------------------------------------------------- the YAML's errors
def test_unknown_keys_list_the_valid_ones():
    with pytest.raises(
        AgentConfigError, match=r"unknown key\(s\) \['generator.max_turns'\].*'max_iterations'"
    ):
        parse_agent_config({"generator": {"max_turns": 3}})
    with pytest.raises(
        AgentConfigError, match=r"unknown key\(s\) \['agent'\].*valid keys at the top level.*'agent_cls'"
    ):
        parse_agent_config({"agent": "react"})
    with pytest.raises(AgentConfigError, match="generator.num_trajectories must be an integer"):
        parse_agent_config({"generator": {"num_trajectories": "four"}})


@pytest.mark.parametrize(
    "config, message",
    [
        ({"agent_cls": "planner"}, r"unknown agent_cls 'planner'; choose one of \['codeact', 'react'\]"),
        (
            {"task": "web_research"},
            r"unknown task 'web_research'; choose one of \['env', 'general_react', 'swe_bench'\]",
        ),
        (
            {"generator": {"infer_backend": "tinker"}},
            r"unknown generator.infer_backend 'tinker'; choose one of \['openai', 'openai_server', 'skyrl-train', 'skyrl_train', 'verl'\]",
        ),
        (
            {"tools": ["web_browser"]},
            r"unknown tool\(s\) \['web_browser'\].*registered tools: \['code_interpreter', 'finish'\]",
        ),
        (
            {"generator": {"backend_config": {"url": "x"}}},
            r"unknown key\(s\) \['url'\].*valid keys: \['base_url'",
        ),
        (
            {"generator": {"infer_backend": "skyrl-train"}},
            r"the skyrl-train backend needs an inference engine",
        ),
    ],
)
def test_unknown_agent_task_backend_or_tool_lists_the_choices(config, message):
    config.setdefault("generator", {}).setdefault("backend_config", {"base_url": "http://127.0.0.1:9"})
    if config["generator"].get("infer_backend") == "skyrl-train":
        config["generator"]["backend_config"] = {}
    with pytest.raises(AgentConfigError, match=message):
        AgentRunner(config)


def test_skyagent_names_and_keys_are_understood():
    runner = AgentRunner(
        {
            "agent_cls": "skyrl_agent.agents.react.ReActAgent",
            "task": "skyrl_agent.tasks.general_react.utils.GeneralReactTask",
            "tools": ["finish"],
            "generator": {
                "infer_backend": "openai_server",
                "backend_config": {"api_url": "http://127.0.0.1:9", "model_name": "m"},
                "vision_is_active": False,
                "qwen3_acc_thinking": True,
                "remove_think_tokens": False,
            },
            "dispatcher": {"type": "async_pipeline", "scheduler": "naive"},
            "data": {"instance_key": "instance", "data_source_key": "data_source"},
        }
    )
    assert type(runner.task).__name__ == "GeneralReactTask" and runner.backend.model == "m"
    assert runner.backend.root_url == "http://127.0.0.1:9"


def test_training_output_needs_a_token_backend():
    runner = AgentRunner({"generator": {"backend_config": {"base_url": "http://127.0.0.1:9"}}})
    with pytest.raises(AgentConfigError, match="training output needs token ids.*val_mode=True"):
        asyncio.run(runner.run([MATH_ROW]))
