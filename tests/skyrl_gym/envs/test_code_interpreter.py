"""The ``code_interpreter`` env: tool calls run in a real sandbox; the final answer is graded like math."""

from __future__ import annotations

import json
import shutil

import pytest

import skyrl_gym
from skyrl_gym.tools.python import PythonCodeExecutorToolGroup

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")


def make(answer: str = "3628800", **config):
    return skyrl_gym.make(
        "code_interpreter",
        env_config=config,
        extras={"reward_spec": {"method": "rule", "ground_truth": answer}},
    )


def test_xml_tool_call_then_boxed_answer():
    env = make()
    env.init([{"role": "user", "content": "What is 10!?"}])
    first = env.step("Let me compute.\n<tool><python>import math\nprint(math.factorial(10))</python></tool>")
    assert first["done"] is False and first["reward"] == 0.0
    assert first["observations"] == [{"role": "user", "content": "<output>\n3628800\n</output>"}]
    final = env.step("So the answer is \\boxed{3628800}.")
    assert final["done"] is True and final["reward"] == 1.0
    assert env.get_metrics() == {"turns": 2, "tool_calls": 1, "tool_errors": 0}


def test_json_tool_call_and_state_carried_between_turns():
    env = make(observation_role="tool")
    call = {"name": "python", "arguments": {"code": "x = 6 * 7"}}
    env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    second = env.step('<tool_call>{"name": "python", "arguments": {"code": "print(x)"}}</tool_call>')
    assert second["observations"] == [{"role": "tool", "content": "<output>\n42\n</output>"}]


def test_errors_and_timeouts_become_observations():
    env = make(timeout=1)
    crashed = env.step("<tool><python>1 / 0</python></tool>")
    assert "ZeroDivisionError" in crashed["observations"][0]["content"] and not crashed["done"]
    hung = env.step("<tool><python>while True: pass</python></tool>")
    assert "timed out after 1" in hung["observations"][0]["content"]
    assert env.get_metrics()["tool_errors"] == 2


def test_the_calls_of_one_message_share_twice_one_calls_time():
    """Eight hanging calls in one message held the episode for eight time limits; they share two now. (A limit of 3 s:
    at 1 s the next message's quick call, its sandbox start included, timed out once on a loaded CI machine.)"""
    env = make(timeout=3)
    out = env.step("<tool><python>import time; time.sleep(100)</python></tool>" * 4)["observations"][0]["content"]
    outputs = out.split("</output>")[:-1]
    assert len(outputs) == 4 and "timed out after 3.0 seconds" in outputs[0], out
    assert "Not run: this message's calls used up their 6 s" in outputs[-1], out
    again = env.step("<tool><python>print('fresh')</python></tool>")  # the next message has its own time
    assert again["observations"][0]["content"] == "<output>\nfresh\n</output>"


def test_wrong_answer_and_max_turns():
    env = make(max_turns=2)
    assert env.step("<tool><python>print(1)</python></tool>")["done"] is False
    last = env.step("<tool><python>print(2)</python></tool>")  # the last turn is graded, not run
    assert (
        last["done"] is True
        and last["reward"] == 0.0
        and last["metadata"]["reason_done"] == "max_turns reached"
    )
    assert make().step("\\boxed{12}")["reward"] == 0.0


def test_the_tool_group_matches_skyrl_gym_conventions():
    group = PythonCodeExecutorToolGroup(timeout=2)
    assert group.name == "PythonCodeExecutorToolGroup" and group.get_tool_names() == ["python"]
    assert group.execute_tool("python", "print('hi')") == "hi"
    assert group.execute_tool("python", "import sys; sys.exit('bad')").startswith(
        "Error executing Python code: bad"
    )
    assert group.get_tool_schemas()[0]["function"]["parameters"]["required"] == ["code"]


def test_every_reward_below_one_says_why_and_tool_output_cannot_answer():
    # The reward is computed on the host from the model's own final text: a program that prints a
    # boxed answer does not answer for the model.
    env = make(answer="42")
    tool = env.step("<tool><python>print('\\\\boxed{42}')</python></tool>")
    assert tool["reward"] == 0.0 and tool["metadata"]["reason"]
    final = env.step("I am done.")
    assert final["done"] is True and final["reward"] == 0.0 and final["metadata"]["reason"]


def test_env_config_sets_what_one_messages_calls_may_take_together():
    env = make(timeout=1, message_timeout_s=1.5)
    out = env.step("<tool><python>import time; time.sleep(100)</python></tool>" * 3)["observations"][0]["content"]
    outputs = out.split("</output>")[:-1]
    assert "timed out after 1.0 seconds" in outputs[0], out
    assert "Not run: this message's calls used up their 1.5 s" in outputs[-1], out
    with pytest.raises(ValueError, match="env_config.message_timeout_s must be a number, got 'soon'"):
        make(message_timeout_s="soon")
