"""OpenAI-chat agents against skyrl_gym envs: tool schemas out, tool calls in, rewards back."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import skyrl_gym
from skygym_adapters.openai_agents import (
    EnvChatSession,
    assistant_message_to_action,
    chat_completions_agent,
    normalize_assistant_message,
    run_episode,
)
from skyrl_gym.tools.core import ToolGroup, tool
from skyrl_gym.tools.parsers import parse_tool_calls


class Calculator(ToolGroup):
    def __init__(self):
        super().__init__("calculator")

    @tool
    def multiply(self, a: int, b: int) -> str:
        """Multiply two integers.

        Args:
            a: the first factor
            b: the second factor
        """
        return str(int(a) * int(b))


class CalculatorEnv(skyrl_gym.BaseTextEnv):
    """Answer with <answer>N</answer>; a `multiply` tool call gets its result back; 3 turns."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.ground_truth = str(self.extras["reward_spec"]["ground_truth"])
        self.max_turns = 3
        self.init_tool_groups([Calculator()])

    def step(self, action):
        self.turns += 1
        calls = parse_tool_calls(action, xml_tags=["answer"])
        answers = [c.content for c in calls.calls if c.name == "answer"]
        if answers:
            return {"observations": [], "reward": float(answers[-1] == self.ground_truth), "done": True, "metadata": {}}
        results = []
        for call in calls.calls:
            results.append({"role": "user", "content": self._execute_tool("calculator", call.name, call.arguments)})
        if calls.errors:
            results.append({"role": "user", "content": "; ".join(calls.errors)})
        done = self.turns >= self.max_turns
        return {"observations": [] if done else results, "reward": 0.0, "done": done, "metadata": {}}


@pytest.fixture
def calculator_row():
    skyrl_gym.register(id="test_openai_calculator", entry_point=CalculatorEnv)
    yield {
        "data_source": "test",
        "prompt": [{"role": "user", "content": "What is 6 times 7?"}],
        "env_class": "test_openai_calculator",
        "reward_spec": {"method": "rule", "ground_truth": "42"},
    }
    skyrl_gym.deregister("test_openai_calculator")


def test_tools_are_offered_as_openai_schemas_and_calls_become_action_text(calculator_row):
    session = EnvChatSession.from_row(calculator_row)
    assert session.tools[0]["function"]["name"] == "multiply"
    assert session.tools[0]["function"]["parameters"]["required"] == ["a", "b"]

    call = {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": '{"a": 6, "b": 7}'}}
    result = session.step({"role": "assistant", "content": "Let me compute.", "tool_calls": [call]})
    assert result.action == 'Let me compute.\n<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>'
    assert result.new_messages == [{"role": "tool", "tool_call_id": "call_1", "content": "42"}]
    assert not result.done and result.reward == 0.0

    result = session.step({"role": "assistant", "content": "<answer>42</answer>"})
    assert result.done and result.reward == 1.0 and session.turns == 2
    assert [m["role"] for m in session.messages] == ["user", "assistant", "tool", "assistant"]


def test_tool_call_arguments_the_decoder_cannot_read_reach_the_env_as_an_error(calculator_row):
    """Arguments nested past the JSON decoder's depth raised RecursionError out of ``session.step``."""
    session = EnvChatSession.from_row(calculator_row)
    call = {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": "[" * 3000}}
    result = session.step({"role": "assistant", "content": "", "tool_calls": [call]})
    assert not result.done and result.reward == 0.0
    assert "not valid JSON" in json.dumps(result.new_messages)


def test_run_episode_with_an_agent_function(calculator_row):
    def agent(messages, tools):
        if messages[-1]["role"] == "tool":
            return {"role": "assistant", "content": f"<answer>{messages[-1]['content']}</answer>"}
        name = tools[0]["function"]["name"]
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": '{"a": 6, "b": 7}'}}]}

    episode = run_episode(agent, calculator_row)
    assert episode.rewards == [0.0, 1.0] and episode.stop == "env_done" and episode.error is None


def test_an_agent_that_never_answers_stops_at_max_turns_and_a_crash_is_reported(calculator_row):
    episode = run_episode(lambda m, t: {"role": "assistant", "content": "hmm"}, calculator_row)
    assert episode.turns == 3 and episode.total_reward == 0.0 and episode.done
    # The cap becomes the env's own max_turns (the driver tells the env), so the env itself ends turn 2.
    capped = run_episode(lambda m, t: {"role": "assistant", "content": "hmm"}, calculator_row, max_turns=2)
    assert capped.turns == 2 and capped.stop == "env_done"

    def broken(messages, tools):
        raise ConnectionError("endpoint down")

    failed = run_episode(broken, calculator_row)
    assert failed.stop == "error" and "ConnectionError: endpoint down" in failed.error


def test_env_defined_tool_call_syntax_wins(calculator_row):
    session = EnvChatSession.from_row(calculator_row)
    session.tool_call_to_action = lambda name, args: f"<{name}>{args['a']},{args['b']}</{name}>"
    message = normalize_assistant_message(
        {"content": "", "tool_calls": [{"function": {"name": "multiply", "arguments": {"a": 2, "b": 3}}}]}
    )
    assert message["tool_calls"][0]["id"].startswith("call_")
    assert assistant_message_to_action(message, session.tool_call_to_action) == "<multiply>2,3</multiply>"


def test_math_env_without_tools_through_the_openai_shape(gsm8k_test_file):
    from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows

    row = next(gsm8k_rows(gsm8k_test_file, limit=1, env_class="gsm8k_multi_turn"))
    answers = iter(["#### 1", "#### " + row["reward_spec"]["ground_truth"]])
    episode = run_episode(lambda m, t: {"role": "assistant", "content": next(answers)}, row)
    assert episode.rewards == [pytest.approx(0.2 / 5), 1.0]
    assert episode.messages[2]["role"] == "user"  # the env's retry request comes back as its own message


class _ScriptedChatServer(BaseHTTPRequestHandler):
    """A scripted OpenAI-compatible endpoint (a test double for a model server) for the real ``openai`` client."""

    requests = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if body["messages"][-1]["role"] == "tool":
            message = {"role": "assistant", "content": f"<answer>{body['messages'][-1]['content']}</answer>"}
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "multiply", "arguments": '{"a": 6, "b": 7}'}}]}
        payload = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_the_openai_client_against_an_http_endpoint(calculator_row):
    openai = pytest.importorskip("openai", reason="needs the openai client ([dev]): pip install openai")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="none")
        episode = run_episode(chat_completions_agent(client, "tiny", temperature=0.0), calculator_row)
    finally:
        server.shutdown()
        server.server_close()
    assert episode.rewards == [0.0, 1.0]
    first, second = _ScriptedChatServer.requests[-2:]
    assert first["tools"][0]["function"]["name"] == "multiply" and first["temperature"] == 0.0
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_x", "content": "42"}


