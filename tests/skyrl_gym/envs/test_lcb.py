"""The ``lcb`` env: SkyRL-gym's rows and reward values, graded in a real sandbox."""

from __future__ import annotations

import json
import shutil

import pytest

import skyrl_gym
from skyrl_gym.envs.lcb.grading import extract_last_code_block, stdout_matches
from skyrl_gym.errors import DataError

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")

SECOND_LARGEST = json.dumps(
    [
        {"input": "4\n8 2 5 1\n", "output": "3\n", "testtype": "stdin"},
        {"input": "3\n3 2 1\n", "output": "2\n", "testtype": "stdin"},
    ]
)


def make(ground_truth: str, **config):
    return skyrl_gym.make(
        "lcb",
        env_config={"env_class": "lcb", **config},
        extras={"reward_spec": {"method": "rule", "ground_truth": ground_truth}},
    )


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


@pytest.mark.parametrize(
    "code, reward",
    [
        (
            "def main():\n    N = int(input())\n    A = list(map(int, input().split()))\n    B = sorted(A, reverse=True)\n"
            "    print(A.index(B[1]) + 1)\n\nif __name__ == '__main__':\n    main()",
            1.0,
        ),
        (
            "def main():\n    N = int(input())\n    A = list(map(int, input().split()))\n    print(A.index(max(A)) + 1)\n\n"
            "if __name__ == '__main__':\n    main()",
            0.0,
        ),
        ("def main():\n    A = list(map(int, input().split()))\n    print(A)\n# forgot to call main()", 0.0),
    ],
    ids=["correct", "wrong-logic", "never-prints"],
)
def test_stdin_rewards_match_skyrl_gym(code, reward):
    output = make(SECOND_LARGEST).step(fenced(code))
    assert output["reward"] == reward and output["done"] is True and output["observations"] == []
    assert output["metadata"]["parsed_code"] == code


def test_functional_tests_call_the_solution_method():
    tests = json.dumps(
        [
            {
                "input": "[2, 7, 11, 15]\n9",
                "output": "[0, 1]",
                "testtype": "functional",
                "metadata": {"func_name": "twoSum"},
            },
            {
                "input": "[3, 3]\n6",
                "output": "[0, 1]",
                "testtype": "functional",
                "metadata": {"func_name": "twoSum"},
            },
        ]
    )
    good = (
        "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return (seen[target - x], i)\n            seen[x] = i\n"
    )
    output = make(tests).step(fenced(good))
    assert output["reward"] == 1.0, output["metadata"]
    assert [t["verdict"] for t in output["metadata"]["tests"]] == ["passed", "passed"]
    wrong = good.replace("return (seen[target - x], i)", "return [i, seen[target - x]]")
    output = make(tests).step(fenced(wrong))
    assert output["reward"] == 0.0
    assert [t["verdict"] for t in output["metadata"]["tests"]] == ["wrong_answer", "not_run"]


def test_a_plain_function_and_decimal_tolerant_output():
    tests = json.dumps(
        [{"input": "1\n2", "output": "3", "testtype": "functional", "metadata": {"func_name": "add"}}]
    )
    assert make(tests).step(fenced("def add(a, b):\n    return a + b"))["reward"] == 1.0
    assert stdout_matches("0.50 2\n", "0.5 2.0") and not stdout_matches("1 2", "1 2 3")
    # a NaN equals no number; a signalling one (sNaN) raised out of the comparison, and the harness lost every
    # test's verdict
    for nan in ("sNaN", "NaN", "-sNaN"):
        assert not stdout_matches(f"{nan} 2", "1 2") and not stdout_matches("1 2", f"{nan} 2")
    output = make(SECOND_LARGEST, stop_on_first_failure=False).step(fenced("print('sNaN')"))
    assert output["reward"] == 0.0
    assert [t["verdict"] for t in output["metadata"]["tests"]] == ["wrong_answer", "wrong_answer"], output["metadata"]


def test_hanging_and_crashing_programs_score_zero_with_verdicts():
    env = make(SECOND_LARGEST, timeout=1)
    hang = env.step(fenced("while True:\n    pass"))
    assert hang["reward"] == 0.0 and hang["metadata"]["tests"][0]["verdict"] == "timeout"
    crash = make(SECOND_LARGEST).step(fenced("raise RuntimeError('boom')"))
    assert (
        crash["metadata"]["tests"][0]["verdict"] == "runtime_error"
        and "boom" in crash["metadata"]["tests"][0]["detail"]
    )


