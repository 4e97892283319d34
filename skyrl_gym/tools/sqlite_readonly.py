"""Run model-written SQL against a SQLite file without letting it change anything or run forever.

Four independent guards, so that a gap in one does not open the database:

1. ``check_read_only`` parses the query with ``sqlglot`` and lets through only ``SELECT`` (with
   ``WITH``/``UNION``/subqueries), ``EXPLAIN [QUERY PLAN] SELECT`` and a few schema-reading
   ``PRAGMA``s; parse errors come back in plain words (line, column, what was expected).
2. The file is opened through a ``file:...?mode=ro`` URI: SQLite itself refuses every write.
3. An authorizer callback denies, at prepare time, every action except reading tables, calling
   functions and recursive CTEs (no ATTACH, no PRAGMA assignments, no DDL), and connection limits
   forbid attached databases and cap the size of any string or blob a query can build.
4. A progress handler aborts the query once its deadline passes (a never-ending recursive CTE, a
   huge cross join), and rows are fetched in chunks up to a row and byte budget, so a query that
   returns a million rows costs a bounded amount of memory.

Every failure is returned as a :class:`QueryResult` with ``error`` set; nothing here raises for a
bad query, and each query uses its own connection, so one bad query cannot affect another.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import sqlite3
import time
import urllib.parse
from typing import Any, List, Literal, Optional, Sequence, Tuple

ErrorKind = Literal["rejected", "parse", "sqlite", "timeout", "too_large", "missing_db"]

# Read-only PRAGMAs that only describe the schema; models use them to explore a database.
SCHEMA_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list", "table_list"}
)

_SQLITE_RECURSIVE = getattr(sqlite3, "SQLITE_RECURSIVE", 33)
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, _SQLITE_RECURSIVE})
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})

_EXPLAIN_PREFIX = re.compile(r"^\s*EXPLAIN(\s+QUERY\s+PLAN)?\s+", re.IGNORECASE)
_PRAGMA = re.compile(r"^\s*PRAGMA\s+(?:\w+\s*\.\s*)?(\w+)\s*(\(|=)?", re.IGNORECASE)

_sqlglot_logger = logging.getLogger("sqlglot")


@dataclasses.dataclass(frozen=True)
class QueryLimits:
    """Bounds on one query. ``max_rows`` rows are counted at most; ``keep_rows`` of them are kept
    (``None`` keeps all counted rows, as the reward does); ``max_bytes`` bounds the kept rows."""

    timeout_s: float = 5.0
    max_rows: int = 100_000
    keep_rows: Optional[int] = 50
    max_bytes: int = 32 * 1024 * 1024
    max_value_bytes: int = 10 * 1024 * 1024  # SQLITE_LIMIT_LENGTH: largest string/blob a query may build
    max_query_chars: int = 100_000  # longer texts are refused before parsing (parsing them is costly)


@dataclasses.dataclass
class QueryResult:
    """The outcome of one query: either rows or an error in plain words."""

    sql: str
    columns: List[str] = dataclasses.field(default_factory=list)
    rows: List[Tuple[Any, ...]] = dataclasses.field(default_factory=list)
    row_count: int = 0  # rows counted (at most QueryLimits.max_rows)
    more_rows: bool = False  # True when the query had more than max_rows rows
    error: Optional[str] = None
    error_kind: Optional[ErrorKind] = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def _describe_parse_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None) or []
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    near = (first.get("highlight") or "").strip()
    where = f"line {first.get('line')}, column {first.get('col')}"
    return f"{first.get('description', 'syntax error')} at {where}" + (f" near {near!r}" if near else "")


@functools.lru_cache(maxsize=8192)
def check_read_only(sql: str) -> Tuple[Optional[ErrorKind], Optional[str]]:
    """Return ``(None, None)`` if ``sql`` is one read-only statement, else ``(kind, message)``.

    ``kind`` is ``"parse"`` when sqlglot cannot parse the text (the caller may still let SQLite
    try it under the authorizer, since sqlglot does not know every SQLite construct) and
    ``"rejected"`` when the statement would write or change settings.

    Cached: parsing is pure Python and most of a query's cost, and the same texts recur (the gold
    query of every sample of a prompt, common exploratory queries).
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    if not sql or not sql.strip().strip(";").strip():
        return "rejected", "the query is empty; write one SELECT statement"
    pragma = _PRAGMA.match(sql)
    if pragma:
        name, follower = pragma.group(1).lower(), pragma.group(2)
        if follower == "=":
            return "rejected", f"PRAGMA {name} = ... changes database settings; only reading is allowed"
        if name not in SCHEMA_PRAGMAS:
            return "rejected", f"PRAGMA {name} is not allowed; allowed PRAGMAs: {', '.join(sorted(SCHEMA_PRAGMAS))}"
        return None, None
    body = _EXPLAIN_PREFIX.sub("", sql, count=1)
    previous_level = _sqlglot_logger.level
    _sqlglot_logger.setLevel(logging.ERROR)  # sqlglot warns when it falls back to a raw Command
    try:
        statements = [s for s in sqlglot.parse(body, read="sqlite") if s is not None]
    except ParseError as exc:
        return "parse", _describe_parse_error(exc)
    except Exception as exc:  # sqlglot tokenizer errors and the like
        return "parse", str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    finally:
        _sqlglot_logger.setLevel(previous_level)
    if not statements:
        return "rejected", "the query is empty; write one SELECT statement"
    if len(statements) > 1:
        return "rejected", f"found {len(statements)} statements; send exactly one SELECT statement per query"
    statement = statements[0]
    if isinstance(statement, exp.Command):
        verb = str(statement.this).upper()
        return "rejected", f"{verb} statements are not allowed; only SELECT queries can run"
    if not isinstance(statement, (exp.Select, exp.SetOperation, exp.Subquery, exp.Values)):
        verb = statement.key.upper()
        return "rejected", f"{verb} statements are not allowed; only SELECT queries can run (the database is read-only)"
    writes = (exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create, exp.Alter, exp.Attach, exp.Detach, exp.Command)
    for node in statement.walk():
        if isinstance(node, writes):
            return "rejected", f"{node.key.upper()} inside a query is not allowed; only reading is allowed"
    return None, None


