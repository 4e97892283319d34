"""Dataset rows for ``text2sql``: the prompt, and a reader for the public Spider/BIRD/SynSQL layouts.

A row (the shape SkyRL-gym's text2sql datasets use)::

    {"data_source": "spider", "env_class": "text2sql",
     "prompt": [{"role": "system", ...}, {"role": "user", "content": "<schema + question + format>"}],
     "reward_spec": {"method": "rule", "ground_truth": "SELECT ..."},
     "db_id": "concert_singer", "data": "spider", "extra_info": {...}}

Questions files per layout (under ``db_path``):

* spider: ``spider/train_spider.json`` / ``spider/dev.json`` (``db_id``, ``question``, ``query``)
* bird: ``bird/train/train.json`` (``db_id``, ``question``, ``SQL``, ``evidence``)
* synsql: ``SynSQL-2.5M/data.json`` (``db_id``, ``question``, ``sql``, ``external_knowledge``)
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, List, Optional

from skyrl_gym.envs.sql.databases import DATASET_DB_FOLDERS, schema_ddl

SYSTEM_PROMPT = "You are a data science expert who answers questions by writing SQLite queries."

USER_PROMPT_TEMPLATE = """Below are a database schema and a question. Write one SQL query that answers the question, within a limited number of turns. Break the problem down, reason step by step, and explore the database when you need to.

Database Engine:
SQLite

Database Schema:
{schema}

External Knowledge:
{external_knowledge}

Question:
{question}

Instructions:
- Return exactly the information the question asks for: no missing and no extra columns.
- Think before you write the final query: analyse the question, check what you found, fix mistakes.

Format:
- Reason inside <think>...</think> every time you receive new information.
- To explore or check something, run one query inside <sql>your query</sql>; its result comes back as a table inside <observation>...</observation>. Long results are cut to the first 50 rows.
- The database is read-only: only SELECT queries run.
- When you are done, or when you are out of turns, give the final SQL query inside <solution>...</solution>.

Example:
<think>I need the number of customers per city.</think>
<sql>SELECT city, COUNT(*) FROM customers GROUP BY city LIMIT 5;</sql>
<observation>...</observation>
<think>The table has what I need.</think>
<solution>SELECT city, COUNT(*) FROM customers GROUP BY city;</solution>
"""

# Where each layout keeps its questions, relative to db_path, by split.
QUESTION_FILES: Dict[str, Dict[str, str]] = {
    "spider": {"train": os.path.join("spider", "train_spider.json"), "dev": os.path.join("spider", "dev.json")},
    "bird": {"train": os.path.join("bird", "train", "train.json"), "dev": os.path.join("bird", "dev", "dev.json")},
    "synsql": {"train": os.path.join("SynSQL-2.5M", "data.json")},
}
_GOLD_KEYS = ("query", "SQL", "sql")
_KNOWLEDGE_KEYS = ("evidence", "external_knowledge")


def build_prompt(schema: str, question: str, external_knowledge: str = "") -> List[Dict[str, str]]:
    user = USER_PROMPT_TEMPLATE.format(schema=schema, question=question, external_knowledge=external_knowledge or "None")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def make_row(
    question: str,
    gold_sql: str,
    schema: str,
    *,
    db_id: str,
    data: Optional[str] = None,
    db_file: Optional[str] = None,
    external_knowledge: str = "",
    data_source: Optional[str] = None,
    max_turns: int = 5,
    index: int = 0,
) -> Dict[str, Any]:
    """One text2sql row; give ``data`` (a public layout) or ``db_file`` (a path)."""
    row: Dict[str, Any] = {
        "data_source": data_source or data or "text2sql",
        "prompt": build_prompt(schema, question, external_knowledge),
        "env_class": "text2sql",
        "reward_spec": {"method": "rule", "ground_truth": gold_sql},
        "db_id": db_id,
        "max_turns": max_turns,
        "extra_info": {"index": index, "question": question},
    }
    if data is not None:
        row["data"] = data
    if db_file is not None:
        row["db_file"] = db_file
    return row


def load_public_rows(db_path: str, data: str, split: str = "train", limit: Optional[int] = None, max_turns: int = 5) -> Iterator[Dict[str, Any]]:
    """Rows for a public dataset unpacked under ``db_path`` in its usual layout.

    Questions whose database file is missing are skipped; the count of skipped ones is not an
    error because the public archives ship a few questions over absent databases.
    """
    if data not in QUESTION_FILES:
        raise ValueError(f"unknown dataset {data!r}; expected one of {sorted(QUESTION_FILES)}")
    if split not in QUESTION_FILES[data]:
        raise ValueError(f"dataset {data!r} has no {split!r} split; it has {sorted(QUESTION_FILES[data])}")
    questions_file = os.path.join(db_path, QUESTION_FILES[data][split])
    if not os.path.isfile(questions_file):
        raise FileNotFoundError(f"{data} questions not found at {questions_file}")
    with open(questions_file, encoding="utf-8") as handle:
        records = json.load(handle)
    schemas: Dict[str, str] = {}
    produced = 0
    for index, record in enumerate(records):
        if limit is not None and produced >= limit:
            return
        db_id = record.get("db_id")
        gold = next((record[k] for k in _GOLD_KEYS if isinstance(record.get(k), str)), None)
        if not db_id or gold is None or not record.get("question"):
            continue
        db_file = os.path.join(db_path, DATASET_DB_FOLDERS[data], db_id, f"{db_id}.sqlite")
        if db_id not in schemas:
            schemas[db_id] = schema_ddl(db_file) if os.path.isfile(db_file) else ""
        if not schemas[db_id]:
            continue
        knowledge = next((record[k] for k in _KNOWLEDGE_KEYS if record.get(k)), "")
        yield make_row(
            record["question"], gold, schemas[db_id], db_id=db_id, data=data,
            external_knowledge=knowledge, max_turns=max_turns, index=index,
        )
        produced += 1


def build_rows(split: str, size: Optional[int], seed: int, db_path: Optional[str] = None, data: Optional[str] = None,
               max_turns: int = 5) -> Iterator[Dict[str, Any]]:
    """The ``text2sql`` dataset builder: a public dataset (``data``: spider, bird, synsql) unpacked under
    ``db_path``, in the published order (the seed does not change the rows)."""
    if not db_path or not data:
        raise ValueError("text2sql rows come from a public dataset on disk: "
                         f"build_rows('text2sql', db_path=FOLDER, data=one of {sorted(QUESTION_FILES)})")
    return load_public_rows(db_path, data, split=split, limit=size, max_turns=max_turns)
