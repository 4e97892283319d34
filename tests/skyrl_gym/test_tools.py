"""Tool groups, their OpenAI schemas, and the tool-call parsers."""

from __future__ import annotations

from typing import List, Optional

import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv
from skyrl_gym.errors import ToolError
from skyrl_gym.tools import ToolGroup, parse_json_tool_calls, parse_tool_calls, parse_xml_tool_calls, tool
from skyrl_gym.tools.parsers import extract_tag


class CalculatorTools(ToolGroup):
    def __init__(self):
        super().__init__(name="calculator")

    @tool
    def add(self, a: int, b: int = 0) -> int:
        """Add two integers.

        Args:
            a: The first number.
            b: The second number,
                zero by default.
        """
        return a + b

    @tool(name="mean")
    def average(self, values: List[float], label: Optional[str] = None) -> float:
        """Arithmetic mean of a list of numbers."""
        return sum(values) / len(values)


class OtherTools(ToolGroup):
    def __init__(self):
        super().__init__(name="other")

    @tool
    def add(self, text: str) -> str:
        """Concatenate."""
        return text + text


def test_tools_execute_and_map_to_their_group():
    tools = CalculatorTools()
    assert sorted(tools.get_tool_names()) == ["add", "mean"]
    assert tools.execute_tool("add", 2, b=3) == 5
    assert tools.execute_tool("mean", [1.0, 2.0, 6.0]) == 3.0
    assert tools.get_tool_to_group_mapping() == {"add": "calculator", "mean": "calculator"}
    with pytest.raises(ToolError, match="tool 'nope' not found in group 'calculator'"):
        tools.execute_tool("nope")


def test_openai_schema_from_signature_and_docstring():
    schemas = {s["function"]["name"]: s for s in CalculatorTools().get_tool_schemas()}
    add = schemas["add"]
    assert add["type"] == "function"
    assert add["function"]["description"] == "Add two integers."
    assert add["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first number."},
            "b": {"type": "integer", "description": "The second number, zero by default.", "default": 0},
        },
        "required": ["a"],
    }
    mean = schemas["mean"]["function"]["parameters"]
    assert mean["properties"]["values"] == {"type": "array", "items": {"type": "number"}}
    assert mean["properties"]["label"] == {"type": "string"}
    assert mean["required"] == ["values"]


def test_env_executes_tools_and_refuses_duplicate_names():
    env = BaseTextEnv()
    env.init_tool_groups([CalculatorTools()])
    assert env._execute_tool("calculator", "add", [1, 2]) == 3
    assert env._execute_tool("calculator", "add", {"a": 1, "b": 5}) == 6
    assert [s["function"]["name"] for s in env.tool_schemas()] == ["add", "mean"]
    with pytest.raises(ToolError, match="tool 'add' is defined by both group 'calculator' and group 'other'"):
        env.init_tool_groups([CalculatorTools(), OtherTools()])


def test_xml_calls_in_order_with_wrapper():
    text = "think <tool><search>capital of France</search></tool> then <tool><python>print(1)</python></tool>"
    parsed = parse_xml_tool_calls(text, ["python", "search"], wrapper="tool")
    assert [(c.name, c.content) for c in parsed.calls] == [("search", "capital of France"), ("python", "print(1)")]
    assert parsed.errors == []


def test_unclosed_and_malformed_calls_are_reported_not_raised():
    parsed = parse_xml_tool_calls("<sql>SELECT 1", ["sql"])
    assert parsed.calls == [] and parsed.errors == ["unclosed <sql> tag: add </sql> after the sql content"]
    parsed = parse_json_tool_calls('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call><tool_call>{oops}</tool_call>')
    assert [(c.name, c.arguments) for c in parsed.calls] == [("add", {"a": 1})]
    assert "tool call 2 is not valid JSON" in parsed.errors[0]
    parsed = parse_json_tool_calls('<tool_call>["add"]</tool_call><tool_call>{"name": "f", "arguments": 3}</tool_call>')
    assert parsed.calls == [] and len(parsed.errors) == 2


@pytest.mark.parametrize(
    "body, why",
    [
        ("[" * 3000, "nested too deeply"),  # the decoder's RecursionError
        ('{"name": "python", "arguments": {"n": ' + "1" * 5000 + "}}", "for integer string conversion"),  # int()
        ('{"name": "f", "arguments": "' + "[" * 3000 + '"}', 'is a string that is not valid JSON'),
    ],
)
def test_json_calls_the_decoder_cannot_read_are_reported_not_raised(body, why):
    """A model reply escaped the parser with RecursionError or ValueError and failed the env's step."""
    parsed = parse_tool_calls(f"<tool_call>{body}</tool_call>", ["python"])
    assert parsed.calls == [] and len(parsed.errors) == 1 and why in parsed.errors[0], parsed.errors


