"""The RLM env and its REPL: state persists across cells, the model's code runs in the real sandbox, and
host functions (language-model calls, custom tools) run on the host, once per call."""

from __future__ import annotations

import shutil

import pytest

import skyrl_gym
from skyrl_gym.envs.rlm import BaseRLMEnv, PersistentREPL, SandboxValue
from skyrl_gym.envs.rlm.env import DEFAULT_RLM_SYSTEM_PROMPT, NO_CODE_BLOCK_MESSAGE

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")

# A sandbox escape through the object graph: it reaches the real os module, to look at the machine it runs on.
REAL_OS = "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings'][0]()._module.__builtins__['__import__']('os')"


class Recorder:
    def __init__(self):
        self.prompts = []

    def __call__(self, prompts):
        self.prompts.extend(prompts)
        return [f"answer to {p}" for p in prompts]


def test_variables_functions_and_classes_persist_across_cells():
    repl = PersistentREPL()
    first = repl.execute(
        "total = 40\n"
        "def add(n, k=1):\n    return n + k\n"
        "def counter():\n    count = [0]\n    def bump():\n        count[0] += 1\n        return count[0]\n    return bump\n"
        "class Box:\n    def __init__(self, v):\n        self.v = v\n    @property\n    def double(self):\n        return self.v * 2\n"
        "    @staticmethod\n    def name():\n        return 'box'\n"
        "b = Box(21)\nbump = counter()\nbump()\n"
    )
    assert first.stderr == "" and first.locals["total"] == 40
    assert first.var_types["add"] == "function" and isinstance(first.locals["b"], SandboxValue)
    second = repl.execute("print(add(total, k=2), b.double, Box.name(), bump(), bump())")
    assert second.stdout == "42 42 box 2 3\n"
    third = repl.execute("print(bump())")
    assert third.stdout == "4\n"


def test_code_runs_in_the_sandbox_not_in_this_process(tmp_path):
    marker = tmp_path / "host-only.txt"
    marker.write_text("secret")
    repl = PersistentREPL()
    result = repl.execute(f"os_module = {REAL_OS}\nprint(os_module.path.exists({str(marker)!r}), os_module.getcwd())")
    assert result.stdout.split()[0] == "False"  # the host's files are not there
    assert result.stdout.split()[1].startswith("/sandbox")


def test_blocked_builtins_fail_like_skyrl_gym():
    repl = PersistentREPL()
    assert "TypeError: 'NoneType' object is not callable" in repl.execute("import os").stderr
    assert "TypeError" in repl.execute("open('x')").stderr
    assert 'File "<string>", line 1, in <module>' in repl.execute("1 / 0").stderr


def test_a_failed_cell_keeps_the_state_before_it():
    repl = PersistentREPL()
    repl.execute("x = 1")
    failed = repl.execute("x = 2\ny = 3\nraise ValueError('boom')")
    assert "ValueError: boom" in failed.stderr and failed.locals["x"] == 1
    assert repl.execute("print(x, 'y' in SHOW_VARS())").stdout == "1 False\n"


def test_timeout_is_reported_and_state_kept():
    """Only the looping cell runs under the 2 s bound: the bound covers each cell's sandbox start too, and on a
    loaded CI machine the cell after the timeout once took longer than 2 s to start (and printed nothing)."""
    repl = PersistentREPL(timeout=60)
    assert repl.execute("kept = 'yes'").stderr == ""
    repl.timeout = 2
    result = repl.execute("while True:\n    pass")
    assert result.stderr == "Timeout after 2 seconds\n"
    repl.timeout = 60
    assert repl.execute("print(kept)").stdout == "yes\n"


def test_unpicklable_values_are_named_and_not_carried():
    repl = PersistentREPL()
    result = repl.execute("gen = (i for i in range(3))\nfine = [1, 2]")
    assert "gen (TypeError" in result.stderr and result.locals["fine"] == [1, 2]
    assert "NameError" in repl.execute("print(gen)").stderr
    assert repl.execute("print(fine)").stdout == "[1, 2]\n"


def test_each_host_call_runs_once_although_the_cell_is_replayed():
    lm = Recorder()
    repl = PersistentREPL(lm_callback=lm)
    result = repl.execute(
        "print('before')\n"
        "a = llm_query('one')\n"
        "b = llm_query_batched(['two', 'three'])\n"
        "print(a, b)\n"
    )
    assert result.stdout == "before\nanswer to one ['answer to two', 'answer to three']\n"
    assert lm.prompts == ["one", "two", "three"]


def test_custom_tools_run_on_the_host_and_values_are_variables():
    seen = []

    def lookup(key, default=None):
        seen.append(key)
        return {"paris": ("France", 2.1)}.get(key, default)

    repl = PersistentREPL(custom_tools={"lookup": {"tool": lookup, "description": "city facts"}, "limit": 3})
    result = repl.execute("country, millions = lookup('paris')\nprint(country, millions * limit, lookup('x', default=0))")
    assert result.stdout == "France 6.300000000000001 0\n" and seen == ["paris", "x"]
    with pytest.raises(ValueError, match="reserved REPL names"):
        PersistentREPL(custom_tools={"llm_query": lookup})


def test_a_raising_custom_tool_gives_the_code_an_error_text():
    def broken(_):
        raise KeyError("gone")

    result = PersistentREPL(custom_tools={"broken": broken}).execute("print(broken(1))")
    assert result.stdout == "Error: broken failed - KeyError: 'gone'\n"