def test_no_code_block_scores_zero():
    output = make(SECOND_LARGEST).step("I think the answer is 3.")
    assert output["reward"] == 0.0 and output["metadata"]["parsed_code"] is None


def test_last_code_block_wins():
    assert extract_last_code_block("```\nfirst\n```\ntext\n```py\nsecond\n```") == "second"


def test_bad_rows_name_the_problem():
    with pytest.raises(DataError, match="ground_truth"):
        skyrl_gym.make("lcb", extras={"reward_spec": {"method": "rule"}})
    with pytest.raises(DataError, match="func_name"):
        make(json.dumps([{"input": "1", "output": "1", "testtype": "functional"}]))


def test_omegaconf_env_config_and_sandbox_choice_as_in_skyrl_gym():
    omegaconf = pytest.importorskip("omegaconf", reason="needs omegaconf: pip install 'skyrl-gym[train]'")
    config = omegaconf.DictConfig(
        {"env_class": "lcb", "timeout": 2, "sandbox": {"backend": "local", "pool_size": 1, "warm": False}}
    )
    env = skyrl_gym.make(
        "lcb", env_config=config, extras={"reward_spec": {"method": "rule", "ground_truth": SECOND_LARGEST}}
    )
    output = env.step(
        fenced("A = input(); B = list(map(int, input().split()))\nprint(B.index(sorted(B)[-2]) + 1)")
    )
    assert output["reward"] == 1.0
    assert env.sandbox.name == "local-bwrap" and env.limits.wall_s == 2


def test_livecodebench_problems_become_rows_that_grade(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    problems = [
        {
            "question_id": "abc001_a",
            "platform": "atcoder",
            "question_content": "Print the sum of two integers.",
            "starter_code": "",
            "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
            "private_test_cases": "eJzLSM3JyVcozy/KSQEAGgQEXQ==",  # an opaque blob: never unpickled
            "metadata": "{}",
        },
        {
            "question_id": "lc-1",
            "platform": "leetcode",
            "question_content": "Return a + b.",
            "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
            "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
            "metadata": json.dumps({"func_name": "add"}),
        },
    ]
    source = tmp_path / "problems.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in problems))
    subprocess.run(
        [
            sys.executable,
            str(repo / "examples/lcb/prepare_dataset.py"),
            "--problems",
            str(source),
            "--output",
            str(tmp_path / "out"),
        ],
        check=True,
        cwd=repo,
        capture_output=True,
        env={"PYTHONPATH": str(repo)},
    )
    rows = [json.loads(line) for line in (tmp_path / "out" / "test.jsonl").read_text().splitlines()]
    assert [row["extra_info"]["question_id"] for row in rows] == ["abc001_a", "lc-1"]
    stdin_env = skyrl_gym.make("lcb", extras=rows[0])
    assert stdin_env.step(fenced("a, b = map(int, input().split())\nprint(a + b)"))["reward"] == 1.0
    functional_env = skyrl_gym.make("lcb", extras=rows[1])
    assert "class Solution" in rows[1]["prompt"][0]["content"]
    answer = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b"
    assert functional_env.step(fenced(answer))["reward"] == 1.0


def test_an_operators_total_timeout_bounds_the_grading_of_a_response():
    """Each test gets the per-test ``timeout``, so a row of N tests graded for N times it (a served row of 20,000
    slow-but-passing tests: 33 hours); ``total_timeout`` starts no test once the tests have taken that long."""
    tests = json.dumps([{"input": "", "output": "1\n", "testtype": "stdin"}] * 4)
    code = "import time\ntime.sleep(0.6)\nprint(1)"
    assert make(tests).step(fenced(code))["reward"] == 1.0  # no bound by default (SkyRL-gym's rewards)
    output = make(tests, total_timeout=1.0).step(fenced(code))
    verdicts = [test["verdict"] for test in output["metadata"]["tests"]]
    ran = verdicts.count("passed")  # 1 or 2 tests of 0.6 s start within 1 s, by the machine's load; never all 4
    assert output["reward"] == 0.0 and 1 <= ran <= 2 and verdicts == ["passed"] * ran + ["timeout"] * (4 - ran)
    assert "the tests' time in all (1.0s) was spent" in output["metadata"]["reason"]
    for bad in (0, -1, "soon"):
        with pytest.raises(ValueError, match="total_timeout"):
            make(tests, total_timeout=bad)
