"""Differential fuzz of rewards: our ``skyrl_gym`` against the public SkyRL-gym 0.4.0, env by env.

    python bench/reward_parity.py [--cases 3000] [--seed 0] [--only gsm8k,aime] [--json diffs.json]

For every env id registered by both packages (``aime``, ``gsm8k``, ``gsm8k_multi_turn``, ``lcb``, ``search``,
``searchcode``, ``text2sql``), seeded generators build realistic dataset rows and many actions: correct answers
in every form the env accepts, wrong answers and near misses (spacing, ``1,000``, leading zeros, signs,
``5.0``, ``\\boxed{}``, ``\\frac``, unicode digits, several answers, empty and 100k+ character texts, control
characters, tag variants of ``<answer>``/``<sql>``/``<solution>``/``<think>``, ...). Each case is
``make(id, env_config, extras=row)`` + ``init(prompt)`` + ``step(action)`` for each action of the case until
``done``; ``reward`` and ``done`` of every step are compared (and the observations, counted apart, since
some are reworded on purpose). A case where one side raises and the other does not is a difference.

``--cases`` is the number of cases of each cheap env (``aime``, ``gsm8k``, ``gsm8k_multi_turn``,
``search``); ``text2sql`` gets a fifth of it, ``searchcode`` and ``lcb`` (each case runs a program) a
twentieth. Same ``--cases`` and ``--seed``: the same cases.

Each side runs in a process of its own, the same worker code reading the cases from a file: ours with the
interpreter that runs this script (this repository on ``PYTHONPATH``), SkyRL-gym 0.4.0 from the virtual
environment ``bench/core_vs_skyrl_gym.py`` creates and reuses (``~/.cache/skyrl-gym/bench-venvs/skyrl-gym-0.4.0``;
the package index must be reachable the first time). The two packages share a distribution name and are never
imported in one process. ``search`` steps that search reach a tiny retrieval server inside each worker
(deterministic passages); ``text2sql`` cases run on small SQLite files written to a temporary folder.

Prints, per env id: cases, equal, different (reward, done or an exception), observation differences, the
differences by generator tag, and up to 5 examples. Nothing is asserted; this is not a test.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_vs_skyrl_gym import _env, theirs_python  # noqa: E402  (the 0.4.0 venv and the per-side environment)

ENV_IDS = ["gsm8k", "gsm8k_multi_turn", "aime", "search", "text2sql", "searchcode", "lcb"]
SHARE = {"text2sql": 5, "searchcode": 20, "lcb": 20}  # --cases is divided by this for costly envs

# --------------------------------------------------------------------------------------------------
# The worker: the same code runs on both sides. argv: cases.jsonl results.jsonl. One result per case.
# --------------------------------------------------------------------------------------------------
WORKER = r"""
import json, signal, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from omegaconf import OmegaConf
import skyrl_gym

