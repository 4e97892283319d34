"""Scripted conformance cases for every built-in env, with the real resources the tool envs need.

``builtin_case_set(env_id)`` is a context manager that yields the cases of one env. Math envs need
nothing; ``sql``/``text2sql`` get a small SQLite database written to a scratch folder; ``search`` and
``searchcode`` get the project's BM25 retrieval server, started as a subprocess on a free port over a
ten-document corpus; the code envs run in the default sandbox. Everything is torn down on exit.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import skyrl_gym

from skygym_adapters.conformance.kit import Case



def _row(env_class: str, question: str, ground_truth: Any, system: str = "", **columns: Any) -> Dict[str, Any]:
    prompt = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    return {
        "data_source": f"conformance/{env_class}",
        "prompt": prompt,
        "env_class": env_class,
        "reward_spec": {"method": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": "conformance"},
        **columns,
    }


# ------------------------------------------------------------------------------------------------ math
GSM8K_Q = ("Natalia sold 48 clips in April and half as many in May. How many clips in total? "
           "Let's think step by step and output the final answer after \"####\".")


def _math_cases() -> Dict[str, List[Case]]:
    return {
        "gsm8k": [
            Case(_row("gsm8k", GSM8K_Q, "72"), ["48 + 24 = 72\n#### 72"]),
            Case(_row("gsm8k", "A robe takes 2 bolts of blue fiber and half that much white. Total? Answer after ####.", "3"),
                 ["2 + 2 = 4\n#### 4"]),
        ],
        "gsm8k_multi_turn": [
            Case(_row("gsm8k_multi_turn", GSM8K_Q, "72", max_turns=3), ["#### 70", "I recount: #### 71", "#### 72"]),
            Case(_row("gsm8k_multi_turn", "What is 5 + 7? Answer after ####.", "12", max_turns=2), ["twelve", "#### 12"]),
            Case(_row("gsm8k_multi_turn", "What is 9 - 4? Answer after ####.", "5", max_turns=2), ["#### 6", "#### 7"]),
        ],
        "aime": [
            Case(_row("aime", "Find the remainder when 2024 is divided by 1000. Put your final answer after 'Answer:'.", "24"),
                 ["2024 = 2*1000 + 24.\nAnswer: 24"]),
            Case(_row("aime", "Find 3 * 4. Put your final answer after 'Answer:'.", "12"), ["Answer: 13"]),
        ],
        "math": [
            Case(_row("math", "What is 1/2 as a decimal? Put the answer in \\boxed{}.", "0.5"), ["It is \\boxed{\\frac{1}{2}}"]),
            Case(_row("math", "Compute 2+2. Put the answer in \\boxed{}.", "4"), ["\\boxed{5}"]),
        ],
        "multiply": [
            Case(_row("multiply", "Compute 3 * 4. Put the answer in \\boxed{}.", "12", max_turns=3),
                 ["I think it is 11", "\\boxed{13}", "\\boxed{12}"]),
            Case(_row("multiply", "Compute 6 * 7. Put the answer in \\boxed{}.", "42", max_turns=2), ["\\boxed{41}", "\\boxed{40}"]),
        ],
        "countdown": [
            Case(_row("countdown", "Using the numbers [3, 7, 5], create an equation that equals 50. Answer in <answer></answer>.",
                      {"target": 50, "numbers": [3, 7, 5]}), ["<answer>(7 + 3) * 5</answer>"]),
            Case(_row("countdown", "Using the numbers [2, 9], create an equation that equals 11. Answer in <answer></answer>.",
                      {"target": 11, "numbers": [2, 9]}), ["<answer>9 - 2</answer>"]),
        ],
    }


# ------------------------------------------------------------------------------------------------ code
def _code_cases() -> Dict[str, List[Case]]:
    humaneval_task = {
        "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
        "test": "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
        "entry_point": "add",
    }
    lcb_tests = [{"input": "3\n1 5 2\n", "output": "5\n", "testtype": "stdin"}]
    system = "You may run Python with <tool><python>...</python></tool>. Put the final answer in \\boxed{}."
    return {
        "code_interpreter": [
            Case(_row("code_interpreter", "What is 2**10?", "1024", system=system, max_turns=3),
                 ['<tool_call>{"name": "python", "arguments": {"code": "print(2**10)"}}</tool_call>', "It is \\boxed{1024}"]),
            Case(_row("code_interpreter", "What is 10 factorial?", "3628800", system=system, max_turns=3),
                 ["<tool><python>import math\nprint(math.factorial(10))</python></tool>", "\\boxed{3628801}"]),
        ],
        "humaneval": [
            Case(_row("humaneval", "Complete add(a, b).", json.dumps(humaneval_task), extra_info={"entry_point": "add"}),
                 ["```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```"]),
            Case(_row("humaneval", "Complete add(a, b), please.", json.dumps(humaneval_task), extra_info={"entry_point": "add"}),
                 ["```python\ndef add(a: int, b: int) -> int:\n    return a - b\n```"]),
        ],
        "lcb": [
            Case(_row("lcb", "Read n and n numbers; print the largest. Answer in a ```python block.", json.dumps(lcb_tests)),
                 ["```python\nn = int(input())\nprint(max(map(int, input().split())))\n```"]),
            Case(_row("lcb", "Read n and n numbers; print the largest one. Answer in a ```python block.", json.dumps(lcb_tests)),
                 ["```python\nprint(0)\n```"]),
        ],
    }


# ------------------------------------------------------------------------------------------------ sql
def _write_database(path: Path) -> Path:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(
            "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);"
            "INSERT INTO singer VALUES (1, 'Ana', 'Portugal'), (2, 'Ben', 'France'), (3, 'Chloe', 'Portugal');"
        )
        db.commit()
    return path


@contextlib.contextmanager
def _sql_cases(env_id: str) -> Iterator[List[Case]]:
    with tempfile.TemporaryDirectory(prefix="skyrl-gym-conform-sql-") as folder:
        db_file = _write_database(Path(folder) / "concert.sqlite")
        config = {"db_path": folder}
        question = "How many singers are from Portugal? Explore with <sql>...</sql>, answer with <solution>...</solution>."
        gold = "SELECT COUNT(*) FROM singer WHERE country = 'Portugal'"
        yield [
            Case(_row(env_id, question, gold, db_file=str(db_file), max_turns=3),
                 ["<sql>SELECT country, COUNT(*) FROM singer GROUP BY country</sql>", f"<solution>{gold}</solution>"], config),
            Case(_row(env_id, "How many singers are there in total? Use <sql> and <solution>.", "SELECT COUNT(*) FROM singer",
                      db_file=str(db_file), max_turns=2),
                 ["<sql>SELECT nme FROM singer</sql>", "<solution>SELECT COUNT(*) FROM singer WHERE country = 'France'</solution>"],
                 config),
        ]


# ------------------------------------------------------------------------------------------------ search
CORPUS = [
    {"id": "0", "contents": '"Hamlet"\nHamlet is a tragedy written by William Shakespeare around 1600.'},
    {"id": "1", "contents": '"Mount Everest"\nMount Everest is the highest mountain above sea level, 8,849 metres tall.'},
    {"id": "2", "contents": '"Paris"\nParis is the capital and most populous city of France.'},
    {"id": "3", "contents": '"Lisbon"\nLisbon is the capital of Portugal, on the Tagus estuary.'},
    {"id": "4", "contents": '"Jupiter"\nJupiter is the largest planet in the Solar System.'},
]


@contextlib.contextmanager
def retrieval_server(timeout_s: float = 120.0) -> Iterator[str]:
    """The project's BM25 retrieval server over :data:`CORPUS`, in a subprocess; yields its /retrieve URL."""
    with tempfile.TemporaryDirectory(prefix="skyrl-gym-conform-search-") as folder:
        corpus = Path(folder) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps(doc) + "\n" for doc in CORPUS), encoding="utf-8")
        log_path = Path(folder) / "server.log"
        with open(log_path, "w+", encoding="utf-8") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "skyrl_gym.retrieval", "--corpus", str(corpus), "--port", "0"],
                stdout=log, stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + timeout_s
                url = None
                while url is None:
                    text = log_path.read_text(encoding="utf-8")
                    url = next((line.split("listening on ", 1)[1].strip() for line in text.splitlines()
                                if "listening on " in line), None)
                    if url is None:
                        if process.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"the retrieval server did not start:\n{text[-2000:]}")
                        time.sleep(0.1)
                yield url
            finally:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@contextlib.contextmanager
