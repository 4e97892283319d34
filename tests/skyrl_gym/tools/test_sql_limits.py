"""Issue 13: SQL that builds huge values, loops inside a SQLite function or returns huge rows is
stopped within a small multiple of its timeout, with an observation naming the limit it hit; the
tool worker process stays small and answers the next query. Real SQLite, real worker processes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import multiprocessing
import os
import resource
import sys
import time

import pytest

from skyrl_gym.envs.sql.utils import REWARD_LIMITS, compare_results, score_with_reason
from skyrl_gym.tools.sql import SQLToolGroup
from skyrl_gym.tools.sqlite_readonly import QueryLimits, QueryResult, format_result, run_read_only_query
from tests.tool_env_support import build_sample_databases, names_a_limit_that_stops

TIMEOUT_S = 1.0
LIMITS = dataclasses.replace(QueryLimits(), timeout_s=TIMEOUT_S)
# Attacks that must hit a size limit get more time, so a loaded machine cannot turn them into timeouts.
SIZE_TIMEOUT_S = 5.0
ONE_GB = 1024 ** 3


def _rows(n: int) -> str:
    return f"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {n}) "


# (name, query, the limit the error must name)
ATTACKS = [
    # printf repeats the character in a C loop that never looks at the interrupt flag (~13 s here)
    ("printf precision", "SELECT printf('%.*c', 1000000000, 'x')", "timeout_s"),
    ("randomblob", "SELECT randomblob(1e9)", "max_value_bytes"),
    ("zeroblob", "SELECT hex(zeroblob(1000000000))", "max_value_bytes"),
    ("recursive concatenation", "WITH RECURSIVE c(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM c) SELECT length(s) FROM c",
     "max_value_bytes"),
    ("9 MB rows", _rows(2000) + "SELECT i, randomblob(9000000) FROM c", "max_bytes"),
    ("9 MB text rows", _rows(2000) + "SELECT hex(zeroblob(4500000)) FROM c", "max_bytes"),
    # each value is under max_value_bytes; together they are 2.7 GB (SQLite's heap limit stops it)
    ("one 2.7 GB row", "SELECT " + ", ".join(["zeroblob(9000000)"] * 300), "memory_bytes"),
    ("instr over long strings", "SELECT instr(printf('%.*c', 5000000, 'a'), printf('%.*c', 2000000, 'a') || 'b')",
     "timeout_s"),
    ("sort of huge keys", _rows(3000) + "SELECT i FROM c ORDER BY randomblob(1000000) || i LIMIT 1", "timeout_s"),
    ("never-ending recursion", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT MAX(x) FROM c",
     "timeout_s"),
]


@pytest.fixture(scope="module")
def retail_db(tmp_path_factory):
    out = tmp_path_factory.mktemp("sqllimits")
    build_sample_databases(out)
    return str(out / "databases" / "retail.sqlite")


@pytest.fixture(scope="module")
def worker():
    """One tool worker process, made as ``skyrl_gym.tools.blocking`` makes them (forkserver)."""
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("forkserver"))
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def _peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no VmHWM line")


def _limits_for(limit: str, base: QueryLimits = LIMITS) -> QueryLimits:
    return base if limit == "timeout_s" else dataclasses.replace(base, timeout_s=SIZE_TIMEOUT_S)


def _children_of(pid: int) -> list:
    """Processes (zombies included) whose parent is ``pid``, from /proc."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:  # the process ended while we looked
                continue
            if int(fields[1]) == pid:
                children.append(int(entry))
    return children


def _check_stopped(result: QueryResult, limit: str, elapsed: float, timeout_s: float = TIMEOUT_S) -> None:
    assert elapsed < 10 * timeout_s, f"took {elapsed:.1f} s with a {timeout_s} s timeout"
    assert not result.ok, f"the query was not stopped: {result.row_count} rows"
    assert result.error.startswith("query stopped:") and names_a_limit_that_stops(result.error, limit), result.error


