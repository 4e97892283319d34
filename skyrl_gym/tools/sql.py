"""``SQLToolGroup``: one ``sql`` tool that runs read-only queries against one SQLite file.

The guards (read-only open, statement check, authorizer, time/row/size limits) live in
:mod:`skyrl_gym.tools.sqlite_readonly`; this module turns a result into the text a model reads.
"""

from __future__ import annotations

import dataclasses
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


# SkyRL-gym's class name.
SQLCodeExecutorToolGroup = SQLToolGroup

