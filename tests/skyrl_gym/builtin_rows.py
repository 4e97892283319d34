"""Small, valid dataset rows for the built-in envs, shared by the bridge and checker tests.

An env family that registers a built-in env adds rows for it here, so that the Gymnasium checker
and ``skyrl_gym.check_env`` run on it in CI.
"""

from __future__ import annotations

from typing import Any, Dict, List

from skyrl_gym.checker import golden_rows
from skyrl_gym.data import load_rows
from skyrl_gym.envs.multiply.dataset import make_rows


def _user(text: str) -> List[Dict[str, str]]:
    return [{"role": "user", "content": text}]


# gsm8k, gsm8k_multi_turn, aime, math, search, searchcode and code_interpreter ship golden cases (golden.json
# beside the env), which `skyrl-gym check ID` uses when it cannot build rows; the tests check the same rows.
BUILTIN_ROWS: Dict[str, List[Dict[str, Any]]] = {
    **{env_id: golden_rows(env_id)[0] for env_id in ("gsm8k", "gsm8k_multi_turn", "aime", "math")},
    "multiply": [
        {**row, "extra_info": {**row["extra_info"], "reference_action": f"\\boxed{{{row['reward_spec']['ground_truth']}}}"}}
        for row in make_rows(2, num_digits=2, seed=3, max_turns=2)
    ],
}


def _tool_env_rows() -> Dict[str, List[Dict[str, Any]]]:
    """text2sql rows over the generated sample databases (absolute ``db_file``: no env_config needed);
    search/searchcode rows whose reference answers need no retrieval server."""
    from tests.tool_env_support import shared_sample_databases

    folder = shared_sample_databases()
    sql_rows = []
    for row in load_rows(str(folder / "rows.jsonl"))[:2]:
        gold = row["reward_spec"]["ground_truth"]
        sql_rows.append({**row, "db_file": str(folder / row["db_file"]), "max_turns": 3,
                         "extra_info": {**row["extra_info"], "reference_action": f"<think>known</think><solution>{gold}</solution>"}})
    return {
        "text2sql": sql_rows,
        "sql": [{**row, "env_class": "sql"} for row in sql_rows],
        "search": golden_rows("search")[0],  # reference answers that need no retrieval server
        "searchcode": golden_rows("searchcode")[0],
    }


BUILTIN_ROWS.update(_tool_env_rows())


def _code_env_rows() -> Dict[str, List[Dict[str, Any]]]:
    """Rows for the sandboxed code envs (the checker runs them through the real local sandbox) and
    the community countdown env; reference actions are correct solutions."""
    import json

    from skygym_contrib.countdown.dataset import make_rows as countdown_rows
    from skyrl_gym.envs.humaneval.dataset import load_problems, problem_to_row

    lcb_tests = [
        {"input": "3\n4 9 2\n", "output": "9\n", "testtype": "stdin"},
        {"input": "[1, 2]\n[3]", "output": "[1, 2, 3]", "testtype": "functional", "metadata": {"func_name": "concat"}},
    ]
    lcb_solution = (
        "```python\nimport sys\n\ndef concat(a, b):\n    return a + b\n\n"
        "data = sys.stdin.read().split()\nif data:  # functional tests call concat() with no stdin\n    print(max(map(int, data[1:])))\n```"
    )
    problem = next(iter(load_problems().values()))
    humaneval = problem_to_row(problem)
    humaneval_solution = "```python\n" + problem["prompt"] + problem["canonical_solution"] + "\n```"
    rows: Dict[str, List[Dict[str, Any]]] = {
        "lcb": [
            {
                "data_source": "livecodebench",
                "prompt": _user("Print the largest of n numbers; also define concat(a, b). Answer in a ```python block."),
                "env_class": "lcb",
                "reward_spec": {"method": "rule", "ground_truth": json.dumps(lcb_tests)},
                "extra_info": {"reference_action": lcb_solution},
            }
        ],
        "code_interpreter": golden_rows("code_interpreter")[0],
        "countdown": countdown_rows(2, seed=5),  # extra_info.solution is the reference action
    }
    rows["humaneval"] = [{**humaneval, "extra_info": {**humaneval["extra_info"], "reference_action": humaneval_solution}}]
    return rows


BUILTIN_ROWS.update(_code_env_rows())


def builtin_env_ids() -> List[str]:
    """Every env registered by skyrl-gym itself (plugins excluded). The ``reasoning_gym/*`` and ``games/*`` families
    are checked on rows from their dataset builders in tests/envs_contrib; ``swe`` (a Docker container per episode, on
    instances built by `skyrl-gym swe build`) is checked, rolled out and graded in tests/skyrl_gym/envs/swe."""
    import skyrl_gym

    return sorted(
        env_id
        for env_id, spec in skyrl_gym.registry.items()
        if spec.provider == "skyrl-gym" and not env_id.startswith("test")  # envs other tests register
        and not env_id.startswith(("reasoning_gym/", "games/")) and env_id != "swe"
    )
