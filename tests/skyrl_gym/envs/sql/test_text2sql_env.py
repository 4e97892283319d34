"""text2sql episodes on the generated SQLite databases: observations, rewards, layouts, safety."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

import skyrl_gym
from skyrl_gym.envs.sql.dataset import load_public_rows
from skyrl_gym.envs.sql.env import INVALID_ACTION_MESSAGE
from skyrl_gym.envs.sql.utils import verify_format_and_extract
from skyrl_gym.errors import DataError
from tests.tool_env_support import build_sample_databases, first_observation, sha256_of


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("text2sql")
    rows = build_sample_databases(out)
    return out, rows


def make_env(sample, index=0, **extras):
    out, rows = sample
    row = dict(rows[index], **extras)
    return skyrl_gym.make("text2sql", env_config={"db_path": str(out), "sql_timeout_s": 1.0}, extras=row), row


def test_rows_carry_prompt_schema_and_gold_sql(sample):
    out, rows = sample
    assert len(rows) == 16
    row = rows[0]
    assert row["env_class"] == "text2sql" and row["db_file"] == "databases/retail.sqlite"
    assert "CREATE TABLE customers" in row["prompt"][1]["content"]
    assert row["extra_info"]["question"] in row["prompt"][1]["content"]
    assert [json.loads(line)["reward_spec"] for line in open(out / "rows.jsonl")][0] == row["reward_spec"]


def test_explore_then_solve_scores_one(sample):
    env, row = make_env(sample, index=0)
    prompt, _ = env.init(row["prompt"])
    assert prompt == row["prompt"]
    out1 = env.step("<think>Which countries are there?</think>\n<sql>SELECT DISTINCT country FROM customers ORDER BY country</sql>")
    observation = first_observation(out1)
    assert out1["reward"] == 0.0 and not out1["done"]
    assert observation.startswith("\n\n<observation>") and observation.endswith("</observation>\n\n")
    assert "Portugal" in observation and "rows]" in observation
    assert "<reminder>You have 4 turns left to complete the task.</reminder>" in observation
    assert out1["metadata"]["tool_input"][1] == "SELECT DISTINCT country FROM customers ORDER BY country"
    out2 = env.step("<think>Count them.</think>\n<solution>SELECT count(customer_id) FROM customers WHERE country='Portugal';</solution>")
    assert out2["done"] and out2["observations"] == []
    assert out2["reward"] == 1.0
    assert env.get_metrics()["solved"] is True


def test_wrong_query_scores_zero_and_bad_format_scores_minus_one_with_the_reason(sample):
    env, _ = make_env(sample, index=0)
    wrong = env.step("<think>guess</think><solution>SELECT COUNT(*) FROM customers</solution>")
    assert wrong["reward"] == 0.0 and wrong["metadata"]["reward_reason"] == "different rows (1 returned, 1 expected)"
    env, _ = make_env(sample, index=0)
    broken = env.step("<think>guess</think><solution>SELECT COUNT(*) FROM clients</solution>")
    assert broken["reward"] == 0.0 and "no such table: clients" in broken["metadata"]["reward_reason"]
    env, _ = make_env(sample, index=0)
    unformatted = env.step("<solution>SELECT COUNT(*) FROM customers WHERE country = 'Portugal'</solution>")
    assert unformatted["reward"] == -1.0 and unformatted["metadata"]["reward_reason"].startswith("format check failed")


def test_observation_not_followed_by_thinking_fails_the_format(sample):
    env, row = make_env(sample, index=0)
    env.step("<think>look</think><sql>SELECT 1</sql>")
    final = env.step(f"Here it is.<think>ok</think><solution>{row['reward_spec']['ground_truth']}</solution>")
    assert final["reward"] == -1.0


def test_invalid_action_gets_the_expected_format(sample):
    env, _ = make_env(sample, index=0)
    out = env.step("<think>I forgot the tool tags</think> SELECT 1")
    observation = first_observation(out)
    assert INVALID_ACTION_MESSAGE in observation and "sql tags" in observation
    assert out["metadata"]["tool_input"][1] is None and not out["done"]


def test_invalid_action_then_correct_solution_still_scores_one(sample):
    env, row = make_env(sample, index=3)
    env.step("<think>no tool call</think>")
    final = env.step(f"<think>now</think>\n<solution>{row['reward_spec']['ground_truth']}</solution>")
    assert final["reward"] == 1.0


def test_max_turns_without_solution_ends_with_format_failure(sample):
    env, _ = make_env(sample, index=0, max_turns=2)
    assert not env.step("<think>a</think><sql>SELECT 1</sql>")["done"]
    final = env.step("<think>b</think><sql>SELECT 2</sql>")
    assert final["done"] and final["reward"] == -1.0


def test_malicious_queries_are_contained_and_the_episode_goes_on(sample):
    out, rows = sample
    db_file = out / "databases" / "retail.sqlite"
    before = sha256_of(db_file)
    env, row = make_env(sample, index=0, max_turns=8)
    attacks = {
        "DROP TABLE customers": "DROP statements are not allowed",
        "ATTACH DATABASE 'evil.db' AS evil": "ATTACH statements are not allowed",
        "PRAGMA writable_schema=ON": "changes database settings",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c": "SQL Timeout",
        "SELECT a.order_id FROM order_items a, order_items b": "Truncated to the first 50 of more than 100000 rows",
    }
    for sql, expected in attacks.items():
        out_step = env.step(f"<think>try</think><sql>{sql}</sql>")
        assert expected in first_observation(out_step), sql
        assert not out_step["done"]
    final = env.step(f"<think>done</think><solution>{row['reward_spec']['ground_truth']}</solution>")
    assert final["reward"] == 1.0
    assert sha256_of(db_file) == before
    assert env.get_metrics()["sql_errors"] == 4


def test_wall_clock_and_memory_attacks_end_as_observations_and_a_zero_reward(sample):
    """Issue 13 inside an episode, on the tool-worker path: a C-level loop SQLite's interrupt cannot
    stop, a row too big to keep, then the same loop as the solution; the episode goes on and ends. The row too big
    to keep is asked in an episode whose queries may run 30 s, so that its memory limit, not the clock, stops it
    (with 1 s, a loaded machine's clock came first)."""
    out, rows = sample
    row = rows[0]
    env = skyrl_gym.make("text2sql", env_config={"db_path": str(out), "sql_timeout_s": 1.0, "reward_timeout_s": 1.0},
                         extras=row)
    roomy = skyrl_gym.make("text2sql", env_config={"db_path": str(out), "sql_timeout_s": 30.0}, extras=row)
    slow = "SELECT printf('%.*c', 1000000000, 'x')"
    wide = "SELECT " + ", ".join(["zeroblob(9000000)"] * 300)

    async def main():
        start = time.monotonic()
        first = await env.astep(f"<think>t</think><sql>{slow}</sql>")
        second = await roomy.astep(f"<think>t</think><sql>{wide}</sql>")
        final = await env.astep(f"<think>t</think><solution>{slow}</solution>")
        return first, second, final, time.monotonic() - start

    first, second, final, elapsed = asyncio.run(main())
    assert "SQL Timeout: query stopped: ran longer than 1 s (limit timeout_s)" in first_observation(first)
    assert "(limit memory_bytes)" in first_observation(second) and not second["done"]
    assert not first["done"]  # the episode went on past its timed-out query
    assert final["done"] and final["reward"] == 0.0
    assert "(limit timeout_s)" in final["metadata"]["reward_reason"], final["metadata"]["reward_reason"]
    assert elapsed < 60, f"three bounded queries took {elapsed:.0f} s"


def test_destructive_solution_scores_zero_and_changes_nothing(sample):
    out, _ = sample
    db_file = out / "databases" / "retail.sqlite"
    before = sha256_of(db_file)
    env, _ = make_env(sample, index=0)
    assert env.step("<think>x</think><solution>DELETE FROM customers</solution>")["reward"] == 0.0
    assert sha256_of(db_file) == before


def test_spider_layout_resolves_db_id_and_public_loader_reads_questions(tmp_path):
    rows = build_sample_databases(tmp_path, layout="spider")
    assert (tmp_path / "spider" / "database" / "flights" / "flights.sqlite").is_file()
    assert rows[0]["data"] == "spider" and "db_file" not in rows[0]
    env = skyrl_gym.make("sql", env_config={"db_path": str(tmp_path)}, extras=rows[-1])
    gold = rows[-1]["reward_spec"]["ground_truth"]
    assert env.step(f"<think>t</think><solution>{gold}</solution>")["reward"] == 1.0
    loaded = list(load_public_rows(str(tmp_path), "spider", "train"))
    assert [r["reward_spec"]["ground_truth"] for r in loaded] == [r["reward_spec"]["ground_truth"] for r in rows]
    assert loaded[0]["prompt"][1]["content"] == rows[0]["prompt"][1]["content"]


def test_prepare_public_dataset_script_writes_parquet_rows_the_env_accepts(tmp_path):
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from tests.tool_env_support import REPO_ROOT

    build_sample_databases(tmp_path, layout="bird")
    out = tmp_path / "bird.parquet"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "text2sql" / "prepare_public_dataset.py"), str(out),
         "--db-path", str(tmp_path), "--dataset", "bird", "--limit", "3"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 3 and rows[0]["data"] == "bird"
    env = skyrl_gym.make("text2sql", env_config={"db_path": str(tmp_path)}, extras=rows[1])
    gold = rows[1]["reward_spec"]["ground_truth"]
    assert env.step(f"<think>t</think><solution>{gold}</solution>")["reward"] == 1.0