def _search_cases(env_id: str) -> Iterator[List[Case]]:
    with retrieval_server() as url:
        config = {"search_url": url, "topk": 2, "retry_attempts": 1}
        if env_id == "search":
            yield [
                Case(_row("search", "Answer the question. Question: who wrote hamlet?",
                          {"target": ["William Shakespeare", "Shakespeare"]}, max_turns=2),
                     ["<search>who wrote hamlet</search>", "<answer>William Shakespeare</answer>"], config),
                Case(_row("search", "Answer the question. Question: what is the capital of Portugal?", {"target": ["Lisbon"]},
                          max_turns=2),
                     ["<search>capital of Portugal</search>", "<answer>Porto</answer>"], config),
            ]
        else:
            yield [
                Case(_row("searchcode", "How tall is Mount Everest in metres? End with <solution>#### N</solution>.", "8849",
                          max_turns=3),
                     ["<tool><search>Mount Everest height</search></tool>", "<tool><python>print(8849)</python></tool>",
                      "<solution>#### 8849</solution>"], config),
                Case(_row("searchcode", "What is 12 * 12? End with <solution>#### N</solution>.", "144", max_turns=2),
                     ["<tool><python>print(12 * 12)</python></tool>", "<solution>#### 143</solution>"], config),
            ]


