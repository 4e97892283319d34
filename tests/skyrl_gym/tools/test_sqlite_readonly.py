"""Model-written SQL against real SQLite files: reads work, everything else is contained."""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
import time

import pytest

from skyrl_gym.tools.sql import SQLToolGroup
from skyrl_gym.tools.sqlite_readonly import QueryLimits, check_read_only, format_result, run_read_only_query
from tests.tool_env_support import build_sample_databases, names_a_limit_that_stops, sha256_of


@pytest.fixture(scope="module")
def retail_db(tmp_path_factory):
    out = tmp_path_factory.mktemp("sqldb")
    build_sample_databases(out)
    return out / "databases" / "retail.sqlite"


def test_select_returns_named_columns_rows_and_count(retail_db):
    result = run_read_only_query(str(retail_db), "SELECT customer_id, country FROM customers ORDER BY customer_id LIMIT 3")
    assert result.ok, result.error
    assert result.columns == ["customer_id", "country"]
    assert [row[0] for row in result.rows] == [1, 2, 3]
    assert result.row_count == 3 and not result.more_rows
    text = SQLToolGroup(str(retail_db)).render(result)
    assert text.splitlines()[0].split() == ["customer_id", "country"]
    assert text.endswith("[3 rows]")


def test_tool_schema_describes_the_query_parameter(retail_db):
    (schema,) = SQLToolGroup(str(retail_db)).get_tool_schemas()
    assert schema["function"]["name"] == "sql"
    assert schema["function"]["parameters"]["required"] == ["query"]


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("DROP TABLE customers", "DROP statements are not allowed"),
        ("DELETE FROM orders", "DELETE statements are not allowed"),
        ("UPDATE products SET unit_price = 0", "UPDATE statements are not allowed"),
        ("INSERT INTO customers (customer_id) VALUES (9999)", "INSERT statements are not allowed"),
        ("ATTACH DATABASE '/tmp/skyrl_attack.db' AS evil", "ATTACH statements are not allowed"),
        ("PRAGMA writable_schema = ON", "PRAGMA writable_schema = ... changes database settings"),
        ("PRAGMA journal_mode", "PRAGMA journal_mode is not allowed"),
        ("CREATE TABLE evil (x)", "CREATE statements are not allowed"),
        ("VACUUM INTO '/tmp/skyrl_copy.db'", "VACUUM statements are not allowed"),
        ("SELECT 1; DROP TABLE customers", "found 2 statements"),
        ("WITH x AS (SELECT 1) DELETE FROM orders", "DELETE statements are not allowed"),
        ("", "the query is empty"),
    ],
)
def test_writes_and_setting_changes_are_rejected_with_a_reason_and_the_file_is_unchanged(retail_db, sql, expected):
    before = sha256_of(retail_db)
    result = run_read_only_query(str(retail_db), sql)
    assert not result.ok and result.error_kind == "rejected"
    assert expected in result.error
    assert "Error executing SQL" in format_result(result)
    assert sha256_of(retail_db) == before


def test_authorizer_and_read_only_open_hold_even_without_the_statement_check(retail_db):
    """The second and third guards alone: SQLite refuses writes and ATTACH on our connection."""
    from skyrl_gym.tools.sqlite_readonly import open_read_only

    before = sha256_of(retail_db)
    conn = open_read_only(str(retail_db))
    try:
        for statement in ("DROP TABLE customers", "ATTACH DATABASE ':memory:' AS m", "PRAGMA writable_schema = ON",
                          "UPDATE products SET unit_price = 1"):
            with pytest.raises(sqlite3.DatabaseError):
                conn.execute(statement)
    finally:
        conn.close()
    plain = sqlite3.connect(f"file:{retail_db}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        plain.execute("DELETE FROM orders")
    plain.close()
    assert sha256_of(retail_db) == before


def test_schema_pragmas_are_allowed(retail_db):
    result = run_read_only_query(str(retail_db), "PRAGMA table_info(orders)")
    assert result.ok, result.error
    assert "order_date" in [row[1] for row in result.rows]


def test_never_ending_recursive_cte_is_stopped_at_the_deadline(retail_db):
    limits = dataclasses.replace(QueryLimits(), timeout_s=0.5)
    sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT MAX(x) FROM c"
    start = time.monotonic()
    result = run_read_only_query(str(retail_db), sql, limits)
    assert time.monotonic() - start < 5
    assert result.error_kind == "timeout"
    assert format_result(result).startswith("SQL Timeout: query stopped: ran longer than 0.5 s (limit timeout_s)")


def test_million_row_query_is_cut_to_the_row_budget_and_shown_compactly(retail_db):
    sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000) SELECT x FROM c"
    result = run_read_only_query(str(retail_db), sql, dataclasses.replace(QueryLimits(), max_rows=20_000))
    assert result.ok and result.more_rows
    assert result.row_count == 20_000 and len(result.rows) == 50
    text = format_result(result)
    assert text.startswith("Truncated to the first 50 of more than 20000 rows")
    assert len(text) < 9000