def test_a_tool_call_nested_past_the_decoder_ends_no_code_interpreter_step():
    env = skyrl_gym.make("code_interpreter", extras={"reward_spec": {"ground_truth": "42"}})
    env.init([{"role": "user", "content": "q"}])
    out = env.step("<tool_call>" + "[" * 3000 + "</tool_call> so \\boxed{42}")
    assert out["done"] and out["reward"] == 1.0
    assert "nested too deeply" in out["metadata"]["tool_parse_errors"][0]


def test_json_arguments_given_as_a_string_are_decoded():
    parsed = parse_json_tool_calls('<tool_call>{"name": "add", "arguments": "{\\"a\\": 2}"}</tool_call>')
    assert parsed.calls[0].arguments == {"a": 2}


def test_parse_tool_calls_prefers_json_blocks():
    assert parse_tool_calls('<tool_call>{"name": "sql", "arguments": {}}</tool_call>', ["sql"]).calls[0].syntax == "json"
    assert parse_tool_calls("<sql>SELECT 1</sql>", ["sql"]).calls[0].syntax == "xml"


def test_a_message_runs_at_most_eight_calls_and_hears_of_the_rest():
    """Ten ``sleep 100`` calls in one 740-character message held an episode for ten tool time limits."""
    from skyrl_gym.tools.parsers import MAX_CALLS_PER_MESSAGE

    for text in ("".join(f"<bash>sleep {i}</bash>" for i in range(11)),
                 "".join(f'<tool_call>{{"name": "bash", "arguments": {{"command": "sleep {i}"}}}}</tool_call>'
                         for i in range(11))):
        parsed = parse_tool_calls(text, ["bash"])
        assert MAX_CALLS_PER_MESSAGE == 8 and len(parsed.calls) == 8
        assert parsed.calls[-1].content.endswith("sleep 7") or parsed.calls[-1].arguments == {"command": "sleep 7"}
        assert parsed.errors == ["only the first 8 tool calls of a message run; the other 3 did not (call a tool, "
                                 "read its answer, then the next)"]
    assert parse_tool_calls("<bash>a</bash><bash>b</bash>", ["bash"], max_calls=1).calls[0].content == "a"
    flood = parse_tool_calls("<tool_call></tool_call>" * 700, ["bash"])  # each error is an observation
    assert len(flood.errors) == 9 and flood.errors[-1] == "and 692 more calls that could not be parsed"


def test_extract_tag_and_huge_input_is_linear():
    assert extract_tag("<answer>a</answer> <answer> b </answer>", "answer") == "b"
    assert extract_tag("<answer>a</answer>", "answer", which="first") == "a"
    assert extract_tag("none", "answer") is None
    huge = "<sql>" * 200_000 + "x" * 5_000_000
    parsed = parse_xml_tool_calls(huge, ["sql"])
    assert parsed.calls == [] and parsed.errors


def test_a_tag_tool_reads_its_tag_else_a_json_call_of_its_name():
    from skyrl_gym.tools.parsers import MAX_CALLS_PER_MESSAGE, tag_or_json_call

    assert tag_or_json_call("<search>a</search><search>b</search>", "search", "query") == "a"  # the first block
    call = '<tool_call>{"name": "search", "arguments": {"query": "capital of France"}}</tool_call>'
    assert tag_or_json_call("thinking... " + call, "search", "query") == "capital of France"
    assert tag_or_json_call("<search>tag wins</search>" + call, "search", "query") == "tag wins"
    other = '<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>'
    assert tag_or_json_call(other + call, "search", "query") == "capital of France"
    for wrong in ('<tool_call>{"name": "search", "arguments": {"query": 3}}</tool_call>',  # not text
                  '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>',  # not its argument
                  "<tool_call>not json</tool_call>", "no call at all"):
        assert tag_or_json_call(wrong, "search", "query") is None, wrong
    # the first MAX_CALLS_PER_MESSAGE calls are read, as many as a tool env runs: a 10 MB action of calls costs
    # no JSON parse per block
    assert tag_or_json_call(other * (MAX_CALLS_PER_MESSAGE - 1) + call, "search", "query") == "capital of France"
    assert tag_or_json_call(other * MAX_CALLS_PER_MESSAGE + call, "search", "query") is None