@pytest.mark.parametrize("name, sql, limit", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_in_a_tool_worker_is_stopped_and_the_worker_stays_small_and_usable(retail_db, worker, name, sql, limit):
    pid_before = worker.submit(os.getpid).result()
    fds_before = len(os.listdir(f"/proc/{pid_before}/fd"))
    start = time.monotonic()
    limits = _limits_for(limit)
    result = worker.submit(run_read_only_query, retail_db, sql, limits).result(timeout=120)
    _check_stopped(result, limit, time.monotonic() - start, limits.timeout_s)
    assert names_a_limit_that_stops(format_result(result), limit)
    # the same worker process answers the next query correctly
    assert worker.submit(os.getpid).result() == pid_before
    after = worker.submit(run_read_only_query, retail_db, "SELECT COUNT(*) FROM customers", LIMITS).result(timeout=60)
    assert after.ok and after.rows[0][0] > 0, after.error
    assert _peak_rss_bytes(pid_before) < ONE_GB
    # no query process, pipe or zombie is left behind
    assert len(os.listdir(f"/proc/{pid_before}/fd")) == fds_before
    assert _children_of(pid_before) == []


def _reset_peak_rss() -> int:
    """Reset this process's peak RSS to its current RSS (Linux: ``5`` > /proc/self/clear_refs) and return it, so a
    test measures its own peak however much earlier tests in the same process used."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    return _peak_rss_bytes(os.getpid())


def _memory_attacks_in_this_process(retail_db: str) -> tuple:
    """Runs the memory attacks with ``run_read_only_query`` called in this process; returns how much this process's
    peak RSS grew and the peak RSS of its reaped children (the query processes), both in bytes. Run in a fresh
    process: ru_maxrss of children is a maximum over the whole process's life, so in a test worker any child an earlier
    test (or a library's helper pool) left to be reaped would count too."""
    baseline = _reset_peak_rss()
    for name, sql, limit in ATTACKS:
        if limit != "timeout_s" or name.startswith("sort"):  # the memory attacks; the slow ones are covered above
            start, limits = time.monotonic(), _limits_for(limit)
            _check_stopped(run_read_only_query(retail_db, sql, limits), limit, time.monotonic() - start, limits.timeout_s)
    children_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return _peak_rss_bytes(os.getpid()) - baseline, children_peak


def test_attacks_run_in_this_process_keep_its_memory_and_its_query_processes_bounded(retail_db):
    fresh = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("forkserver"))
    with fresh:
        grew, children_peak = fresh.submit(_memory_attacks_in_this_process, retail_db).result(timeout=600)
    assert grew < ONE_GB
    assert children_peak < ONE_GB  # the query processes that process ran
    assert run_read_only_query(retail_db, "SELECT 1 + 1", LIMITS).rows == [(2,)]


def test_a_huge_printf_width_stays_bounded(retail_db):
    """SQLite gives up on a width past SQLITE_LIMIT_LENGTH at once (NULL on SQLite 3.40; a value cut to
    the limit or an error naming max_value_bytes are fine too): it returns fast and small."""
    start = time.monotonic()
    result = run_read_only_query(retail_db, "SELECT printf('%1000000000d', 1)", LIMITS)
    assert time.monotonic() - start < 10 * TIMEOUT_S
    if result.ok:
        value = result.rows[0][0]
        assert value is None or len(value) <= LIMITS.max_value_bytes
    else:
        assert names_a_limit_that_stops(result.error, "max_value_bytes"), result.error


def test_the_sql_tool_observation_names_the_limit(retail_db, monkeypatch):
    monkeypatch.setenv("SKYRL_GYM_TOOL_PROCESSES", "1")
    group = SQLToolGroup(retail_db, limits=LIMITS)
    start = time.monotonic()
    text = asyncio.run(group.asql("SELECT printf('%.*c', 1000000000, 'x')"))
    assert time.monotonic() - start < 10 * TIMEOUT_S
    assert text.startswith("SQL Timeout: query stopped: ran longer than 1 s (limit timeout_s)")
    too_big = group.sql("SELECT randomblob(1e9)")
    assert too_big.startswith("Error executing SQL: query stopped: ")
    assert names_a_limit_that_stops(too_big, "max_value_bytes"), too_big
    if sys.version_info >= (3, 11):
        assert too_big == "Error executing SQL: query stopped: a value over 10 MB (limit max_value_bytes)."
    assert asyncio.run(group.asql("SELECT 7")).endswith("[1 row]")


def test_the_reward_is_bounded_the_same_way(retail_db):
    baseline = _reset_peak_rss()
    gold = "SELECT COUNT(*) FROM customers"
    for sql, limit in [("SELECT printf('%.*c', 1000000000, 'x')", "timeout_s"),
                       (_rows(2000) + "SELECT i, zeroblob(9000000) FROM c", "max_bytes"),
                       ("SELECT " + ", ".join(["zeroblob(9000000)"] * 300), "memory_bytes")]:
        limits = _limits_for(limit, dataclasses.replace(REWARD_LIMITS, timeout_s=TIMEOUT_S))
        start = time.monotonic()
        same, reason = compare_results(retail_db, sql, gold, limits)
        assert time.monotonic() - start < 10 * limits.timeout_s
        assert not same and reason.startswith("solution query failed") and f"(limit {limit})" in reason, reason
        completion = f"<think>t</think><solution>{sql}</solution>"
        assert score_with_reason(completion, gold, retail_db, limits)[0] == 0.0
    # a gold query over a limit fails the reward with the reason, it does not raise
    same, reason = compare_results(retail_db, gold, "SELECT randomblob(1e9)", limits)
    assert not same and reason.startswith("gold query failed") and names_a_limit_that_stops(reason, "max_value_bytes")
    assert compare_results(retail_db, gold, gold, limits) == (True, "same rows")
    assert _peak_rss_bytes(os.getpid()) - baseline < ONE_GB


def test_without_a_query_process_the_watchdog_interrupt_still_stops_vm_work(retail_db):
    """``isolate=False`` runs in the calling thread: the interrupt from the watchdog thread stops a
    query that keeps stepping the VM (there is no progress handler any more)."""
    for name, sql, limit in ATTACKS:
        if name in ("never-ending recursion", "sort of huge keys", "9 MB rows", "recursive concatenation"):
            start, limits = time.monotonic(), _limits_for(limit, dataclasses.replace(LIMITS, isolate=False))
            _check_stopped(run_read_only_query(retail_db, sql, limits), limit, time.monotonic() - start, limits.timeout_s)
    assert run_read_only_query(retail_db, "SELECT 1 + 1", limits).rows == [(2,)]


def test_limits_do_not_get_in_the_way_of_ordinary_queries(retail_db):
    result = run_read_only_query(retail_db, _rows(100_000) + "SELECT i, 'row ' || i FROM c", dataclasses.replace(
        REWARD_LIMITS, timeout_s=30.0))
    assert result.ok and result.row_count == 100_000 and len(result.rows) == 100_000, result.error
    assert result.rows[-1] == (100_000, "row 100000")
