"""Moving from SkyRL-gym 0.4.0: the names its users import, its tool-call path and its error types work here.

Real parts only: a real HTTP search server, real SQLite files, the real sandbox.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import warnings

import pytest
from omegaconf import DictConfig

import skyrl_gym
from skyrl_gym.envs.search.env import SearchEnv
from skyrl_gym.envs.sql.env import SQLEnv
from tests.tool_env_support import MisbehavingServer, build_sample_databases, first_observation, search_config

needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")
SEARCH_ROW = {"reward_spec": {"method": "rule", "ground_truth": {"target": "Paris"}}, "max_turns": 3}


@pytest.fixture
def server():
    server = MisbehavingServer()
    yield server
    server.close()


# ----- names users import ---------------------------------------------------------------------------------
def test_aime_utils_minerva_and_strict_box():
    from skyrl_gym.envs.aime.utils import compute_score, is_correct_minerva, is_correct_strict_box, verify

    assert is_correct_minerva("so... Answer: 1,024", "1024") == (True, "1024")
    assert is_correct_minerva("Answer: 7", "We get \\boxed{7}.", gt_need_extract=True) == (True, "7")
    assert is_correct_minerva("Final = 12", "12", answer_pattern=r"Final = (\d+)") == (True, "12")
    assert is_correct_minerva("no answer line", "3") == (False, "[INVALID]")
    assert is_correct_strict_box("... \\boxed{42}", "42") == (1, "42")
    assert is_correct_strict_box("... \\boxed{41}", "42") == (-1, "41")
    assert verify("\\boxed{5}", "5", strict_box_verify=True) == (True, "5")
    assert compute_score("x \\boxed{9}", "9", strict_box_verify=True) == {"score": 1.0, "acc": True, "pred": "9"}
    assert compute_score("Answer: 8", "9")["score"] == -1.0
    from skyrl_gym.envs.aime.utils import REMOVED_EXPRESSIONS, SUBSTITUTIONS, normalize_final_answer

    assert ("mbox", "text") in SUBSTITUTIONS and "dollars" in REMOVED_EXPRESSIONS
    assert normalize_final_answer("12 dollars") == "12"
    with pytest.raises(ValueError, match="pause_tokens_index must hold 4 indices"):
        is_correct_strict_box("\\boxed{1}", "1", pause_tokens_index=[1])


def test_search_utils_substring_match():
    from skyrl_gym.envs.search.utils import compute_score_subem, subem_check

    assert subem_check("It is the city of Paris, France", "paris") == 1
    assert subem_check("Lyon", ["Paris", "Marseille"]) == 0
    assert compute_score_subem("<answer>Paris, France</answer>", {"target": ["Paris"]}) == 1.0
    assert compute_score_subem("no answer", {"target": ["Paris"]}) == 0.0


def test_sql_utils_execute_sql_wrapper_single(tmp_path):
    from skyrl_gym.envs.sql.utils import execute_sql_wrapper_single

    db_file = str(tmp_path / "t.sqlite")
    with sqlite3.connect(db_file) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
        conn.executemany("INSERT INTO people VALUES (?)", [("ada",), ("bob",)])
    ok = execute_sql_wrapper_single(db_file, "SELECT name FROM people", 5, "transcript")
    assert ok == (db_file, "SELECT name FROM people", frozenset({("ada",), ("bob",)}), 1, "transcript")
    assert execute_sql_wrapper_single(db_file, "SELECT nope FROM people", 5, "t") == (db_file, "SELECT nope FROM people", None, 0, "t")
    assert execute_sql_wrapper_single(db_file, "DELETE FROM people", 5, "t")[2:4] == (None, 0)  # read-only


def test_registration_and_search_module_names():
    from skyrl_gym.envs.registration import EnvCreator, register, registry  # noqa: F401
    from skyrl_gym.tools import search

    assert isinstance(search.MAX_RETRIES, int) and search.MAX_RETRIES >= 1
    assert search.INITIAL_RETRY_DELAY > 0


@needs_bwrap
def test_livecodebench_compute_score_runs_in_the_sandbox():
    from skyrl_gym.envs.lcb.livecodebench import compute_score, extract_code_from_model, postprocess_lcb_sample

    tests = [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}]
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert compute_score(good, tests) == ("a, b = map(int, input().split())\nprint(a + b)", 1.0)
    assert compute_score("```python\nprint(4)\n```", tests)[1] == 0.0
    assert compute_score("no code", tests) == (None, 0.0)
    assert extract_code_from_model("```\nx\n```") == "x"
    functional = [{"input": "1", "output": "2", "testtype": "functional", "metadata": {"func_name": "f"}}]
    assert '"fn_name": "f"' in postprocess_lcb_sample(functional)["input_output"]


# ----- tools run through _execute_tool; their exceptions become observations ------------------------------
class CannedSearchEnv(SearchEnv):
    def _execute_tool(self, tool_group_name, tool_name, tool_input):
        return f"\n<information>canned for {tool_input[0]}</information>\n"


@pytest.fixture
def canned_id():
    skyrl_gym.register("test-canned-search", entry_point=CannedSearchEnv)
    yield "test-canned-search"
    skyrl_gym.deregister("test-canned-search")


def test_search_step_goes_through_execute_tool(canned_id, server):
    env = skyrl_gym.make(canned_id, env_config=search_config(server.url), extras=dict(SEARCH_ROW))
    assert "canned for capital" in first_observation(env.step("<search>capital</search>"))
    assert "canned for river" in first_observation(asyncio.run(env.astep("<search>river</search>")))
    assert server.requests == 0  # the override was used, not the HTTP tool


class ExplodingToolSQLEnv(SQLEnv):
    def _execute_tool(self, tool_group_name, tool_name, tool_input):
        raise RuntimeError(f"tool {tool_name} is down")


def test_tool_exceptions_become_observations(tmp_path, server):
    class Exploding(SearchEnv):
        def _execute_tool(self, *args):
            raise RuntimeError("Tool execution failed: index offline")

    env = Exploding(search_config(server.url), dict(SEARCH_ROW))
    out = env.step("<search>q</search>")
    assert not out["done"] and out["reward"] == 0.0
    assert first_observation(out) == "Tool execution failed: index offline"

    rows = build_sample_databases(tmp_path, layout="spider")
    extras = {"reward_spec": rows[0]["reward_spec"], "db_id": rows[0]["db_id"], "data": "spider", "max_turns": 3}
    sql_env = ExplodingToolSQLEnv({"db_path": str(tmp_path)}, extras)
    out = sql_env.step("<sql>SELECT 1</sql>")
    assert first_observation(out) == "tool sql is down" and not out["done"]


def test_searchcode_tools_go_through_execute_tool_and_their_errors_are_observations(server):
    from skyrl_gym.envs.searchcode.env import SearchCodeEnv

    calls = []

    class Recording(SearchCodeEnv):
        def _execute_tool(self, tool_group_name, tool_name, tool_input):
            calls.append((tool_group_name, tool_name, tool_input))
            if tool_name == "python":
                raise RuntimeError("python is switched off")
            return "searched"

    row = {"reward_spec": {"method": "rule", "ground_truth": "4"}, "max_turns": 4}
    env = Recording(search_config(server.url), row)
    assert first_observation(env.step("<tool><search>q</search></tool>")) == "searched"
    assert first_observation(env.step("<tool><python>print(1)</python></tool>")) == "python is switched off"
    assert first_observation(asyncio.run(env.astep("<tool><search>r</search></tool>"))) == "searched"
    assert [c[1:] for c in calls] == [("search", ["q"]), ("python", ["print(1)"]), ("search", ["r"])]
    assert server.requests == 0


def test_call_search_api_replaced_with_skyrl_gym_signature(monkeypatch, server):
    from skyrl_gym.tools import search

    calls = []

    def skyrl_gym_style(retrieval_service_url, query, topk=3, return_scores=True, timeout=30, log_requests=True, session=None):
        calls.append((query, topk))
        return {"result": [[{"document": {"contents": f"replacement saw {query}"}}]]}, None

    monkeypatch.setattr(search, "call_search_api", skyrl_gym_style)
    env = skyrl_gym.make("search", env_config=search_config(server.url, topk=2), extras=dict(SEARCH_ROW))
    assert "replacement saw who" in first_observation(env.step("<search>who</search>"))
    assert calls == [("who", 2)]

    def raising(retrieval_service_url, query, topk=3, return_scores=True, timeout=30, log_requests=True, session=None):
        raise ConnectionError("proxy refused")

    monkeypatch.setattr(search, "call_search_api", raising)
    text = first_observation(env.step("<search>again</search>"))
    assert "Search error: API Request Exception during batch search: proxy refused" in text


def test_the_tool_retry_policy_still_applies(server):
    failing = MisbehavingServer(fail_first=2)
    try:
        env = skyrl_gym.make("search", env_config=search_config(failing.url, retry_attempts=3), extras=dict(SEARCH_ROW))
        assert "Result for q" in first_observation(env.step("<search>q</search>"))
        assert failing.requests == 3
    finally:
        failing.close()


# ----- a missing reward_spec: SkyRL-gym's exception type and words ------------------------------------------
@pytest.mark.parametrize("env_id", ["search", "gsm8k", "aime", "searchcode"])
def test_missing_reward_spec_is_an_assertion_error_with_skyrl_gym_words(env_id):
    from skyrl_gym.errors import DataError

    with pytest.raises(AssertionError, match="reward_spec field is required") as caught:
        skyrl_gym.make(env_id, env_config=DictConfig({"search_url": "http://127.0.0.1:1/retrieve"}), extras={"max_turns": 3})
    assert isinstance(caught.value, DataError)  # still ours too
    with pytest.raises(AssertionError, match="ground_truth is required in reward_spec field") as caught:
        skyrl_gym.make(env_id, extras={"reward_spec": {"method": "rule"}, "max_turns": 3})
    assert "did you mean" not in str(caught.value)
    with pytest.raises(AssertionError, match=r"missing from the row \(it has 'groundtruth': did you mean 'ground_truth'\?\)"):
        skyrl_gym.make(env_id, extras={"reward_spec": {"groundtruth": "18"}, "max_turns": 3})  # a misspelled key


# ----- the sandboxed python tool's traceback reads as SkyRL-gym's -------------------------------------------
@needs_bwrap
def test_python_tool_traceback_names_string_like_skyrl_gym():
    from skyrl_gym.tools.python import PythonCodeExecutorToolGroup

    tool = PythonCodeExecutorToolGroup()
    assert tool.python("raise ValueError('fail')") == (
        'Error executing Python code: Traceback (most recent call last):\n  File "<string>", line 1, in <module>\nValueError: fail'
    )
    nested = tool.python("def f():\n    return 1 / 0\nf()")
    assert 'File "<string>", line 3, in <module>' in nested and 'File "<string>", line 2, in f' in nested
    assert "main.py" not in nested and "compile(" not in nested
    assert tool.python("x = (").startswith('Error executing Python code: File "<string>", line 1')
    assert tool.python("print(__name__)") == "__main__"
    stateful = PythonCodeExecutorToolGroup(stateful=True)
    stateful.python("x = 20")
    assert stateful.python("print(x + 1)") == "21"


# ----- SQLCodeExecutorToolGroup takes SkyRL-gym's arguments; the sql alias ----------------------------------
def test_sql_tool_group_with_skyrl_gym_arguments(tmp_path):
    from skyrl_gym.tools import SQLCodeExecutorToolGroup

    rows = build_sample_databases(tmp_path, layout="spider")
    db_id = rows[0]["db_id"]
    group = SQLCodeExecutorToolGroup(db_file_path=str(tmp_path / "spider" / "database"))
    assert group.get_name() == "SQLCodeExecutorToolGroup" and group.get_tool_names() == ["sql"]
    text = group.execute_tool("sql", db_id, rows[0]["reward_spec"]["ground_truth"], 2)
    assert text.startswith("\n\n<observation>") and "<reminder>You have 2 turns left to complete the task.</reminder>" in text
    assert "Your previous action is invalid" in group.sql(db_id, None, 1)
    assert "no such table" in group.sql(db_id, "SELECT * FROM nowhere", 1, timeout=5)


@pytest.mark.parametrize("env_id", ["sql", "text2sql"])
def test_sql_alias_builds_the_same_env(tmp_path, env_id):
    rows = build_sample_databases(tmp_path, layout="spider")
    extras = {"reward_spec": rows[0]["reward_spec"], "db_id": rows[0]["db_id"], "data": "spider", "max_turns": 2}
    env = skyrl_gym.make(env_id, env_config=DictConfig({"db_path": str(tmp_path)}), extras=extras)
    assert isinstance(env, SQLEnv)
    out = env.step("<think>t</think><sql>SELECT 1</sql>")
    assert out["metadata"]["tool_input"] == (rows[0]["db_id"], "SELECT 1", 1)
    final = env.step(f"<think>t</think><solution>{rows[0]['reward_spec']['ground_truth']}</solution>")
    assert final["done"] and final["reward"] == 1.0


def test_an_env_config_section_reaches_the_alias(tmp_path):
    from skyrl_gym.registration import env_config_for

    sections = {"text2sql": {"db_path": "/data/sql"}, "search": {"topk": 5}}
    assert env_config_for(sections, "sql") == {"db_path": "/data/sql"}
    assert env_config_for({"sql": {"db_path": "x"}}, "text2sql") == {"db_path": "x"}
    assert env_config_for(sections, "search") == {"topk": 5}
    assert env_config_for(sections, "gsm8k", {}) == {} and env_config_for(None, "sql") is None

    # end to end: a row naming "sql" is scored with the text2sql section (the TRL reward function)
    from skygym_adapters.trl import env_reward

    rows = build_sample_databases(tmp_path, layout="spider")
    gold = rows[0]["reward_spec"]["ground_truth"]
    reward = env_reward(env_configs={"text2sql": {"db_path": str(tmp_path)}})
    scores = reward(
        prompts=["q"], completions=[f"<think>t</think><solution>{gold}</solution>"], env_class=["sql"],
        reward_spec=[rows[0]["reward_spec"]], db_id=[rows[0]["db_id"]], data=["spider"],
    )
    assert scores == [1.0]


# ----- registering an id we ship: the user's env wins, with a warning ----------------------------------------
@pytest.fixture
def shipped_multiply():
    from skyrl_gym import registration

    original = registration.registry["multiply"]
    yield original
    if dict.__contains__(registration.registry, "multiply"):
        skyrl_gym.deregister("multiply")
    dict.__setitem__(registration.registry, "multiply", original)
    registration._shipped_ids.add("multiply")


def test_registering_a_shipped_id_replaces_it_with_a_warning(shipped_multiply):
    class TutorialMultiply(skyrl_gym.BaseTextEnv):
        def step(self, action):
            return skyrl_gym.StepOutput(observations=[], reward=0.5, done=True, metadata={})

    with pytest.warns(UserWarning, match=r"register\('multiply'\) replaces the env that skyrl_gym ships.*skyrl_gym.envs.multiply"):
        skyrl_gym.register(id="multiply", entry_point=TutorialMultiply)
    assert isinstance(skyrl_gym.make("multiply"), TutorialMultiply)
    # the user's own id is theirs now: registering it twice is the usual error
    with pytest.raises(skyrl_gym.errors.RegistrationError, match="already registered"):
        skyrl_gym.register(id="multiply", entry_point=TutorialMultiply)


def test_user_ids_still_refuse_duplicates():
    skyrl_gym.register("test-user-dup", entry_point=CannedSearchEnv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(skyrl_gym.errors.RegistrationError, match="'test-user-dup' is already registered"):
                skyrl_gym.register("test-user-dup", entry_point=CannedSearchEnv)
    finally:
        skyrl_gym.deregister("test-user-dup")


def test_shipped_ids_include_the_builtins():
    from skyrl_gym import registration

    assert {"gsm8k", "multiply", "sql", "text2sql", "search", "lcb"} <= registration._shipped_ids
    if "countdown" in skyrl_gym.registry:  # shipped through this distribution's own entry points (loaded lazily)
        assert "countdown" in registration._shipped_ids