def test_bad_rows_get_errors_that_name_the_field(sample, tmp_path):
    out, rows = sample
    with pytest.raises(DataError, match="data='wikisql'"):
        skyrl_gym.make("text2sql", env_config={"db_path": str(out)}, extras={**rows[0], "db_file": None, "data": "wikisql"})
    with pytest.raises(DataError, match="ground_truth"):
        skyrl_gym.make("text2sql", env_config={"db_path": str(out)}, extras={"db_file": rows[0]["db_file"]})
    (tmp_path / "notes.sqlite").write_text("not a database")
    with pytest.raises(DataError, match="is not a SQLite 3 file"):
        skyrl_gym.make("text2sql", env_config={}, extras={**rows[0], "db_file": str(tmp_path / "notes.sqlite")})
    with pytest.raises(DataError, match="'nowhere.sqlite': database file not found"):
        skyrl_gym.make("text2sql", env_config={"db_path": str(out)}, extras={**rows[0], "db_file": "nowhere.sqlite"})


def test_a_relative_db_file_without_db_path_says_to_set_db_path(sample, tmp_path, monkeypatch):
    """The sample rows name their databases relative to the data folder; read without env_config.db_path (from
    another folder) they are not found, and the error says which setting was missing."""
    out, rows = sample
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as raised:
        skyrl_gym.make("text2sql", env_config={}, extras=rows[0])
    message = str(raised.value)
    assert f"{rows[0]['db_file']!r}: database file not found at {rows[0]['db_file']}" in message
    assert "read from env_config.db_path, which is not set" in message
    # the fix it names works
    skyrl_gym.make("text2sql", env_config={"db_path": str(out)}, extras=rows[0]).close()


