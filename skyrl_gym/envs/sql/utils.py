"""The text2sql reward, as SkyRL-gym computes it.

* -1.0 when the format check fails: exactly one ``<solution>...</solution>``; at least one
  ``<think>...</think>``; no ``<think>``/``<sql>``/``<observation>`` tags inside the solution; every
  ``</observation>`` before the solution followed (after whitespace) by ``<think>``.
* Otherwise 1.0 when the predicted and the gold query return the same set of rows, else 0.0.

Both queries run read-only under the same guards as the tool, with the reward's own limits.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from skyrl_gym.tools.parsers import find_tag_blocks
from skyrl_gym.tools.sqlite_readonly import QueryLimits, run_read_only_query

THINK_START, THINK_END = "<think>", "</think>"
SQL_START, SQL_END = "<sql>", "</sql>"
SOLUTION_START, SOLUTION_END = "<solution>", "</solution>"
OBS_START, OBS_END = "<observation>", "</observation>"

# The reward compares whole results: keep every row, allow big gold results (128 MB as Python rows, under
# the query process's 512 MB memory limit), wait longer than a tool call.
REWARD_LIMITS = QueryLimits(timeout_s=30.0, max_rows=1_000_000, keep_rows=None, max_bytes=128 * 1024 * 1024)

_FORBIDDEN_IN_SOLUTION = re.compile(r"</?(think|sql|observation)\b", re.IGNORECASE)
# An </observation> not followed (after whitespace) by <think>. Each </observation> used to be checked on a
# copy of the rest of the text, and the think blocks found with <think>(.*?)</think>, which searched from
# every unclosed <think> to the end: a final answer after 1 MB of "<think>" took 467 s of one core (serve-env
# takes 32 MB).
_OBS_END_WITHOUT_THINK = re.compile(r"</observation>(?!\s*<think>)", re.IGNORECASE)

FormatCheck = Tuple[bool, Optional[List[str]], Optional[str], None]


def verify_format_and_extract(output: str) -> FormatCheck:
    """``(is_valid, thoughts, solution_sql, None)``; on failure ``(False, None, None, None)``."""
    invalid: FormatCheck = (False, None, None, None)
    if output.count(SOLUTION_START) != 1:
        return invalid
    before_solution, after_start = output.split(SOLUTION_START, 1)
    if after_start.count(SOLUTION_END) != 1:
        return invalid
    solution_text = after_start.split(SOLUTION_END, 1)[0]
    if _FORBIDDEN_IN_SOLUTION.search(solution_text):
        return invalid
    thoughts, _ = find_tag_blocks(output, "think")
    if not thoughts or _OBS_END_WITHOUT_THINK.search(before_solution):
        return invalid
    return True, thoughts, solution_text.strip(), None


def compare_results(db_file: str, predicted_sql: str, gold_sql: str, limits: QueryLimits = REWARD_LIMITS) -> Tuple[bool, str]:
    """``(same, reason)``: whether both queries run and return the same set of rows (order and
    duplicates ignored), and in words why not."""
    predicted = run_read_only_query(db_file, predicted_sql, limits)
    if not predicted.ok:
        return False, f"solution query failed ({predicted.error_kind}): {predicted.error}"
    if predicted.more_rows:
        return False, f"solution query returned more than {limits.max_rows} rows"
    gold = run_read_only_query(db_file, gold_sql, limits)
    if not gold.ok:
        return False, f"gold query failed ({gold.error_kind}): {gold.error}"
    if gold.more_rows:
        return False, f"gold query returned more than {limits.max_rows} rows"
    if frozenset(predicted.rows) != frozenset(gold.rows):
        return False, f"different rows ({predicted.row_count} returned, {gold.row_count} expected)"
    return True, "same rows"


def execute_sql_wrapper_single(db_file: str, sql: str, timeout: float, output_str: str) -> Tuple[str, str, Optional[frozenset], int, str]:
    """SkyRL-gym's shape of one read-only query: ``(db_file, sql, frozenset(rows) or None, 1 | 0, output_str)``
    (``None`` and 0 when the query fails, is refused or times out after ``timeout`` seconds)."""
    import dataclasses

    result = run_read_only_query(db_file, sql, dataclasses.replace(REWARD_LIMITS, timeout_s=float(timeout)))
    if not result.ok or result.more_rows:
        return db_file, sql, None, 0, output_str
    return db_file, sql, frozenset(result.rows), 1, output_str


def same_result_rows(db_file: str, predicted_sql: str, gold_sql: str, limits: QueryLimits = REWARD_LIMITS) -> bool:
    """True when both queries run and return the same set of rows (order and duplicates ignored)."""
    return compare_results(db_file, predicted_sql, gold_sql, limits)[0]


def score_with_reason(completion: str, reference: str, db_file: str, limits: QueryLimits = REWARD_LIMITS) -> Tuple[float, str]:
    """The episode reward and why; any unexpected failure scores 0.0 rather than raising."""
    try:
        is_valid, _, predicted_sql, _ = verify_format_and_extract(completion)
        if not is_valid or predicted_sql is None:
            return -1.0, "format check failed (one solution block, think blocks, think after every observation)"
        same, reason = compare_results(db_file, predicted_sql, reference, limits)
        return (1.0 if same else 0.0), reason
    except Exception as exc:
        return 0.0, f"scoring failed: {type(exc).__name__}: {exc}"


def calculate_reward_single(completion: str, reference: str, db_file: str, limits: QueryLimits = REWARD_LIMITS) -> float:
    return score_with_reason(completion, reference, db_file, limits)[0]


def compute_score_single(completion: str, reference: str, db_file: str, limits: QueryLimits = REWARD_LIMITS) -> float:
    """The episode reward; any unexpected failure scores 0.0 rather than raising."""
    return score_with_reason(completion, reference, db_file, limits)[0]