def _authorizer(action: int, arg1: Optional[str], arg2: Optional[str], _db: Optional[str], _trigger: Optional[str]) -> int:
    if action in _ALLOWED_ACTIONS:
        if action == sqlite3.SQLITE_FUNCTION and arg2 and arg2.lower() in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 and arg1.lower() in SCHEMA_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def open_read_only(db_file: str) -> sqlite3.Connection:
    """A connection that SQLite itself keeps read-only, with the authorizer and limits set."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(db_file)) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.set_authorizer(_authorizer)
    return conn


def _row_bytes(row: Sequence[Any]) -> int:
    size = 16
    for value in row:
        size += len(value) if isinstance(value, (str, bytes)) else 8
    return size


def run_read_only_query(db_file: str, sql: str, limits: QueryLimits = QueryLimits()) -> QueryResult:
    """Run one query under every guard and return rows or a plain-words error. Never raises."""
    start = time.monotonic()
    result = QueryResult(sql=sql)

    def fail(kind: ErrorKind, message: str) -> QueryResult:
        result.error, result.error_kind = message, kind
        result.elapsed_s = time.monotonic() - start
        return result

    if not isinstance(sql, str):
        return fail("rejected", f"the query must be text, got {type(sql).__name__}")
    if not os.path.isfile(db_file):
        return fail("missing_db", f"database file not found: {db_file}")
    if len(sql) > limits.max_query_chars:
        return fail("rejected", f"the query is {len(sql)} characters long; the limit is {limits.max_query_chars}")
    kind, message = check_read_only(sql)
    parse_problem = message if kind == "parse" else None
    if kind == "rejected":
        return fail("rejected", message or "statement rejected")

    deadline = time.monotonic() + limits.timeout_s
    timed_out = False

    def past_deadline() -> int:
        nonlocal timed_out
        if time.monotonic() > deadline:
            timed_out = True
            return 1  # non-zero aborts the running statement with "interrupted"
        return 0

    conn: Optional[sqlite3.Connection] = None
    try:
        conn = open_read_only(db_file)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
        # Every 20 000 SQLite VM steps (well under a millisecond): fine enough for the deadline, rare
        # enough that the callback (which takes the GIL) does not slow queries or the event loop.
        conn.set_progress_handler(past_deadline, 20_000)
        cursor = conn.execute(sql)
        result.columns = [d[0] for d in (cursor.description or [])]
        keep = limits.keep_rows
        kept_bytes = 0
        while True:
            chunk = cursor.fetchmany(1000)
            if not chunk:
                break
            for row in chunk:
                if result.row_count >= limits.max_rows:
                    result.more_rows = True
                    break
                result.row_count += 1
                if keep is None or len(result.rows) < keep:
                    kept_bytes += _row_bytes(row)
                    if kept_bytes > limits.max_bytes:
                        return fail("too_large", f"the result is larger than {limits.max_bytes // (1024 * 1024)} MB")
                    result.rows.append(tuple(row))
            if result.more_rows:
                break
    except sqlite3.Error as exc:
        if timed_out:
            return fail("timeout", f"the query ran longer than {limits.timeout_s:g} s and was stopped")
        text = str(exc)
        if "not authorized" in text:
            text = "not authorized: the query tried to do something other than reading (the database is read-only)"
        elif "out of memory" in text:
            return fail("too_large", "the query ran out of memory")
        elif "too big" in text:
            return fail("too_large", f"{text} (values are limited to {limits.max_value_bytes} bytes)")
        if parse_problem:  # both parsers reject it: report the position sqlglot found
            return fail("parse", f"{parse_problem} (SQLite: {text})")
        return fail("sqlite", text)
    except (MemoryError, OverflowError) as exc:
        return fail("too_large", f"the result is too large ({type(exc).__name__})")
    except Exception as exc:  # a guard must never take the caller down
        return fail("sqlite", f"{type(exc).__name__}: {exc}")
    finally:
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
    result.elapsed_s = time.monotonic() - start
    return result


def _cell_text(value: Any, max_cell_chars: int) -> str:
    if value is None:
        text = "None"
    elif isinstance(value, bytes):
        text = f"<blob {len(value)} bytes>"
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    text = text.replace("\n", "\\n")
    if len(text) > max_cell_chars:
        text = text[: max_cell_chars - 3] + "..."
    return text


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_cell_chars: int = 80) -> str:
    """Rows as an aligned text table with a header, right-aligned like ``DataFrame.to_string``."""
    header = [_cell_text(c, max_cell_chars) for c in columns] or [str(i) for i in range(len(rows[0]) if rows else 0)]
    body = [[_cell_text(v, max_cell_chars) for v in row] for row in rows]
    widths = [len(h) for h in header]
    for row in body:
        for i, cell in enumerate(row):
            if i < len(widths):
                widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in body]
    return "\n".join(lines)


def format_result(result: QueryResult, max_rows_shown: int = 50, max_chars: int = 9000, max_cell_chars: int = 80) -> str:
    """What the model sees for a query: a compact table with the row count, or the error."""
    if result.error_kind == "timeout":
        return f"SQL Timeout: {result.error}. Simplify the query (add a LIMIT, bound any recursion)."
    if result.error_kind == "parse":
        return f"SQL syntax error: {result.error}."
    if result.error is not None:
        return f"Error executing SQL: {result.error}."
    count = f"more than {result.row_count}" if result.more_rows else str(result.row_count)
    noun = "row" if result.row_count == 1 and not result.more_rows else "rows"
    if result.row_count == 0:
        header = "  ".join(result.columns)
        return f"Empty result (0 rows). Columns: {header}" if header else "Empty result (0 rows)."
    shown = result.rows[:max_rows_shown]
    table = format_table(result.columns, shown, max_cell_chars)
    while len(table) > max_chars and len(shown) > 1:
        shown = shown[: max(1, len(shown) // 2)]
        table = format_table(result.columns, shown, max_cell_chars)
    if len(table) > max_chars:
        table = table[:max_chars] + "..."
    if len(shown) < result.row_count or result.more_rows:
        return f"Truncated to the first {len(shown)} of {count} rows:\n{table}"
    return f"{table}\n[{count} {noun}]"