def test_rlm_query_uses_the_child_and_parses_literals():
    repl = PersistentREPL(lm_callback=Recorder(), subcall_fn=lambda prompt, context=None: f"[{len(prompt)}, {context!r}]")
    result = repl.execute("r = rlm_query('abc', context='doc')\nrs = rlm_query_batched(['a', 'bb'], context_list=[1, 2])\nprint(r[0], rs)")
    assert result.stdout == "3 [[1, 1], [2, 2]]\n"


class CapitalEnv(BaseRLMEnv):
    def _get_reward(self, final_answer):
        return 1.0 if final_answer.strip() == "Paris" else 0.0

    def _get_repl_tools(self):
        return {"shout": {"tool": lambda s: s.upper(), "description": "upper-cases text"}}


@pytest.fixture
def env_id():
    skyrl_gym.register("test-rlm-capital", entry_point=CapitalEnv)
    yield "test-rlm-capital"
    skyrl_gym.deregister("test-rlm-capital")


def make(env_id, **extras):
    row = {"max_turns": 4, "extra_info": {"context_text": '{"doc": "The capital of France is Paris."}'}, **extras}
    return skyrl_gym.make(env_id, extras=row)


def test_episode_with_ephemeral_prompts_and_final_var(env_id):
    env = make(env_id)
    history, _ = env.init([{"role": "user", "content": "Capital of France?"}])
    assert [m["role"] for m in history] == ["system", "user", "user"]
    assert "shout" in history[0]["content"] and "llm_query" not in history[0]["content"]
    assert "{custom_tools_section}" not in history[0]["content"]
    assert history[1]["content"] == ("Your context is a dict with 31 total characters, and is broken up into chunks of char lengths: [31].")
    assert "Capital of France?" in history[2]["content"]

    out = env.step("Let me look.\n```repl\ncity = context['doc'].split()[-1].rstrip('.')\nprint(shout(city))\n```")
    assert not out["done"] and out["reward"] == 0.0
    assert len(history) == 2  # the turn-0 instruction was removed from the caller's list
    body, instruction = out["observations"]
    assert body["content"].startswith("Code executed:\n```python\ncity =") and "PARIS" in body["content"]
    assert "REPL variables: ['city']" in body["content"]
    history.extend([{"role": "assistant", "content": "..."}, body, instruction])

    no_code = env.step("thinking")
    assert no_code["observations"][0]["content"] == NO_CODE_BLOCK_MESSAGE

    final = env.step("```repl\nprint(SHOW_VARS())\n```\nFINAL_VAR(city)")
    assert final["done"] and final["reward"] == 1.0 and final["observations"] == []
    assert env.get_metrics() == {"turns_used": 3, "final_value_set": True, "final_answer": "Paris", "reward": 1.0}
    env.close()


def test_final_text_and_turn_limit(env_id):
    env = make(env_id, max_turns=2)
    env.init([{"role": "user", "content": "q"}])
    wrong = env.step("```repl\nx = 1\n```\nFINAL(Lyon)")
    assert wrong["done"] and wrong["reward"] == 0.0 and env.get_metrics()["final_answer"] == "Lyon"

    env = make(env_id, max_turns=2)
    env.init([{"role": "user", "content": "q"}])
    assert not env.step("```repl\nx = 1\n```")["done"]
    last = env.step("```repl\nx = 2\n```")
    assert last["done"] and last["reward"] == 0.0 and env.get_metrics()["final_value_set"] is False


def test_lm_functions_are_described_only_with_a_callback(env_id):
    env = make(env_id, lm_callback=Recorder())
    system = env.init([{"role": "user", "content": "q"}])[0][0]["content"]
    assert all(name in system for name in ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched"))
    assert "5. Custom tools" in system
    assert "{custom_tools_section}" in DEFAULT_RLM_SYSTEM_PROMPT


def test_step_before_init_names_the_problem(env_id):
    with pytest.raises(RuntimeError, match=r"step\(\) was called before init"):
        make(env_id).step("```repl\nx = 1\n```")


@pytest.mark.parametrize(
    "report",
    [
        '{"status": "call", "call": {"index": "x"}}',  # int() raised ValueError out of execute()
        '{"status": "call", "call": {"index": 1e400}}',  # OverflowError
        '{"status": "call", "call": ["llm_query"]}',  # AttributeError
        '{"status": "call", "call": {"index": 0, "name": "llm_query", "kwargs": [1]}}',
    ],
)
def test_a_report_the_cell_forged_is_a_failed_cell_not_an_exception(report):
    """The cell's code runs where the report is written: it may write its own and exit before the REPL
    does."""
    repl = PersistentREPL(timeout=10, lm_callback=Recorder())
    forged = repl.execute(
        f"os = {REAL_OS}\n"
        "fd = os.open('result.json', os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
        f"os.write(fd, {report!r}.encode())\nos.close(fd)\nos._exit(0)\n"
    )
    assert "malformed call" in forged.stderr and forged.final_answer is None
    assert repl.execute("x = 1\nprint(x + 1)").stdout == "2\n"  # the REPL goes on


def test_a_report_nested_too_deep_to_read_is_a_failed_cell_not_an_exception():
    """json.loads of 200,000 nested brackets raised RecursionError, which escaped execute() and the env's step."""
    repl = PersistentREPL(timeout=10, lm_callback=Recorder())
    nested = '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}"
    forged = repl.execute(
        f"os = {REAL_OS}\n"
        "fd = os.open('result.json', os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
        f"os.write(fd, {nested!r}.encode())\nos.close(fd)\nos._exit(0)\n"
    )
    assert forged.final_answer is None and forged.stderr
    assert repl.execute("x = 1\nprint(x + 1)").stdout == "2\n"  # the REPL goes on