def test_rows_cannot_reach_files_outside_the_data_folder(sample, tmp_path):
    """A row is data from whoever wrote it (a client of serve-env included): with db_path set, it may name
    only databases inside it, and no error shows a byte of a file."""
    out, rows = sample
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.sqlite"
    secret.write_bytes((out / rows[0]["db_file"]).read_bytes())  # a real SQLite file, queryable if reached
    (outside / "notes.txt").write_text("TOP-SECRET-CONTENT")
    (out / "link.sqlite").symlink_to(secret)
    (out / "linked_dir").symlink_to(outside, target_is_directory=True)
    attempts = {
        "absolute path elsewhere": {"db_file": str(secret)},
        "climbing out with ..": {"db_file": os.path.relpath(secret, out)},
        "a link to a file outside": {"db_file": "link.sqlite"},
        "a linked folder": {"db_file": "linked_dir/secret.sqlite"},
        "a non-database outside": {"db_file": str(outside / "notes.txt")},
        "db_id climbing out": {"db_file": None, "data": "spider", "db_id": "../../../outside/secret"},
    }
    for what, fields in attempts.items():
        with pytest.raises(DataError, match="outside the data folder") as refused:
            skyrl_gym.make("text2sql", env_config={"db_path": str(out)}, extras={**rows[0], **fields})
        assert "TOP-SECRET" not in str(refused.value) and "SQLite format" not in str(refused.value), what
    (out / "notes.txt").write_text("TOP-SECRET-CONTENT")
    with pytest.raises(DataError, match="is not a SQLite 3 file") as not_sqlite:
        skyrl_gym.make(
            "text2sql", env_config={"db_path": str(out)}, extras={**rows[0], "db_file": "notes.txt"}
        )
    assert "TOP-SECRET" not in str(not_sqlite.value)  # the error names the file, never its bytes
    inside = skyrl_gym.make("text2sql", env_config={"db_path": str(out)}, extras=rows[0])  # honest rows work
    inside.close()