def test_huge_string_values_hit_the_length_limit(retail_db):
    result = run_read_only_query(str(retail_db), "SELECT zeroblob(500000000)")
    assert names_a_limit_that_stops(result.error, "max_value_bytes"), result.error
    # before 3.11 (no length limit) the heap limit, the result's size limit or, on a busy machine, the timeout
    assert result.error_kind == "too_large" or (sys.version_info < (3, 11) and result.error_kind == "timeout")


def test_overlong_query_text_is_refused_before_parsing(retail_db):
    result = run_read_only_query(str(retail_db), "SELECT " + "1 + " * 50_000 + "1")
    assert result.error_kind == "rejected" and "the limit is 100000" in result.error


def test_parse_errors_are_reported_in_plain_words_with_the_position(retail_db):
    result = run_read_only_query(str(retail_db), "SELECT (customer_id FROM customers")
    assert result.error_kind == "parse"
    text = format_result(result)
    assert text.startswith("SQL syntax error: Expecting ) at line 1, column ")
    assert "(SQLite: near \"FROM\": syntax error)" in text


def test_sqlite_errors_name_the_problem(retail_db):
    result = run_read_only_query(str(retail_db), "SELECT no_such_column FROM customers")
    assert result.error_kind == "sqlite"
    assert "no such column: no_such_column" in result.error


def test_check_read_only_accepts_reads():
    for sql in ("SELECT 1", "WITH t AS (SELECT 1 AS a) SELECT a FROM t", "SELECT 1 UNION SELECT 2",
                "EXPLAIN QUERY PLAN SELECT 1", "PRAGMA table_info(orders)"):
        assert check_read_only(sql) == (None, None), sql


def test_long_queries_are_checked_but_not_cached():
    """The cache's key is the query: distinct 100,000-character queries (400 KB each in 4-byte characters) held up
    to 3.3 GB per process. Only short ones are kept; a long one is checked the same, every time."""
    from skyrl_gym.tools import sqlite_readonly

    cache = sqlite_readonly._check_read_only_cached
    cache.cache_clear()
    for i in range(3):
        long_read = f"SELECT '{chr(0x1F600) * 50_000}{i}'"
        assert check_read_only(long_read) == (None, None)
        assert check_read_only(f"DELETE FROM t WHERE x = '{'a' * 50_000}{i}'")[0] == "rejected"
    assert cache.cache_info().currsize == 0
    assert check_read_only("SELECT 1") == (None, None) and cache.cache_info().currsize == 1
    assert len("SELECT 1") <= sqlite_readonly.CACHED_QUERY_CHARS < len(long_read)


def test_missing_database_is_an_error_not_an_exception(tmp_path):
    result = run_read_only_query(str(tmp_path / "absent.sqlite"), "SELECT 1")
    assert result.error_kind == "missing_db" and "absent.sqlite" in result.error
    assert not (tmp_path / "absent.sqlite").exists()


class _Marker:
    path = ""

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_query_result_that_asks_for_other_objects_is_an_error_and_builds_nothing(tmp_path):
    import pickle

    from skyrl_gym.tools.sqlite_readonly import QueryResult, load_query_result

    _Marker.path = str(tmp_path / "ran")
    hostile = pickle.dumps(QueryResult(sql="select 1", rows=[(_Marker(),)]))
    result = load_query_result(hostile, "select 1")
    assert result.error_kind == "sqlite" and "only plain values, not io.open" in result.error
    assert not (tmp_path / "ran").exists()

    honest = QueryResult(sql="select 1", columns=["a", "b"], rows=[(1, "x"), (None, b"\x00"), (2.5, "")], row_count=3)
    assert load_query_result(pickle.dumps(honest, protocol=pickle.HIGHEST_PROTOCOL), "select 1") == honest
    assert load_query_result(b"not a pickle", "select 1").error_kind == "sqlite"
