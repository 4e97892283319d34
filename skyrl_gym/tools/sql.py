"""``SQLToolGroup``: one ``sql`` tool that runs read-only queries against one SQLite file.

The guards (read-only open, statement check, authorizer, time/row/size limits) live in
:mod:`skyrl_gym.tools.sqlite_readonly`; this module turns a result into the text a model reads.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from skyrl_gym.tools.blocking import run_cpu_bound
from skyrl_gym.tools.core import ToolGroup, tool
from skyrl_gym.tools.sqlite_readonly import QueryLimits, QueryResult, format_result, run_read_only_query


@dataclasses.dataclass(frozen=True)
class SQLDisplay:
    """How much of a result the model sees."""

    max_rows_shown: int = 50
    max_chars: int = 9000
    max_cell_chars: int = 80


class SQLToolGroup(ToolGroup):
    """Read-only SQL over ``db_file``. The group keeps SkyRL-gym's name so tool metadata matches."""

    def __init__(
        self,
        db_file: str,
        limits: QueryLimits = QueryLimits(),
        display: SQLDisplay = SQLDisplay(),
        name: str = "SQLCodeExecutorToolGroup",
    ) -> None:
        self.db_file = db_file
        self.limits = limits
        self.display = display
        super().__init__(name=name)

    def run(self, query: str) -> QueryResult:
        """Structured result of one query (rows or an error); never raises."""
        return run_read_only_query(self.db_file, query, self.limits)

    async def arun(self, query: str) -> QueryResult:
        """``run`` in a tool worker process, so the event loop stays free (see ``tools.blocking``)."""
        return await run_cpu_bound(run_read_only_query, self.db_file, query, self.limits)

    def render(self, result: QueryResult) -> str:
        return format_result(result, self.display.max_rows_shown, self.display.max_chars, self.display.max_cell_chars)

    @tool
    def sql(self, query: str) -> str:
        """Run one read-only SQLite query and return the result as a table with its row count.

        Args:
            query: a single SELECT statement (WITH, UNION and subqueries allowed; no writes).
        """
        return self.render(self.run(query))

    async def asql(self, query: str) -> str:
        """``sql`` run in a tool worker process, so the event loop stays free (see ``tools.blocking``)."""
        return self.render(await self.arun(query))


# No literal tags in here: the text2sql reward's format check reads the whole transcript, observations
# included, and a "<solution>" in this text would count as a second solution block.
INVALID_ACTION_MESSAGE = (
    "Your previous action is invalid. Follow the format of outputting thinking process and sql tool, and try again."
    " Expected: your reasoning inside think tags, then either one SELECT query inside sql tags to explore the"
    " database, or your final SQL query inside solution tags to finish."
)


class SQLCodeExecutorToolGroup(SQLToolGroup):
    """SkyRL-gym's SQL tool group, as the ``text2sql`` env uses it: built on the folder of databases
    (``db_file_path``, holding ``<db_id>/<db_id>.sqlite``), its ``sql`` tool takes
    ``(db_id, sql, turns_left, timeout)`` and returns the whole observation, reminder of the turns left included.
    The queries run as :class:`SQLToolGroup`'s do (read-only, limited). ``db_file`` pins one database file
    (rows that name their file), whatever ``db_id`` says."""

    def __init__(
        self,
        db_file_path: str,
        db_file: Optional[str] = None,
        limits: QueryLimits = QueryLimits(),
        display: SQLDisplay = SQLDisplay(),
    ) -> None:
        self.db_path = db_file_path
        self.last_result: Optional[QueryResult] = None
        super().__init__(db_file or "", limits=limits, display=display)

    def database_file(self, db_id: str) -> str:
        return self.db_file or os.path.join(str(self.db_path), str(db_id), f"{db_id}.sqlite")

    @tool
    def sql(self, db_id: str, sql: Optional[str], turns_left: int, timeout: Optional[float] = None) -> str:
        """Run one read-only SQLite query on database ``db_id`` and return it as an observation.

        Args:
            db_id: the database, a folder of db_file_path.
            sql: a single SELECT statement; None for an action without one (the observation says so).
            turns_left: the turns the episode has left, shown in a reminder.
            timeout: seconds the query may run (default: the group's limit).
        """
        self.last_result = None
        if sql is None:
            body = INVALID_ACTION_MESSAGE
        else:
            limits = self.limits if timeout is None else dataclasses.replace(self.limits, timeout_s=float(timeout))
            self.last_result = run_read_only_query(self.database_file(db_id), sql.strip(), limits)
            body = self.render(self.last_result)
        reminder = f"<reminder>You have {turns_left} turns left to complete the task.</reminder>"
        return f"\n\n<observation>{body}\n{reminder}</observation>\n\n"

