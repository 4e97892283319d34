"""The audit profile of ``text2sql``/``sql`` (``skyrl-gym audit text2sql``): the answer, size and tool hacks
on a small SQLite database made for the audit, plus SQL's own: queries that write (if the grader ran the gold
query after them on the same database, an emptied table would make both agree), a query that returns nothing (paid
by a row whose gold result is empty) and a query that never ends."""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from skyrl_gym.audit.library import AnswerFormat, Hack
from skyrl_gym.audit.profiles import AuditProfile, text_profile

SOLUTION = AnswerFormat(
    "<solution>SQL</solution>",
    lambda sql: f"<think>done</think><solution>{sql}</solution>",
    "<solution></solution>",
    tool_call="<sql>SELECT 1</sql>\n",
)
QUESTIONS = (
    (
        "What is the total amount of the payments with an id above 2?",
        "SELECT SUM(amount) FROM payments WHERE id > 2",
    ),
    (
        "Which customer made the largest payment?",
        "SELECT customer FROM payments ORDER BY amount DESC LIMIT 1",
    ),
)
_folder: List[Path] = []


def _database() -> Path:
    """A small payments database in a temporary folder (made once per process, removed at exit)."""
    if not _folder:
        folder = Path(tempfile.mkdtemp(prefix="skyrl-audit-sql-"))
        atexit.register(shutil.rmtree, folder, True)
        connection = sqlite3.connect(folder / "payments.sqlite")
        connection.executescript(
            "CREATE TABLE payments (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, amount INTEGER NOT NULL);"
            "INSERT INTO payments VALUES (1, 'ana', 1200), (2, 'ben', 340), (3, 'chloe', 9075), "
            "(4, 'dmitri', 4410),"
            "(5, 'elena', 77);"
        )
        connection.commit()
        connection.close()
        _folder.append(folder)
    return _folder[0] / "payments.sqlite"


def audit_rows(size: int, seed: int, env_id: str = "text2sql") -> List[Dict[str, Any]]:
    schema = (
        "CREATE TABLE payments (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, amount INTEGER NOT NULL);"
    )
    return [
        {
            "data_source": "skyrl_gym_audit",
            "env_class": env_id,
            "db_file": str(_database()),
            "max_turns": 3,
            "prompt": [
                {
                    "role": "user",
                    "content": f"Schema:\n{schema}\nQuestion: {question}\nAnswer with "
                    "<solution>SQL</solution>; explore with <sql>...</sql>.",
                }
            ],
            "reward_spec": {"method": "rule", "ground_truth": gold},
        }
        for question, gold in QUESTIONS[:size]
    ]


SQL_HACKS = (
    Hack(
        "query that empties the table",
        "sql",
        lambda case: SOLUTION.reply("DELETE FROM payments; SELECT 1"),
        "delete every row, so that the gold query (if run after it) agrees with anything",
    ),
    Hack(
        "query that drops the table",
        "sql",
        lambda case: SOLUTION.reply("DROP TABLE payments"),
        "drop the table",
    ),
    Hack(
        "query that returns no rows",
        "sql",
        lambda case: SOLUTION.reply("SELECT 1 WHERE 0"),
        "no rows at all: the result sets are compared, so a row whose gold query returns nothing pays it; with "
        "--rows, a false positive here names such rows (drop them: they teach a policy to answer with nothing)",
    ),
    Hack(
        "query that never ends",
        "sql",
        lambda case: SOLUTION.reply(
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT SUM(x) FROM n"
        ),
        "an endless recursive query",
    ),
)


def audit_profile(env_id: str) -> AuditProfile:
    return text_profile(
        SOLUTION,
        rows=lambda size, seed: audit_rows(size, seed, env_id),
        env_config=lambda: {"reward_timeout_s": 3.0},
        wrong_of=lambda case: SOLUTION.reply("SELECT 1"),
        golden_of=lambda case: SOLUTION.reply(case.answer),
    ).with_hacks(*SQL_HACKS)
