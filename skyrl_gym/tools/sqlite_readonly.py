"""Run model-written SQL against a SQLite file without letting it change anything, run long or eat memory.

Independent guards, so that a gap in one does not open the database or the machine:

1. ``check_read_only`` parses the query with ``sqlglot`` and lets through only ``SELECT`` (with
   ``WITH``/``UNION``/subqueries), ``EXPLAIN [QUERY PLAN] SELECT`` and a few schema-reading
   ``PRAGMA``s; parse errors come back in plain words (line, column, what was expected).
2. The file is opened through a ``file:...?mode=ro`` URI: SQLite itself refuses every write.
3. An authorizer callback denies, at prepare time, every action except reading tables, calling
   functions and recursive CTEs (no ATTACH, no PRAGMA assignments, no DDL). Connection limits forbid
   attached databases and cap the query text and any string or blob a query builds
   (``SQLITE_LIMIT_LENGTH``); temporary tables and sorts stay in memory, under the heap limit.
4. Time: a watchdog thread calls ``Connection.interrupt()`` at the deadline, which stops SQLite at its
   next VM step. Some built-in functions loop in C without stepping the VM (``printf('%.*c', 1e9,
   'x')`` takes ~13 s, ``instr`` over strings of a few MB minutes), so each query runs in a
   forked *query process* that is killed (SIGKILL) when it outlives the deadline by a grace period,
   with ``RLIMIT_CPU`` as a backstop should its parent die.
5. Memory: the query process has SQLite's ``hard_heap_limit`` and an ``RLIMIT_AS`` of its address
   space at the fork plus ``memory_bytes``; rows are fetched one at a time and their size counted
   as they come, so the kept rows stop at ``max_bytes`` and discarded rows are never held.

Every failure is a :class:`QueryResult` with ``error`` set, and a stopped query names the limit it
hit (``query stopped: result over 32 MB (limit max_bytes)``); nothing here raises for a bad query.
The query process exits after one query, so whatever a query did to memory is gone with it and the
caller (a tool worker process) is ready for the next one. Where ``os.fork`` is unavailable, or
``QueryLimits.isolate`` is False, the same steps run in the calling process: the interrupt then
bounds VM work but not a long C-level function call, and only SQLite's length limit bounds memory.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import logging
import os
import pickle
import re
import select
import signal
import sqlite3
import sys
import threading
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

# Fork only where it is cheap and safe for what the child does (SQLite, pickle, os._exit).
_CAN_FORK = hasattr(os, "fork") and sys.platform.startswith("linux")
# Address space a query process may reserve beyond memory_bytes: thread stack, malloc arenas.
_ADDRESS_SPACE_SLACK = 512 * 1024 * 1024
# Query processes one process runs at once (threads beyond wait), so memory stays within this many
# times memory_bytes. A tool worker process runs one query at a time anyway; this bounds the thread-pool
# mode (SKYRL_GYM_TOOL_PROCESSES=0) and sync calls from many threads.
_QUERY_PROCESS_SLOTS = threading.BoundedSemaphore(
    max(1, int(os.environ.get("SKYRL_GYM_SQL_QUERY_PROCESSES", str(min(8, os.cpu_count() or 1)))))
)
# Connection.setlimit and the limit constants arrived in Python 3.11; SQLite's numbering is stable.
_LIMIT_LENGTH = getattr(sqlite3, "SQLITE_LIMIT_LENGTH", 0)
_LIMIT_SQL_LENGTH = getattr(sqlite3, "SQLITE_LIMIT_SQL_LENGTH", 1)
_LIMIT_ATTACHED = getattr(sqlite3, "SQLITE_LIMIT_ATTACHED", 7)


@dataclasses.dataclass(frozen=True)
class QueryLimits:
    """Bounds on one query. ``max_rows`` rows are counted at most; ``keep_rows`` of them are kept
    (``None`` keeps all counted rows, as the reward does); ``max_bytes`` bounds the kept rows (their
    size in Python, roughly). Field names are the names error messages give for a limit."""

    timeout_s: float = 5.0
    max_rows: int = 100_000
    keep_rows: Optional[int] = 50
    max_bytes: int = 32 * 1024 * 1024
    max_value_bytes: int = 10 * 1024 * 1024  # SQLITE_LIMIT_LENGTH: largest string/blob a query may build
    max_query_chars: int = 100_000  # longer texts are refused before parsing (parsing them is costly)
    memory_bytes: int = 512 * 1024 * 1024  # memory the query process may add (SQLite heap and address space)
    grace_s: float = 1.0  # after the interrupt, how long the query process has to stop before it is killed
    isolate: bool = True  # run in a forked query process (see the module docstring)


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


def _size(n: int) -> str:
    mb = 1024 * 1024
    if n >= mb:
        return f"{n // mb} MB" if n % mb == 0 else f"{n / mb:.1f} MB"
    return f"{n // 1024} KB" if n >= 1024 else f"{n} bytes"


def _stopped(what: str, limit: str) -> str:
    return f"query stopped: {what} (limit {limit})"


def _timeout_message(limits: QueryLimits) -> str:
    return _stopped(f"ran longer than {limits.timeout_s:g} s", "timeout_s")


def _memory_message(limits: QueryLimits) -> str:
    return _stopped(f"used more than {_size(limits.memory_bytes)} of memory", "memory_bytes")


def _describe_parse_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None) or []
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    near = (first.get("highlight") or "").strip()
    where = f"line {first.get('line')}, column {first.get('col')}"
    return f"{first.get('description', 'syntax error')} at {where}" + (f" near {near!r}" if near else "")


CACHED_QUERY_CHARS = 4096
"""Queries up to this long are cached by :func:`check_read_only` (at most ``4096 x 4096`` characters in all). The
text is the cache's key: with long ones cached too, distinct 100,000-character queries a model writes (400 KB each
in 4-byte characters) held up to 3.3 GB per process, past every session's byte budget."""