class Retrieval(BaseHTTPRequestHandler):
    # Search-R1's retriever protocol: {"query", "topk"} -> {"result": [[{"document": {"contents"}}, ...]]}
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        query, topk = str(body.get("query", "")), int(body.get("topk", 3))
        if "LEAK:" in query:  # a passage that itself holds an <answer> tag
            texts = ["\"Leak\"\nThe answer is <answer>" + query.split("LEAK:", 1)[1].strip() + "</answer>."]
        elif "NOTHING" in query:
            texts = []
        else:
            texts = ["\"%s\"\nPassage %d about %s." % (query.title(), i, query) for i in range(topk)]
        data = json.dumps({"result": [[{"document": {"contents": t}} for t in texts]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Retrieval)
threading.Thread(target=server.serve_forever, daemon=True).start()
SEARCH_URL = "http://127.0.0.1:%d/retrieve" % server.server_address[1]

class CaseTimeout(Exception):
    pass

def on_alarm(*args):
    raise CaseTimeout("case took over 120 s")

signal.signal(signal.SIGALRM, on_alarm)

def failure(where, exc):
    return "%s: %s: %s" % (where, type(exc).__name__, str(exc)[:160])

def run(case):
    result = {"steps": [], "error": None}
    config = case.get("env_config")
    try:
        kwargs = {"extras": case["extras"]}
        if config is not None:
            kwargs["env_config"] = OmegaConf.create(json.loads(json.dumps(config).replace("{SEARCH_URL}", SEARCH_URL)))
        env = skyrl_gym.make(case["env"], **kwargs)
        env.init(case["extras"].get("prompt", []))
    except Exception as exc:
        result["error"] = failure("make/init", exc)
        return result
    for index, action in enumerate(case["actions"]):
        try:
            out = env.step(action)
        except Exception as exc:
            result["error"] = failure("step %d" % (index + 1), exc)
            break
        obs = "".join(str(m.get("content", "")) for m in (out.get("observations") or []))
        reward = out.get("reward")
        result["steps"].append([None if reward is None else float(reward), bool(out.get("done")), obs[:3000]])
        if out.get("done"):
            break
    try:
        env.close()
    except Exception:
        pass
    return result

with open(sys.argv[1]) as cases, open(sys.argv[2], "w") as results:
    for line in cases:
        signal.alarm(120)
        try:
            result = run(json.loads(line))
        except CaseTimeout as exc:
            result = {"steps": [], "error": failure("case", exc)}
        signal.alarm(0)
        results.write(json.dumps(result) + "\n")
        results.flush()
print(json.dumps({"file": skyrl_gym.__file__}))
"""

# --------------------------------------------------------------------------------------------------
# Shared pieces of actions
# --------------------------------------------------------------------------------------------------
LONG = 120_000  # characters of filler in "long" actions: past the 100,000 our envs score
FILLERS = ["", "Let's think step by step. ", "First, 3 + 4 = 7. Then 7 * 2 = 14.\n", "Wait, let me re-check.\n\n",
           "So the answer is ", "<think>reasoning</think>\n", "\u200b", "\t \n"]
CONTROL = ["\x00", "\x07", "\x1b[31m", "\r", "\x0b", "\x0c", "\u2028", "\ufeff", "\x1c"]
UNICODE_DIGITS = [str.maketrans("0123456789", "０１２３４５６７８９"),  # fullwidth
                  str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"),  # Arabic-Indic
                  str.maketrans("0123456789", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗")]  # mathematical bold


def long_filler(rng: random.Random, chars: int = LONG) -> str:
    word = rng.choice(["blah ", "1 2 3 ", "#", "{", "\\boxed{", "<answer>", "<think>", "Answer ", "x" * 10])
    return (word * (chars // len(word) + 1))[:chars]


def number_variants(rng: random.Random, gt: str) -> Dict[str, str]:
    """Near-miss spellings of a numeric ground truth, by tag."""
    variants = {"exact": gt, "leading_zero": "0" + gt, "decimal_.0": gt + ".0", "decimal_.00": gt + ".00",
                "trailing_dot": gt + ".", "negated": gt[1:] if gt.startswith("-") else "-" + gt,
                "plus_sign": "+" + gt, "off_by_one": _shift(gt, 1), "spaced": " ".join(gt),
                "unicode_digits": gt.translate(rng.choice(UNICODE_DIGITS)), "dollar": "$" + gt,
                "percent": gt + "%", "scientific": gt + "e0", "fraction": "\\frac{%s}{1}" % gt}
    try:
        value = int(gt)
        variants["commas"] = f"{value:,}"
        variants["wrong_commas"] = f"{value:,}".replace(",", ",,") if abs(value) >= 1000 else gt[:1] + "," + gt[1:]
    except ValueError:
        pass
    return variants


def _shift(gt: str, delta: int) -> str:
    try:
        return str(int(gt) + delta)
    except ValueError:
        return gt + "1"


def prompt_of(text: str) -> List[Dict[str, str]]:
    return [{"role": "user", "content": text}]


# --------------------------------------------------------------------------------------------------
# gsm8k and gsm8k_multi_turn
# --------------------------------------------------------------------------------------------------
# Ground truths of GSM8K test rows (integers, as the dataset builder extracts them), and a few other shapes.
GSM8K_TRUTHS = ["18", "3", "70000", "540", "20", "64", "260", "160", "45", "460", "366", "694", "13", "60", "125",
                "230", "57", "7", "6", "15", "14", "7425", "221", "0", "1", "1000", "1200", "25000", "8", "100"]
GSM8K_OTHER_TRUTHS = ["-5", "0.5", "12.50", "1,000", "007"]


def gsm8k_row(rng: random.Random, env_id: str) -> Dict[str, Any]:
    gt = rng.choice(GSM8K_TRUTHS) if rng.random() < 0.9 else rng.choice(GSM8K_OTHER_TRUTHS)
    row = {"data_source": "openai/gsm8k", "env_class": env_id,
           "prompt": prompt_of("Janet's ducks lay 16 eggs per day... Let's think step by step and output the "
                               "final answer after \"####\"."),
           "reward_spec": {"method": "rule", "ground_truth": gt},
           "extra_info": {"split": "test", "index": rng.randrange(1319)}}
    return row


def gsm8k_action(rng: random.Random, gt: str) -> tuple:
    """(tag, action) for one GSM8K-style reply."""
    variants = number_variants(rng, gt)
    kind = rng.choice(["answer"] * 6 + ["format", "multi", "boxed", "empty", "control", "long", "no_answer"])
    pre, post = rng.choice(FILLERS), rng.choice(["", "\n", ".", " dollars", "\n\nDone.", "</s>"])
    if kind == "answer":
        tag = rng.choice(list(variants))
        return f"answer/{tag}", f"{pre}#### {variants[tag]}{post}"
    if kind == "format":
        tag, text = rng.choice([("no_space", f"####{gt}"), ("two_spaces", f"####  {gt}"), ("tab", f"####\t{gt}"),
                                ("newline", f"####\n{gt}"), ("nbsp", f"####\u00a0{gt}"), ("three_hashes", f"### {gt}"),
                                ("five_hashes", f"##### {gt}"), ("dollar_inside", f"#### ${gt}"),
                                ("bold", f"**#### {gt}**"), ("answer_word", f"The answer is {gt}"),
                                ("hash_space_dot", f"#### .{gt}"), ("minus_zero", "#### -0"), ("only_hashes", "#### ")])
        return f"format/{tag}", f"{pre}{text}{post}"
    if kind == "multi":
        wrong = _shift(gt, rng.choice([-2, -1, 1, 7]))
        tag, text = rng.choice([("wrong_then_right", f"#### {wrong}\n#### {gt}"), ("right_then_wrong", f"#### {gt}\n#### {wrong}"),
                                ("joined", f"#### {gt}#### {wrong}"), ("same_twice", f"#### {gt} #### {gt}")])
        return f"multi/{tag}", pre + text + post
    if kind == "boxed":
        tag, text = rng.choice([("boxed", f"\\boxed{{{gt}}}"), ("hash_boxed", f"#### \\boxed{{{gt}}}"),
                                ("hash_then_boxed", f"#### {gt} \\boxed{{{gt}}}"), ("nested", f"\\boxed{{\\boxed{{{gt}}}}}"),
                                ("empty_box", "\\boxed{}")])
        return f"boxed/{tag}", pre + text + post
    if kind == "empty":
        return "empty/" + rng.choice(["empty", "space"]), rng.choice(["", " "])
    if kind == "control":
        ctrl = rng.choice(CONTROL)
        tag, text = rng.choice([("before", f"{ctrl}#### {gt}"), ("inside", f"####{ctrl}{gt}"), ("after", f"#### {gt}{ctrl}"),
                                ("between_digits", f"#### {gt[:1]}{ctrl}{gt[1:]}")])
        return f"control/{tag}", text
    if kind == "long":
        filler = long_filler(rng)
        wrong = _shift(gt, 3)
        tag, text = rng.choice([("answer_at_end", filler + f"\n#### {gt}"), ("answer_at_start", f"#### {gt}\n" + filler),
                                ("wrong_start_right_end", f"#### {wrong}\n" + filler + f"\n#### {gt}"),
                                ("right_start_wrong_end", f"#### {gt}\n" + filler + f"\n#### {wrong}"),
                                ("no_answer", filler)])
        return f"long/{tag}", text
    return "no_answer/" + rng.choice(["prose"]), f"{pre}I think it is around {gt} or so."


def gsm8k_case(rng: random.Random) -> Dict[str, Any]:
    row = gsm8k_row(rng, "gsm8k")
    tag, action = gsm8k_action(rng, row["reward_spec"]["ground_truth"])
    if rng.random() < 0.03:  # a numeric ground truth, as a JSON or Parquet row may carry it
        tag, row["reward_spec"]["ground_truth"] = "row/int_ground_truth", int(GSM8K_TRUTHS[rng.randrange(len(GSM8K_TRUTHS))])
        action = f"#### {row['reward_spec']['ground_truth']}"
    elif rng.random() < 0.01:
        tag, action = "action/non_string", rng.choice([None, 72, ["#### 72"]])
    return {"env": "gsm8k", "tag": tag, "extras": row, "actions": [action]}


def gsm8k_multi_turn_case(rng: random.Random) -> Dict[str, Any]:
    row = gsm8k_row(rng, "gsm8k_multi_turn")
    where = rng.choice(["row", "extra_info", "default"])
    limit = rng.choice([1, 2, 3, 5])
    if where == "row":
        row["max_turns"] = limit
    elif where == "extra_info":
        row["extra_info"]["max_turns"] = limit
    gt = row["reward_spec"]["ground_truth"]
    steps = [gsm8k_action(rng, gt) for _ in range(rng.randint(1, 6))]
    kinds = {step[0].split("/")[0] for step in steps}
    tag = f"seq/{'with' if 'long' in kinds else 'without'}_long_action"
    if rng.random() < 0.03 and "max_turns" not in row:
        del row["extra_info"]
        tag = "row/no_extra_info"
    return {"env": "gsm8k_multi_turn", "tag": tag, "extras": row, "actions": [a for _, a in steps]}


# --------------------------------------------------------------------------------------------------
# aime (AIME and MATH-500 answers, Minerva-normalised "Answer:" line)
# --------------------------------------------------------------------------------------------------
AIME_TRUTHS = ["204", "25", "116", "104", "809", "33", "80", "55", "23", "371", "0", "902", "\\frac{14}{3}",
               "\\dfrac{9}{7}", "3\\sqrt{13}", "p - q", "\\text{Evelyn}", "\\left( 3, \\frac{\\pi}{2} \\right)",
               "6 - 5i", "x^2+7x+10", "10\\%", "90^\\circ", "\\$18.90", "1,2", "\\infty", "-2", "0.5"]


def aime_answer(rng: random.Random, gt: str) -> tuple:
    variants = number_variants(rng, gt)
    variants.update({"boxed": f"\\boxed{{{gt}}}", "dollars": f"${gt}$", "text": f"\\text{{{gt}}}",
                     "spaces": f" {gt} ", "equation": f"x = {gt}", "units": f"{gt} degrees",
                     "frac_short": gt.replace("\\frac{14}{3}", "\\frac143"), "dfrac": gt.replace("\\dfrac", "\\frac"),
                     "nested_box": f"\\boxed{{\\boxed{{{gt}}}}}", "empty_box": "\\boxed{}", "unclosed_box": f"\\boxed{{{gt}",
                     "upper_text": gt.upper(), "overline": f"\\overline{{{gt}}}"})
    tag = rng.choice(list(variants))
    return tag, variants[tag]


def aime_case(rng: random.Random) -> Dict[str, Any]:
    gt = rng.choice(AIME_TRUTHS)
    row = {"data_source": "aime24", "env_class": "aime", "prompt": prompt_of("Find ... Put your final answer after 'Answer:'."),
           "reward_model": {"style": "rule", "ground_truth": gt}, "extra_info": {"index": rng.randrange(30)}}
    tag, answer = aime_answer(rng, gt)
    form = rng.choice(["Answer: {}", "answer:{}", "ANSWER :  {}", "Final Answer: {}", "Answer: {}\nmore text",
                       "Answer: {}<|im_end|>", "Answer: 1\nAnswer: {}", "Answer: {}\nAnswer: 1", "{}", "**Answer:** {}"])
    action = rng.choice(FILLERS) + form.format(answer)
    kind = form.split("{}")[0].strip() or "bare"
    extra = rng.random()
    if extra < 0.08:
        action, kind = action + "\n" + "x" * rng.choice([290, 310, 1000]), "pushed_out_of_300"
    elif extra < 0.12:
        action, kind = long_filler(rng) + "\n" + action, "long_prefix"
    elif extra < 0.16:
        action, kind = action.replace(" ", rng.choice(CONTROL)), "control"
    elif extra < 0.18:
        action, kind = "", "empty"
    elif extra < 0.20:
        row["reward_model"]["ground_truth"], action, kind = 204, "Answer: 204", "row_int_ground_truth"  # a JSON number
    return {"env": "aime", "tag": f"{kind}/{tag}", "extras": row, "actions": [action]}


# --------------------------------------------------------------------------------------------------
# search (Search-R1: exact match of the last <answer>)
# --------------------------------------------------------------------------------------------------
SEARCH_TARGETS = [["William Shakespeare", "Shakespeare"], ["Paris"], ["1969"], ["the Beatles"], ["Mount Everest", "Everest"],
                  ["George Washington"], ["H2O", "water"], ["New York City", "NYC"], ["J. K. Rowling", "JK Rowling"],
                  ["Leonardo da Vinci"], ["an apple"], ["3.14"], ["Rock 'n' roll"], ["São Paulo"], ["100,000"]]


def search_answer(rng: random.Random, targets: List[str]) -> tuple:
    gt = rng.choice(targets)
    variants = {"exact": gt, "lower": gt.lower(), "upper": gt.upper(), "the_prefix": "The " + gt, "a_prefix": "a " + gt,
                "punct": gt + ".", "quotes": f'"{gt}"', "spaces": f"  {gt}\n", "inner_spaces": gt.replace(" ", "   "),
                "wrong": "Napoleon", "partial": gt.split()[0] + " X", "superset": gt + " and others", "empty": "",
                "unicode_nbsp": gt.replace(" ", "\u00a0"), "accent_stripped": gt.replace("ã", "a"),
                "fullwidth": gt.translate(UNICODE_DIGITS[0]), "control": gt + rng.choice(CONTROL),
                "hyphen": gt.replace(" ", "-"), "no_dots": gt.replace(".", "")}
    tag = rng.choice(list(variants))
    return tag, variants[tag]


def search_case(rng: random.Random) -> Dict[str, Any]:
    targets = rng.choice(SEARCH_TARGETS)
    row = {"data_source": "searchR1_nq", "env_class": "search",
           "prompt": [{"role": "system", "content": "You are a helpful and harmless assistant."},
                      {"role": "user", "content": "Answer the given question. ... Question: who wrote hamlet?"}],
           "reward_spec": {"method": "rule", "ground_truth": {"target": targets}}, "max_turns": rng.choice([1, 2, 2, 3])}
    tag, answer = search_answer(rng, targets)
    form = rng.choice(["<answer>{}</answer>", "<think>ok</think><answer>{}</answer>", "<answer> {} </answer>",
                       "<answer>wrong</answer><answer>{}</answer>", "<answer>{}</answer><answer>wrong</answer>",
                       "<answer><answer>{}</answer>", "<answer>{}</answer></answer>", "<ANSWER>{}</ANSWER>",
                       "<answer>{}", "{}</answer>", "<answer>\n{}\n</answer>", "<answer>{}</answer >", "{}"])
    final = form.format(answer)
    shape = rng.random()
    config = {"search_url": "{SEARCH_URL}", "topk": 3, "timeout": 10, "log_requests": False}
    if shape < 0.55:
        actions, kind = [final], "single"
    elif shape < 0.8:
        query = rng.choice(["who wrote hamlet", "capital of france", "  spaced query  ", "", "NOTHING here"])
        actions, kind = [f"<think>search</think><search>{query}</search>", final], "search_then_answer"
    elif shape < 0.9:
        actions, kind = [f"<search>LEAK: {answer}</search>", "I am done."], "answer_from_retrieved_passage"
    elif shape < 0.95:
        actions, kind = ["no tags at all", final], "no_tool_call_then_answer"
    else:
        actions, kind = [long_filler(rng) + final], "long"
    odd = rng.random()
    if odd < 0.02:
        row["max_turns"], kind = 0, "row_max_turns_0"
    elif odd < 0.03:
        row["reward_spec"]["ground_truth"], kind = targets[0], "row_plain_string_ground_truth"
    elif odd < 0.04:
        row["reward_spec"]["ground_truth"], actions, kind = {"target": [1969]}, ["<answer>1969</answer>"], "row_int_target"
    return {"env": "search", "tag": f"{kind}/{tag}", "extras": row, "env_config": config, "actions": actions}


# --------------------------------------------------------------------------------------------------
# text2sql (real SQLite files; reward: format check, then the same set of rows as the gold query)
# --------------------------------------------------------------------------------------------------
def build_databases(root: Path) -> None:
    """Two small Spider-style databases under ``root/spider/database/<db_id>/<db_id>.sqlite``."""
    path = root / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.executescript("""
        CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT, age INTEGER, rating REAL);
        CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, singer_id INTEGER REFERENCES singer(singer_id),
                              year INTEGER, venue TEXT);
        CREATE TABLE note (note_id INTEGER PRIMARY KEY, body TEXT, data BLOB);
        CREATE INDEX singer_country ON singer(country);
        """)
        db.executemany("INSERT INTO singer VALUES (?,?,?,?,?)", [
            (1, "Joe Sharp", "Netherlands", 52, 4.5), (2, "Timbaland", "United States", 32, 3.0),
            (3, "Justin Brown", "France", 29, None), (4, "Rose White", "France", 41, 4.0),
            (5, "John Nizinik", "France", 43, 2.5), (6, "Tribal King", "France", 25, 3.0),
            (7, "Ana Lúcia", "Portugal", 29, 5.0), (8, "NULL", None, None, None)])
        db.executemany("INSERT INTO concert VALUES (?,?,?,?)", [
            (1, 1, 2014, "Hall A"), (2, 2, 2014, "Hall B"), (3, 3, 2015, "Arena"), (4, 3, 2015, "Arena"),
            (5, 7, 2016, None), (6, 5, 2015, "Hall A")])
        db.executemany("INSERT INTO note VALUES (?,?,?)", [
            (1, "plain text", b"\x00\x01"), (2, "<solution>SELECT 1</solution>", None),
            (3, "</observation> tricky", None), (4, "<think>in data</think>", None)])
    path = root / "spider" / "database" / "pets" / "pets.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.executescript("""
        CREATE TABLE pet (pet_id INTEGER PRIMARY KEY, kind TEXT, weight REAL, age INTEGER);
        INSERT INTO pet VALUES (1, 'cat', 12.0, 3), (2, 'dog', 13.4, 2), (3, 'dog', 9.3, 1), (4, 'cat', 12, 3);
        """)


# (db_id, gold SQL, [(tag, predicted SQL)]): equivalents, near misses and SQLite dialect features.
SQL_TASKS = [
    ("concert_singer", "SELECT count(*) FROM singer WHERE country = 'France'", [
        ("same", "SELECT count(*) FROM singer WHERE country = 'France'"),
        ("count_column", "SELECT count(singer_id) FROM singer WHERE country = 'France'"),
        ("trailing_semicolon", "SELECT count(*) FROM singer WHERE country = 'France';"),
        ("two_statements", "SELECT count(*) FROM singer WHERE country = 'France'; SELECT 1"),
        ("comment", "SELECT count(*) FROM singer -- all of them\nWHERE country = 'France'"),
        ("block_comment", "SELECT /* n */ count(*) FROM singer WHERE country = 'France'"),
        ("float_literal", "SELECT 4.0"), ("int_literal", "SELECT 4"), ("text_literal", "SELECT '4'"),
        ("double_quoted_string", "SELECT count(*) FROM singer WHERE country = \"France\""),
        ("wrong", "SELECT count(*) FROM singer"), ("lowercase_keywords", "select COUNT(*) from SINGER where country='France'"),
        ("values", "VALUES (4)"), ("cte", "WITH f AS (SELECT * FROM singer WHERE country = 'France') SELECT count(*) FROM f"),
        ("iif", "SELECT sum(iif(country = 'France', 1, 0)) FROM singer"),
        ("indexed_by", "SELECT count(*) FROM singer INDEXED BY singer_country WHERE country = 'France'"),
        ("glob", "SELECT count(*) FROM singer WHERE country GLOB 'Fr*'"),
        ("brackets", "SELECT count(*) FROM [singer] WHERE [country] = 'France'"),
        ("backticks", "SELECT count(*) FROM `singer` WHERE `country` = 'France'"),
        ("pragma", "PRAGMA table_info(singer)"), ("explain", "EXPLAIN SELECT 1"),
        ("syntax_error", "SELEC count(*) FROM singer"), ("no_table", "SELECT count(*) FROM singers"),
        ("empty", ""), ("whitespace", "  \n "),
        ("long_query", "SELECT count(*) FROM singer WHERE country = 'France'" + " AND 1=1" * 13000)]),
    ("concert_singer", "SELECT name, age FROM singer WHERE country = 'France' ORDER BY age DESC", [
        ("same", "SELECT name, age FROM singer WHERE country = 'France' ORDER BY age DESC"),
        ("other_order", "SELECT name, age FROM singer WHERE country = 'France' ORDER BY age ASC"),
        ("swapped_columns", "SELECT age, name FROM singer WHERE country = 'France'"),
        ("alias", "SELECT T1.name AS n, T1.age FROM singer AS T1 WHERE T1.country = 'France'"),
        ("limit", "SELECT name, age FROM singer WHERE country = 'France' LIMIT 2"),
        ("limit_offset_comma", "SELECT name, age FROM singer WHERE country = 'France' LIMIT 0, 10"),
        ("union", "SELECT name, age FROM singer WHERE country = 'France' UNION SELECT name, age FROM singer WHERE 0"),
        ("concat", "SELECT name || '', age FROM singer WHERE country = 'France'"),
        ("collate", "SELECT name, age FROM singer WHERE country = 'france' COLLATE NOCASE"),
        ("window", "SELECT name, age FROM (SELECT name, age, row_number() OVER (ORDER BY age) r FROM singer WHERE country='France')"),
        ("delete", "DELETE FROM singer WHERE 0"), ("insert", "INSERT INTO singer(name) VALUES ('x')")]),
    ("concert_singer", "SELECT T2.name FROM concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id WHERE T1.year = 2015", [
        ("same", "SELECT T2.name FROM concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id WHERE T1.year = 2015"),
        ("distinct", "SELECT DISTINCT s.name FROM concert c JOIN singer s USING (singer_id) WHERE c.year = 2015"),
        ("natural_join", "SELECT name FROM concert NATURAL JOIN singer WHERE year = 2015"),
        ("subquery", "SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM concert WHERE year = 2015)"),
        ("string_year", "SELECT T2.name FROM concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id WHERE T1.year = '2015'"),
        ("wrong_year", "SELECT T2.name FROM concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id WHERE T1.year = 2014"),
        ("update", "UPDATE singer SET age = 1 WHERE 0")]),
    ("concert_singer", "SELECT name FROM singer WHERE country = 'Atlantis'", [  # a gold query with no rows
        ("same", "SELECT name FROM singer WHERE country = 'Atlantis'"), ("where_false", "SELECT name FROM singer WHERE 0"),
        ("delete", "DELETE FROM singer WHERE country = 'Atlantis'"), ("create", "CREATE TABLE t (x)"),
        ("pragma_set", "PRAGMA user_version = 5"), ("attach", "ATTACH DATABASE ':memory:' AS x"),
        ("select_null", "SELECT NULL WHERE 0"), ("begin", "BEGIN"), ("vacuum", "VACUUM")]),
    ("concert_singer", "SELECT avg(rating) FROM singer", [
        ("same", "SELECT avg(rating) FROM singer"), ("sum_div", "SELECT sum(rating) / count(rating) FROM singer"),
        ("round", "SELECT round(avg(rating), 2) FROM singer"), ("literal", "SELECT 3.6666666666666665"),
        ("cast_text", "SELECT CAST(avg(rating) AS TEXT) FROM singer"), ("printf", "SELECT printf('%.2f', avg(rating)) FROM singer")]),
    ("concert_singer", "SELECT body FROM note WHERE note_id = 1", [
        ("same", "SELECT body FROM note WHERE note_id = 1"), ("blob", "SELECT data FROM note WHERE note_id = 1"),
        ("json", "SELECT json_extract('{\"a\": \"plain text\"}', '$.a')"), ("arrow_json", "SELECT '{\"a\": \"plain text\"}' ->> '$.a'"),
        ("replace_fn", "SELECT replace('plain_text', '_', ' ')"), ("hex", "SELECT hex(data) FROM note WHERE note_id = 1")]),
    ("pets", "SELECT kind, max(weight) FROM pet GROUP BY kind", [
        ("same", "SELECT kind, max(weight) FROM pet GROUP BY kind"), ("having", "SELECT kind, max(weight) FROM pet GROUP BY kind HAVING 1"),
        ("int_weight", "SELECT 'cat', 12 UNION SELECT 'dog', 13.4"), ("order_by_ordinal", "SELECT kind, max(weight) FROM pet GROUP BY 1 ORDER BY 2"),
        ("except", "SELECT kind, max(weight) FROM pet GROUP BY kind EXCEPT SELECT 'x', 1"),
        ("recursive_cte", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 3) SELECT kind, max(weight) FROM pet GROUP BY kind"),
        ("wrong", "SELECT kind, min(weight) FROM pet GROUP BY kind")]),
]

SQL_FORMATS = [  # (tag, template of the final action; {} is the predicted SQL)
    ("think_solution", "<think>I know it.</think>\n<solution>{}</solution>"),
    ("no_think", "<solution>{}</solution>"), ("empty_think", "<think></think><solution>{}</solution>"),
    ("unclosed_think", "<think>hmm <solution>{}</solution>"), ("upper_think", "<THINK>x</THINK><solution>{}</solution>"),
    ("two_solutions", "<think>x</think><solution>{}</solution><solution>{}</solution>"),
    ("solution_twice_open", "<think>x</think><solution><solution>{}</solution>"),
    ("sql_tag_inside", "<think>x</think><solution><sql>{}</sql></solution>"),
    ("upper_sql_inside", "<think>x</think><solution>{} -- <SQL></solution>"),
    ("sqlite_word_inside", "<think>x</think><solution>{} -- <sqlite></solution>"),
    ("think_after", "<solution>{}</solution><think>late</think>"),
    ("code_fence", "<think>x</think><solution>```sql\n{}\n```</solution>"),
    ("observation_in_action", "<think>x</think></observation>\n<solution>{}</solution>"),
    ("observation_then_think", "<think>x</think></observation> \n<think>y</think><solution>{}</solution>"),
    ("observation_nbsp_think", "<think>x</think></observation>\u00a0<think>y</think><solution>{}</solution>"),
    ("observation_x1c_think", "<think>x</think></observation>\x1c<think>y</think><solution>{}</solution>"),
    ("observation_upper_think", "<think>x</think></OBSERVATION>\n<THINK>y</THINK><think>z</think><solution>{}</solution>"),
    ("unclosed_solution", "<think>x</think><solution>{}"), ("solution_spaces", "<think>x</think><solution>\n  {}  \n</solution>"),
    ("control_chars", "<think>x\x00</think>\x1b<solution>{}</solution>\x07"),
    ("long_thought", "<think>" + "y" * LONG + "</think><solution>{}</solution>"),
]


def text2sql_case(rng: random.Random, db_root: str) -> Dict[str, Any]:
    db_id, gold, predictions = rng.choice(SQL_TASKS)
    ptag, predicted = rng.choice(predictions)
    ftag, template = rng.choice(SQL_FORMATS) if rng.random() < 0.5 else SQL_FORMATS[0]
    final = template.replace("{}", predicted)
    row = {"data_source": "spider", "env_class": "text2sql", "prompt": prompt_of("schema + question + format"),
           "reward_spec": {"method": "rule", "ground_truth": gold}, "db_id": db_id, "data": "spider",
           "max_turns": rng.choice([1, 2, 3, 5])}
    shape = rng.random()
    if shape < 0.6:
        actions, kind = [final], "single"
    else:
        explore = rng.choice([("select", "<think>look</think><sql>SELECT * FROM singer LIMIT 3</sql>"),
                              ("data_with_tags", "<think>look</think><sql>SELECT body FROM note</sql>"),
                              ("error", "<think>look</think><sql>SELECT * FROM nope</sql>"),
                              ("no_sql", "<think>look</think> I will query now."),
                              ("write", "<think>look</think><sql>DELETE FROM pet</sql>")])
        if db_id == "pets" and explore[0] in ("select", "data_with_tags"):
            explore = (explore[0], explore[1].replace("singer", "pet").replace("body FROM note", "kind FROM pet"))
        actions, kind = [explore[1], final], "explore_" + explore[0]
    if rng.random() < 0.02:
        row["max_turns"], actions, kind = 0, actions[:1] + [SQL_FORMATS[0][1].replace("{}", gold)], "row_max_turns_0"
    return {"env": "text2sql", "tag": f"{kind}/{ftag}/{ptag}", "extras": row, "env_config": {"db_path": db_root},
            "actions": actions}


# --------------------------------------------------------------------------------------------------
# searchcode (gsm8k scoring of the whole conversation; Python tool turns; no search: 0.4.0's ignores env_config)
# --------------------------------------------------------------------------------------------------
def searchcode_case(rng: random.Random) -> Dict[str, Any]:
    gt = rng.choice(["51", "8849", "1000", "42", "-7"])
    row = {"data_source": "searchcode_demo", "env_class": "searchcode", "prompt": prompt_of("What is 17 * 3? ..."),
           "reward_spec": {"method": "rule", "ground_truth": gt}, "max_turns": rng.choice([1, 2, 3])}
    tag, answer = gsm8k_action(rng, gt)
    final = rng.choice(["<solution>{}</solution>", "{}", "<solution>{}"]).format(answer)
    shape = rng.random()
    if shape < 0.5:
        actions, kind = [final], "single"
    else:
        code_tag, code = rng.choice([
            ("prints_answer", f"print('#### {gt}')"), ("prints_other", "print(17 * 3 + 1)"),
            ("stdout_and_stderr", f"import sys\nprint('#### {gt}')\nprint('warn', file=sys.stderr)"),
            ("raises", "raise ValueError('boom')"), ("no_output", "x = 1"), ("prints_padded", f"print('  #### {gt}  ')")])
        call = rng.choice(["<tool><python>{}</python></tool>", "<tool>\n<python>\n{}\n</python>\n</tool>", "<python>{}</python>",
                           "<tool><unknown>{}</unknown></tool>"]).format(code)
        actions, kind = [call, rng.choice(["<solution>done</solution>", final])], "python_" + code_tag
    return {"env": "searchcode", "tag": f"{kind}/{tag.split('/')[0]}", "extras": row,
            "env_config": {"python_timeout": 10}, "actions": actions}


# --------------------------------------------------------------------------------------------------
# lcb (code run against tests; 1.0 when all pass)
# --------------------------------------------------------------------------------------------------
LCB_STDIN_TESTS = [{"input": "3\n1 2 3\n", "output": "6\n", "testtype": "stdin"},
                   {"input": "2\n10 -4\n", "output": "6\n", "testtype": "stdin"}]
LCB_FUNC_TESTS = [{"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]", "testtype": "functional", "metadata": {"func_name": "twoSum"}},
                  {"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional", "metadata": {"func_name": "twoSum"}}]
LCB_STDIN_CODES = [
    ("correct", "n = int(input())\nprint(sum(map(int, input().split())))"),
    ("correct_sys", "import sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])))"),
    ("main_guard", "def main():\n    n = int(input())\n    print(sum(map(int, input().split())))\nif __name__ == '__main__':\n    main()"),
    ("float_output", "n = int(input())\nprint(float(sum(map(int, input().split()))))"),
    ("trailing_spaces", "n = int(input())\nprint(str(sum(map(int, input().split()))) + '   ')"),
    ("extra_blank_line", "n = int(input())\nprint(sum(map(int, input().split())))\nprint()"),
    ("wrong", "n = int(input())\nprint(n)"), ("raises", "raise SystemExit(1)"),
    ("exit_early", "import sys\nn = int(input())\nprint(sum(map(int, input().split())))\nsys.exit(0)"),
    ("base_imports", "n = int(input())\nprint(reduce(lambda a, b: a + b, map(int, input().split())))"),
    ("syntax_error", "print(")]
LCB_FUNC_CODES = [
    ("correct", "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        seen = {}\n"
                "        for i, x in enumerate(nums):\n            if target - x in seen:\n                return [seen[target - x], i]\n"
                "            seen[x] = i"),
    ("tuple_result", "class Solution:\n    def twoSum(self, nums, target):\n        for i in range(len(nums)):\n"
                     "            for j in range(i + 1, len(nums)):\n                if nums[i] + nums[j] == target:\n"
                     "                    return (i, j)"),
    ("wrong", "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 0]"),
    ("bare_function", "def twoSum(nums, target):\n    return [0, 1]")]


def lcb_case(rng: random.Random) -> Dict[str, Any]:
    functional = rng.random() < 0.4
    tests = LCB_FUNC_TESTS if functional else LCB_STDIN_TESTS
    ctag, code = rng.choice(LCB_FUNC_CODES if functional else LCB_STDIN_CODES)
    ftag, fence = rng.choice([("python", "```python\n{}\n```"), ("py", "```py\n{}\n```"), ("bare", "```\n{}\n```"),
                              ("no_newline", "```python {}\n```"), ("two_blocks", "```python\nprint(0)\n```\n```python\n{}\n```"),
                              ("unclosed", "```python\n{}"), ("no_fence", "{}"), ("prose_after", "```python\n{}\n```\nThis works.")])
    row = {"data_source": "livecodebench", "env_class": "lcb", "prompt": prompt_of("Solve ... Answer in one ```python block."),
           "reward_spec": {"method": "rule", "ground_truth": json.dumps(tests)}, "extra_info": {"question_id": "q"}}
    return {"env": "lcb", "tag": f"{'functional' if functional else 'stdin'}/{ftag}/{ctag}", "extras": row,
            "actions": [fence.format(code)]}


# --------------------------------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------------------------------
def build_cases(total: int, seed: int, only: List[str], db_root: str) -> List[Dict[str, Any]]:
    makers: Dict[str, Callable[[random.Random], Dict[str, Any]]] = {
        "gsm8k": gsm8k_case, "gsm8k_multi_turn": gsm8k_multi_turn_case, "aime": aime_case, "search": search_case,
        "text2sql": lambda rng: text2sql_case(rng, db_root), "searchcode": searchcode_case, "lcb": lcb_case}
    cases = []
    for env_id in only:
        rng = random.Random(f"{seed}/{env_id}")  # each env its own stream: --only does not change the cases
        for index in range(max(1, total // SHARE.get(env_id, 1))):
            case = makers[env_id](rng)
            case["id"] = f"{env_id}#{index}"
            cases.append(case)
    return cases


def run_side(python: Path, side: str, cases_file: Path, out_dir: Path) -> tuple:
    results_file = out_dir / f"results-{side}.jsonl"
    start = time.perf_counter()
    done = subprocess.run([str(python), "-c", WORKER, str(cases_file), str(results_file)], env=_env(side), cwd="/",
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the {side} worker failed (exit {done.returncode}); results so far in {results_file}")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    with open(results_file) as handle:
        return [json.loads(line) for line in handle], info["file"], time.perf_counter() - start


def outcome(result: Dict[str, Any]) -> Any:
    """What is compared: (reward, done) of each step, and where it raised (not the exception's type or message)."""
    return [(step[0], step[1]) for step in result["steps"]], result["error"] and result["error"].split(":")[0]


def short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 40] + f"... ({len(text)} chars) ..." + text[-30:]


