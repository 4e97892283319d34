"""examples/agents/eval_openai.sh: the agent example's YAML and rows through ``skyrl-gym agent eval`` against an
OpenAI-compatible server (a scripted one on 127.0.0.1), the Python tool running in the sandbox."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.adapters.agents.chat_server import chat_server
from tests.fixtures.extras import require_extra

ROOT = Path(__file__).resolve().parents[3]
QUESTION = re.compile(r"What is (\d) \* (\d)\?")
OUTPUT = re.compile(r"<output>\s*(-?\d+)\s*</output>")


def uses_the_tool_on_even_factors(body):
    """``a`` even: run ``print(a * b)`` in the tool, then box what it printed. ``a`` odd: box a wrong product."""
    question = next(
        m["content"] for m in body["messages"] if m["role"] == "user" and QUESTION.search(m["content"])
    )
    a, b = map(int, QUESTION.search(question).groups())
    printed = [OUTPUT.search(m["content"] or "") for m in body["messages"][2:]]
    printed = [m.group(1) for m in printed if m]
    if a % 2:
        return f"I think it is \\boxed{{{a * b + 1}}}"
    if printed:
        return f"The tool printed it: \\boxed{{{printed[-1]}}}"
    return f"<tool><python>print({a} * {b})</python></tool>"


def test_eval_openai_script_scores_the_tool_agent_through_a_chat_server(tmp_path):
    require_extra("remote")  # the script's `skyrl-gym agent eval` talks to the server with aiohttp
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "ROWS": str(tmp_path / "data" / "validation.jsonl"),
        "OUT": str(tmp_path / "out.jsonl"),
        "LIMIT": "6",
    }
    with chat_server(uses_the_tool_on_even_factors) as server:
        env.update(BASE_URL=server.url, MODEL="served-name")
        proc = subprocess.run(
            ["bash", str(ROOT / "examples/agents/eval_openai.sh"), "--no-progress"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert server.requests and all(r["model"] == "served-name" for r in server.requests)
    rows = [json.loads(line) for line in Path(env["ROWS"]).read_text().splitlines()][:6]
    results = [json.loads(line) for line in Path(env["OUT"]).read_text().splitlines()]
    firsts = [int(QUESTION.search(row["prompt"][-1]["content"]).group(1)) for row in rows]
    assert [r["reward"] for r in results] == [0.0 if a % 2 else 1.0 for a in firsts]
    assert [r["num_turns"] for r in results] == [1 if a % 2 else 2 for a in firsts]
    assert 0 < sum(a % 2 for a in firsts) < 6  # both kinds of answer are in the six rows


def test_token_backend_example_runs_the_embedded_model_offline(embedded_model, tmp_path):
    """examples/agents/token_backend.py: the token backend's recipe, runnable as it stands (a cold run found no
    runnable Python example for it)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples/agents/token_backend.py"), "--rows", "2"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rewards = re.search(r"trajectory rewards: \[(.*)\]", proc.stdout)
    assert rewards and len(rewards.group(1).split(",")) == 2, proc.stdout
    tokens = re.search(r"loss-masked tokens \(the model's own\): \[(\d+), (\d+)\]", proc.stdout)
    assert tokens and all(int(count) > 0 for count in tokens.groups()), proc.stdout