def check_read_only(sql: str) -> Tuple[Optional[ErrorKind], Optional[str]]:
    """Return ``(None, None)`` if ``sql`` is one read-only statement, else ``(kind, message)``.

    ``kind`` is ``"parse"`` when sqlglot cannot parse the text (the caller may still let SQLite
    try it under the authorizer, since sqlglot does not know every SQLite construct) and
    ``"rejected"`` when the statement would write or change settings.

    Cached up to :data:`CACHED_QUERY_CHARS`: parsing is pure Python and most of a query's cost, and the same texts
    recur (the gold query of every sample of a prompt, common exploratory queries).
    """
    return _check_read_only_cached(sql) if len(sql) <= CACHED_QUERY_CHARS else _check_read_only(sql)


def _check_read_only(sql: str) -> Tuple[Optional[ErrorKind], Optional[str]]:
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


_check_read_only_cached = functools.lru_cache(maxsize=4096)(_check_read_only)


def _authorizer(action: int, arg1: Optional[str], arg2: Optional[str], _db: Optional[str], _trigger: Optional[str]) -> int:
    if action in _ALLOWED_ACTIONS:
        if action == sqlite3.SQLITE_FUNCTION and arg2 and arg2.lower() in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 and arg1.lower() in SCHEMA_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def open_read_only(db_file: str, limits: Optional[QueryLimits] = None) -> sqlite3.Connection:
    """A connection that SQLite itself keeps read-only, with the authorizer and limits set."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(db_file)) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    if hasattr(conn, "setlimit"):  # Python 3.11+; before, the authorizer and the query process remain
        conn.setlimit(_LIMIT_ATTACHED, 0)
        if limits is not None:
            conn.setlimit(_LIMIT_LENGTH, limits.max_value_bytes)
            conn.setlimit(_LIMIT_SQL_LENGTH, 4 * limits.max_query_chars)  # UTF-8 bytes
    conn.execute("PRAGMA temp_store = MEMORY")  # sorts and temp tables under the heap limit, not on disk
    conn.set_authorizer(_authorizer)
    return conn


# ---------------------------------------------------------------------------------------- steps


def _screen(db_file: str, sql: Any, limits: QueryLimits) -> Tuple[Optional[Tuple[ErrorKind, str]], Optional[str]]:
    """Checks before anything runs: ``((kind, message) or None, sqlglot's parse problem or None)``."""
    if not isinstance(sql, str):
        return ("rejected", f"the query must be text, got {type(sql).__name__}"), None
    if not os.path.isfile(db_file):
        return ("missing_db", f"database file not found: {db_file}"), None
    if len(sql) > limits.max_query_chars:
        return ("rejected", f"query refused: it is {len(sql)} characters long, the limit is {limits.max_query_chars} "
                            "(limit max_query_chars)"), None
    kind, message = check_read_only(sql)
    if kind == "rejected":
        return ("rejected", message or "statement rejected"), None
    return None, (message if kind == "parse" else None)


class _Watchdog:
    """Calls ``conn.interrupt()`` once ``timeout_s`` has passed; SQLite stops at its next VM step."""

    def __init__(self, conn: sqlite3.Connection, timeout_s: float) -> None:
        self.fired = False
        self._conn = conn
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, timeout_s), self._interrupt)
        self._timer.daemon = True

    def _interrupt(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            self.fired = True
            self._conn.interrupt()

    def __enter__(self) -> "_Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()
        with self._lock:
            self._conn = None  # an interrupt that comes late must not touch a closed connection


def _row_bytes(row: Sequence[Any]) -> int:
    """Roughly what a row costs as a Python tuple."""
    size = 56 + 8 * len(row)
    for value in row:
        size += 40 + len(value) if isinstance(value, (str, bytes)) else 32
    return size


def _fetch_rows(cursor: sqlite3.Cursor, limits: QueryLimits, result: QueryResult) -> Optional[Tuple[ErrorKind, str]]:
    """Rows one at a time into ``result``, counting rows and the bytes of kept rows as they come."""
    keep = limits.keep_rows
    kept_bytes = 0
    while True:
        row = cursor.fetchone()
        if row is None:
            return None
        if result.row_count >= limits.max_rows:
            result.more_rows = True
            return None
        result.row_count += 1
        if keep is None or len(result.rows) < keep:
            kept_bytes += _row_bytes(row)
            if kept_bytes > limits.max_bytes:
                result.rows = []
                return "too_large", _stopped(f"result over {_size(limits.max_bytes)}", "max_bytes")
            result.rows.append(tuple(row))


def _describe_sqlite_error(exc: sqlite3.Error, limits: QueryLimits, parse_problem: Optional[str]) -> Tuple[ErrorKind, str]:
    text = str(exc)
    if "not authorized" in text:
        text = "not authorized: the query tried to do something other than reading (the database is read-only)"
    elif "out of memory" in text:
        return "too_large", _memory_message(limits)
    elif "too big" in text:
        return "too_large", _stopped(f"a value over {_size(limits.max_value_bytes)}", "max_value_bytes")
    elif "too long" in text:
        return "rejected", _stopped(f"the query text is over {4 * limits.max_query_chars} bytes", "max_query_chars")
    if parse_problem:  # both parsers reject it: report the position sqlglot found
        return "parse", f"{parse_problem} (SQLite: {text})"
    return "sqlite", text


def _execute(db_file: str, sql: str, limits: QueryLimits, parse_problem: Optional[str]) -> QueryResult:
    """Open, run under the watchdog, fetch under the caps; every failure becomes ``result.error``."""
    result = QueryResult(sql=sql)
    failure: Optional[Tuple[ErrorKind, str]] = None
    conn: Optional[sqlite3.Connection] = None
    watchdog: Optional[_Watchdog] = None
    try:
        conn = open_read_only(db_file, limits)
        with _Watchdog(conn, limits.timeout_s) as watchdog:
            cursor = conn.execute(sql)
            result.columns = [d[0] for d in (cursor.description or [])]
            failure = _fetch_rows(cursor, limits, result)
    except sqlite3.Error as exc:
        failure = ("timeout", _timeout_message(limits)) if watchdog is not None and watchdog.fired else (
            _describe_sqlite_error(exc, limits, parse_problem))
    except MemoryError:
        failure = ("too_large", _memory_message(limits))
    except OverflowError as exc:
        failure = ("too_large", f"the result is too large ({exc})")
    except Exception as exc:  # a guard must never take the caller down
        failure = ("sqlite", f"{type(exc).__name__}: {exc}")
    finally:
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
    if failure is not None:
        result.rows, result.error_kind, result.error = [], failure[0], failure[1]
    return result


def _limit_query_process(limits: QueryLimits) -> None:
    """In the query process: cap SQLite's heap, the address space it may add, CPU seconds, file size."""
    import resource  # POSIX only; this runs only where _CAN_FORK

    sqlite3.connect(":memory:").execute(f"PRAGMA hard_heap_limit = {int(limits.memory_bytes)}").close()
    with open("/proc/self/statm") as handle:
        mapped = int(handle.read().split()[0]) * resource.getpagesize()
    address_space = mapped + limits.memory_bytes + _ADDRESS_SPACE_SLACK
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    cpu_s = int(limits.timeout_s + limits.grace_s) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-long write fails instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.memory_bytes, limits.memory_bytes))


