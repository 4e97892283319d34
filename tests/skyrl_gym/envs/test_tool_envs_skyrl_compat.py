"""Code written against SkyRL-gym's tool envs runs unchanged: imports, config objects, attributes, texts."""

from __future__ import annotations

import pytest
from omegaconf import DictConfig

import skyrl_gym
from tests.tool_env_support import MisbehavingServer, build_sample_databases, first_observation


def test_skyrl_gym_import_paths():
    from skyrl_gym.envs.search.utils import compute_score, em_check, extract_solution  # noqa: F401
    from skyrl_gym.envs.sql.utils import compute_score_single, verify_format_and_extract  # noqa: F401
    from skyrl_gym.tools import PythonCodeExecutorToolGroup, SearchToolGroup, SQLCodeExecutorToolGroup
    from skyrl_gym.tools.sql import SQLToolGroup

    assert issubclass(SQLCodeExecutorToolGroup, SQLToolGroup)  # SkyRL-gym's constructor and tool arguments
    assert SearchToolGroup(search_url="http://127.0.0.1:1/retrieve").get_tool_names() == ["search"]
    assert PythonCodeExecutorToolGroup().get_tool_names() == ["python"]
    assert em_check("The Paris!", ["paris"]) == 1


def test_text2sql_with_dictconfig_and_spider_row(tmp_path):
    rows = build_sample_databases(tmp_path, layout="spider")
    extras = {"reward_spec": rows[0]["reward_spec"], "max_turns": 3, "db_id": rows[0]["db_id"], "data": "spider"}
    env = skyrl_gym.make("text2sql", env_config=DictConfig({"db_path": str(tmp_path)}), extras=extras)
    out = env.step("<think>a</think>")  # no sql tag: SkyRL-gym's invalid-action text and reminder
    content = first_observation(out)
    assert "Your previous action is invalid. Follow the format of outputting thinking process and sql tool, and try again." in content
    assert "<reminder>You have 2 turns left to complete the task.</reminder>" in content
    final = env.step(f"<think>b</think>\n\n<solution>{rows[0]['reward_spec']['ground_truth']}</solution>")
    assert final["done"] and final["reward"] == 1.0
    assert [m["role"] for m in env.chat_history] == ["assistant", "user", "assistant"]


def test_search_env_attributes_and_done_rules():
    server = MisbehavingServer()
    try:
        env = skyrl_gym.make(
            "search",
            env_config=DictConfig({"log_requests": False, "search_url": server.url, "topk": 5, "timeout": 60}),
            extras={"reward_spec": {"method": "rule", "ground_truth": {"target": "Emmanuel Macron"}}, "max_turns": 3},
        )
        assert env.ground_truth == {"target": "Emmanuel Macron"} and env.max_turns == 3 and env.turns == 0
        assert env.chat_history == [] and env.tool_group.get_name() == "SearchToolGroup"
        assert (env.tool_group.search_url, env.tool_group.topk, env.tool_group.timeout) == (server.url, 5, 60)
        assert env._parse_action("<search>  Query 1 </search> <search>Query 2</search>") == ["  Query 1 "]
        assert env._parse_action("<search>unclosed") == [None]
        env.turns = 3
        assert env._is_done("<search>q</search>")
        env.turns = 1
        assert env._is_done("<answer>x</answer>") and not env._is_done("<search>q</search>")
    finally:
        server.close()


@pytest.mark.parametrize(
    "action, tool_name, tool_input",
    [
        ("<tool><search>how to reverse a string in Python</search></tool>", "search", ["how to reverse a string in Python"]),
        ("<tool><python>print('hello')</python></tool>", "python", ["print('hello')"]),
    ],
)
def test_searchcode_parse_action(action, tool_name, tool_input):
    env = skyrl_gym.make(
        "searchcode",
        env_config=DictConfig({"env_class": "searchcode"}),
        extras={"reward_spec": {"method": "rule", "ground_truth": "random"}, "max_turns": 2},
    )
    group, name, parsed = env._parse_action(action)
    assert (name, parsed) == (tool_name, tool_input)
    assert group == {"search": "SearchToolGroup", "python": "PythonCodeExecutorToolGroup"}[name]