def test_an_env_without_a_turn_limit_of_its_own_is_truncated_at_the_cap():
    import skyrl_gym
    from skyrl_gym import BaseTextEnv, StepOutput

    class Chatty(BaseTextEnv):  # never done, never sets max_turns
        def step(self, action):
            return StepOutput(observations=[{"role": "user", "content": "more"}], reward=0.5, done=False, metadata={})

    skyrl_gym.register("test_openai_chatty", entry_point=Chatty)
    try:
        row = {"prompt": [{"role": "user", "content": "talk"}], "env_class": "test_openai_chatty"}
        episode = run_episode(lambda m, t: {"role": "assistant", "content": "hi"}, row, max_turns=3)
        assert episode.turns == 3 and episode.stop == "max_turns" and episode.total_reward == 1.5
    finally:
        skyrl_gym.deregister("test_openai_chatty")


def _golden(module) -> dict:
    from pathlib import Path

    from skyrl_gym.data import load_rows

    return load_rows(Path(module.__file__).parent / "golden.json")[0]


def _calls_then_answers(tool: str, arguments: dict, answer: str):
    """A function-calling agent: one call of ``tool``, then ``answer`` once the tool's reply is in."""
    seen = {}

    def agent(messages, tools):
        if messages[-1]["role"] == "tool":
            seen["reply"] = messages[-1]["content"]
            return {"role": "assistant", "content": answer}
        seen["tools"] = tools
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}]}

    return agent, seen


def test_a_function_calling_agent_queries_text2sql_with_the_query_alone():
    """text2sql reads <sql> blocks: a function-calling agent's call became a <tool_call> it refused as an invalid
    action, and its schema asked the model for db_id and turns_left, which the env fills in itself."""
    import skyrl_gym.envs.sql as sql_env

    row = _golden(sql_env)
    agent, seen = _calls_then_answers("sql", {"sql": "SELECT count(*) FROM singer"},
                                      row["extra_info"]["reference_action"])  # <think>, then the <solution>
    episode = run_episode(agent, row)
    assert [tool["function"]["name"] for tool in seen["tools"]] == ["sql"]
    assert seen["tools"][0]["function"]["parameters"]["required"] == ["sql"]
    assert "count(*)" in seen["reply"] and "invalid" not in seen["reply"], seen["reply"]
    assert episode.rewards == [0.0, 1.0] and episode.error is None


def test_a_function_calling_agent_searches():
    import skyrl_gym.envs.search as search_env
    from skygym_adapters.conformance.cases import retrieval_server

    row = _golden(search_env)
    agent, seen = _calls_then_answers("search", {"query": "capital of France"}, "<answer>Paris</answer>")
    with retrieval_server() as url:
        episode = run_episode(agent, row, env_config={"search_url": url, "retry_attempts": 1})
    assert "Paris is the capital" in seen["reply"], seen["reply"]
    assert episode.rewards == [0.0, 1.0] and episode.error is None