# ------------------------------------------------------------------------------------------------ lookup
@contextlib.contextmanager
def _static(cases: List[Case]) -> Iterator[List[Case]]:
    yield copy.deepcopy(cases)


def _factories() -> Dict[str, Callable[[], Any]]:
    factories: Dict[str, Callable[[], Any]] = {}
    for name, cases in {**_math_cases(), **_code_cases()}.items():
        factories[name] = lambda cases=cases: _static(cases)
    for name in ("sql", "text2sql"):
        factories[name] = lambda name=name: _sql_cases(name)
    for name in ("search", "searchcode"):
        factories[name] = lambda name=name: _search_cases(name)
    return factories


def has_builtin_cases(env_id: str) -> bool:
    return env_id in _factories() or skyrl_gym.spec(env_id).name in _factories()


def reference_cases(env_id: str, size: int = 2) -> Tuple[List[Case], str]:
    """Cases for an env with no built-in ones, as ``skyrl-gym check`` finds rows: ``size`` test rows from its
    dataset builder, else its golden cases, each played with the row's reference answer; and where they came
    from. Raises LookupError naming what to pass when there are none."""
    from skyrl_gym.checker import BrokenBuilder, NoRowsFor, default_rows, reference_action

    try:  # more rows than cases: a split of few tasks repeats prompts, and each case needs one of its own
        rows, source, _ = default_rows(env_id, size=size * 4, verify=False)  # `check` verifies the builder
    except (NoRowsFor, BrokenBuilder) as exc:
        raise LookupError(f"no conformance cases for env {env_id!r}: {exc} Or pass rows and actions: "
                          f"skyrl-gym conform {env_id} --rows ROWS --actions ACTIONS") from None
    cases: List[Case] = []
    for row in rows:
        action = reference_action(row)
        case = Case(dict(row), [action])
        if action is not None and len(cases) < size and all(case.key != other.key for other in cases):
            cases.append(case)
    if not cases:
        raise LookupError(f"no conformance cases for env {env_id!r}: its {source} have no reference answer "
                          "(reference_action, or extra_info.answer / solution); pass rows and actions: "
                          f"skyrl-gym conform {env_id} --rows ROWS --actions ACTIONS")
    return cases, f"{len(cases)} case(s) of distinct prompts from {source}, each playing the row's reference answer"


@contextlib.contextmanager
def builtin_case_set(env_id: str) -> Iterator[List[Case]]:
    """The built-in cases of ``env_id``, with their resources running for the duration of the block."""
    factories = _factories()
    name = env_id if env_id in factories else skyrl_gym.spec(env_id).name
    if name not in factories:
        raise LookupError(
            f"no built-in conformance cases for env {env_id!r}; pass rows and actions "
            f"(skyrl-gym conform {env_id} --rows ROWS --actions ACTIONS). Built-in: {sorted(factories)}"
        )
    with factories[name]() as cases:
        yield cases


__all__ = ["builtin_case_set", "has_builtin_cases", "reference_cases", "retrieval_server"]