def describe(case: Dict[str, Any], ours: Dict[str, Any], theirs: Dict[str, Any]) -> Dict[str, Any]:
    spec = case["extras"].get("reward_spec") or case["extras"].get("reward_model")
    return {"id": case["id"], "tag": case["tag"], "ground_truth": spec.get("ground_truth"),
            "row_max_turns": case["extras"].get("max_turns"), "actions": [short(a, 300) for a in case["actions"]],
            "ours": {"steps": [s[:2] for s in ours["steps"]], "error": ours["error"]},
            "theirs": {"steps": [s[:2] for s in theirs["steps"]], "error": theirs["error"]},
            "obs_ours": [short(s[2], 300) for s in ours["steps"]], "obs_theirs": [short(s[2], 300) for s in theirs["steps"]]}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=3000, help="cases per cheap env (costly envs get a share)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=",".join(ENV_IDS), help="comma-separated env ids (default: all shared ids)")
    parser.add_argument("--json", type=Path, help="write every difference (and the counts) to this JSON file")
    args = parser.parse_args(argv)
    only = [env_id.strip() for env_id in args.only.split(",") if env_id.strip()]
    unknown = sorted(set(only) - set(ENV_IDS))
    if unknown:
        parser.error(f"not an env id of both packages: {', '.join(unknown)} (choose from {', '.join(ENV_IDS)})")

    sides = {"ours": Path(sys.executable), "theirs": theirs_python()}
    with tempfile.TemporaryDirectory(prefix="reward-parity-") as tmp:
        work = Path(tmp)
        build_databases(work / "sql")
        cases = build_cases(args.cases, args.seed, only, str(work / "sql"))
        cases_file = work / "cases.jsonl"
        cases_file.write_text("".join(json.dumps(case) + "\n" for case in cases))
        results, files = {}, {}
        for side, python in sides.items():
            results[side], files[side], seconds = run_side(python, side, cases_file, work)
            print(f"{side}: {len(cases)} cases in {seconds:.0f} s ({files[side]})", flush=True)

    summary: Dict[str, Dict[str, Any]] = {}
    for case, ours, theirs in zip(cases, results["ours"], results["theirs"]):
        entry = summary.setdefault(case["env"], {"cases": 0, "equal": 0, "different": 0, "obs_different": 0,
                                                 "by_tag": collections.Counter(), "differences": [], "obs_examples": []})
        entry["cases"] += 1
        if outcome(ours) == outcome(theirs):
            entry["equal"] += 1
            if [s[2] for s in ours["steps"]] != [s[2] for s in theirs["steps"]]:
                entry["obs_different"] += 1
                entry["obs_examples"].append(describe(case, ours, theirs))
        else:
            entry["different"] += 1
            entry["by_tag"][case["tag"]] += 1
            entry["differences"].append(describe(case, ours, theirs))

    print(f"\nseed {args.seed}, --cases {args.cases}; reward/done compared per step; 'obs': cases with equal "
          f"rewards whose observations differ (some are reworded on purpose)\n")
    print(f"{'env id':18}{'cases':>7}{'equal':>7}{'different':>11}{'obs':>6}")
    for env_id in only:
        entry = summary.get(env_id, {"cases": 0, "equal": 0, "different": 0, "obs_different": 0})
        print(f"{env_id:18}{entry['cases']:7}{entry['equal']:7}{entry['different']:11}{entry['obs_different']:6}")
    for env_id in only:
        entry = summary.get(env_id)
        if not entry or not (entry["different"] or entry["obs_different"]):
            continue
        print(f"\n== {env_id}: {entry['different']} different")
        for tag, count in entry["by_tag"].most_common():
            print(f"   {count:5}  {tag}")
        for example in entry["differences"][:5] + entry["obs_examples"][: max(0, 5 - len(entry["differences"]))]:
            print(f" - {example['id']} [{example['tag']}] ground truth {short(example['ground_truth'], 80)}, "
                  f"row max_turns {example['row_max_turns']}")
            for action in example["actions"]:
                print(f"     action: {action}")
            print(f"     ours:   {example['ours']}")
            print(f"     theirs: {example['theirs']}")
            if example["obs_ours"] != example["obs_theirs"]:
                print(f"     obs ours:   {example['obs_ours']}")
                print(f"     obs theirs: {example['obs_theirs']}")
    if args.json:
        for entry in summary.values():
            entry["by_tag"] = dict(entry["by_tag"])
        args.json.write_text(json.dumps({"seed": args.seed, "cases": args.cases, "files": files, "envs": summary}, indent=1))
        print(f"\ndifferences written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