def test_one_bad_episode_does_not_affect_others_running_concurrently(sample):
    """Episodes awaited together on one loop: a never-ending query in one, normal ones in the rest."""
    out, rows = sample

    async def episode(index: int, sql: str) -> float:
        row = rows[index]
        env = skyrl_gym.make("text2sql", env_config={"db_path": str(out), "sql_timeout_s": 1.0}, extras=row)
        await env.astep(f"<think>look</think><sql>{sql}</sql>")
        final = await env.astep(f"<think>answer</think><solution>{row['reward_spec']['ground_truth']}</solution>")
        return final["reward"]

    async def main():
        endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
        jobs = [episode(i % len(rows), endless if i == 0 else "SELECT 1") for i in range(24)]
        return await asyncio.gather(*jobs)

    assert asyncio.run(main()) == [1.0] * 24


@pytest.mark.parametrize(
    "output, valid",
    [
        ("<think>t</think>\n<solution>SELECT 1</solution>", True),
        ("<solution>SELECT 1</solution>", False),
        ("<think>t</think><solution>SELECT 1<solution>x</solution>", False),
        ("<think>t</think><solution>SELECT 1</solution>x</solution>", False),
        ("<think>t</think><solution><sql>SELECT 1</sql></solution>", False),
        ("<observation>o</observation>\n<think>t</think><solution>SELECT 1</solution>", True),
        ("<observation>o</observation>\ntext<think>t</think><solution>SELECT 1</solution>", False),
        ("", False),
    ],
)
def test_verify_format_matches_skyrl_gym_rules(output, valid):
    is_valid, thoughts, solution, _ = verify_format_and_extract(output)
    assert is_valid is valid
    assert (solution is not None) is valid and (thoughts is not None) is valid


def _skyrl_gym_format_check(output):
    """SkyRL-gym's rules as it wrote them (regular expressions, a copy of the rest per observation): the
    reference the linear check must agree with."""
    import re

    if output.count("<solution>") != 1:
        return False, None
    before, after = output.split("<solution>", 1)
    if after.count("</solution>") != 1:
        return False, None
    solution = after.split("</solution>", 1)[0]
    if re.search(r"</?(think|sql|observation)\b", solution, re.IGNORECASE):
        return False, None
    thoughts = re.findall(r"<think>(.*?)</think>", output, re.DOTALL)
    if not thoughts:
        return False, None
    for match in re.finditer(r"</observation>", before, re.IGNORECASE):
        if not before[match.end() :].lstrip().lower().startswith("<think>"):
            return False, None
    return True, thoughts


def test_the_format_check_agrees_with_skyrl_gyms_rules():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pieces = ["<think>", "</think>", "<solution>", "</solution>", "<observation>", "</observation>",
              "</OBSERVATION>", "<THINK>", " ", "\n", "x", "<sql>"]

    @settings(max_examples=800, deadline=None)
    @given(st.lists(st.sampled_from(pieces), max_size=16).map("".join))
    def agree(output):
        is_valid, thoughts, _, _ = verify_format_and_extract(output)
        assert (is_valid, thoughts) == _skyrl_gym_format_check(output)

    agree()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("unit", ["<think>", "</observation>\n<think>"])
def test_a_megabyte_before_the_solution_is_checked_at_once(unit):
    """A final answer after 1 MB of "<think>" took the format check 467 s: every unclosed <think> was searched
    to the end of the text, and every </observation> checked on a copy of the rest."""
    output = "<think>t</think>" + unit * (1_000_000 // len(unit)) + "<solution>SELECT 1</solution>"
    assert verify_format_and_extract(output)[0] is True


def test_the_audit_names_rows_whose_gold_result_is_empty(tmp_path):
    """Result sets are compared (as SkyRL-gym does), so a query that returns nothing is paid on a row whose gold
    query returns nothing: the audit's hack finds such rows in a user's dataset, and the shipped audit rows pass."""
    import shutil

    from skyrl_gym.audit import FALSE_POSITIVE, audit_env
    from skyrl_gym.envs.sql.audit import _database, audit_rows

    database = shutil.copy(_database(), tmp_path / "payments.sqlite")
    rows = audit_rows(2, 0)
    for row in rows:
        row["db_file"] = str(database)
    rows[1]["reward_spec"]["ground_truth"] = "SELECT customer FROM payments WHERE amount > 100000"
    report = audit_env("text2sql", rows, hacks=["query that returns no rows"], env_config={"reward_timeout_s": 3.0})
    verdicts = {(case.row_index, case.verdict) for case in report.cases if case.kind == "hack"}
    assert verdicts == {(0, "ok"), (1, FALSE_POSITIVE)}, report.table()