def _query_process_main(write_fd: int, db_file: str, sql: str, limits: QueryLimits, parse_problem: Optional[str]) -> None:
    code = 1
    try:
        try:
            _limit_query_process(limits)
            result = _execute(db_file, sql, limits, parse_problem)
        except MemoryError:
            result = QueryResult(sql=sql, error=_memory_message(limits), error_kind="too_large")
        payload = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view):]
        code = 0
    finally:
        os._exit(code)


def _read_until(fd: int, deadline: float) -> Tuple[bytes, bool]:
    """Everything written to ``fd`` until EOF, or ``(partial, True)`` when ``deadline`` passes first."""
    chunks: List[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b"", True
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)


class _QueryResultUnpickler(pickle.Unpickler):
    """Builds a ``QueryResult`` of plain values and nothing else. The query process is a fork of this one that
    runs model-written SQL: whatever it sends back is read as data, never as a recipe for other objects."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == (__name__, "QueryResult"):
            return QueryResult
        raise pickle.UnpicklingError(f"a query result may hold only plain values, not {module}.{name}")


def load_query_result(payload: bytes, sql: str) -> QueryResult:
    """The query process's answer, or an error result when it is anything but a ``QueryResult``."""
    try:
        result = _QueryResultUnpickler(io.BytesIO(payload)).load()
    except Exception as exc:  # a malformed or hostile answer: never raised into the env
        return QueryResult(sql=sql, error=f"the query process sent an unreadable result ({exc})", error_kind="sqlite")
    if not isinstance(result, QueryResult):
        return QueryResult(sql=sql, error="the query process sent an unreadable result", error_kind="sqlite")
    return result


def _run_in_query_process(db_file: str, sql: str, limits: QueryLimits, parse_problem: Optional[str]) -> QueryResult:
    """``_execute`` in a forked process with resource limits; killed if it outlives the deadline."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:  # the query process
        os.close(read_fd)
        _query_process_main(write_fd, db_file, sql, limits, parse_problem)
    os.close(write_fd)
    status: Optional[int] = None
    try:
        payload, late = _read_until(read_fd, time.monotonic() + limits.timeout_s + limits.grace_s)
        if late:
            os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1]
    finally:
        os.close(read_fd)
        if status is None:  # interrupted while waiting: leave no query process behind
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    if late:
        return QueryResult(sql=sql, error=_timeout_message(limits), error_kind="timeout")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and payload:
        return load_query_result(payload, sql)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return QueryResult(sql=sql, error=_timeout_message(limits), error_kind="timeout")
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:  # the kernel's out-of-memory killer
        return QueryResult(sql=sql, error=_memory_message(limits) + " or was killed", error_kind="too_large")
    how = f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) else f"exit code {os.WEXITSTATUS(status)}"
    return QueryResult(sql=sql, error=f"the query process ended without a result ({how})", error_kind="sqlite")


def run_read_only_query(db_file: str, sql: str, limits: QueryLimits = QueryLimits()) -> QueryResult:
    """Run one query under every guard and return rows or a plain-words error. Never raises."""
    start = time.monotonic()
    refusal, parse_problem = _screen(db_file, sql, limits)
    if refusal is not None:
        result = QueryResult(sql=sql if isinstance(sql, str) else repr(sql), error=refusal[1], error_kind=refusal[0])
    elif limits.isolate and _CAN_FORK:
        try:
            with _QUERY_PROCESS_SLOTS:
                result = _run_in_query_process(db_file, sql, limits, parse_problem)
        except OSError as exc:  # no fork possible (process limit, memory): say so rather than raise
            result = QueryResult(sql=sql, error=f"could not start the query process: {exc}", error_kind="sqlite")
    else:
        result = _execute(db_file, sql, limits, parse_problem)
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
