"""Find a dataset row's SQLite file and describe its schema.

Rows name their database as SkyRL-gym's do: ``extras["data"]`` (``synsql``, ``spider`` or
``bird``) plus ``extras["db_id"]``, resolved under ``env_config.db_path`` with the folder layout
of each public dataset; or directly with ``extras["db_file"]`` (relative to ``db_path``, or absolute) for
any other database. With ``db_path`` set, the file must lie inside it (symlinks followed).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, Dict, List, Mapping, Optional

from skyrl_gym.errors import DataError
from skyrl_gym.tools.sqlite_readonly import open_read_only

# Where each public dataset keeps its databases, relative to ``db_path``:
# <db_path>/<folder>/<db_id>/<db_id>.sqlite
DATASET_DB_FOLDERS: Dict[str, str] = {
    "synsql": os.path.join("SynSQL-2.5M", "databases"),
    "spider": os.path.join("spider", "database"),
    "bird": os.path.join("bird", "train", "train_databases"),
}


def _inside(folder: str, path: str) -> bool:
    """True when ``path``, every symlink followed, lies inside ``folder`` (itself resolved)."""
    root = os.path.realpath(folder)
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def resolve_database_file(extras: Mapping[str, Any], db_path: Optional[str]) -> str:
    """The SQLite file a row refers to; raises ``DataError`` naming the field.

    With ``db_path`` set (always, on a server: the operator's data folder), the file must lie inside it once
    every symlink is followed: a row naming an absolute path elsewhere, climbing out with ``..`` or through a
    link is refused before the file is looked at, so a row learns nothing of files outside the folder. Errors
    never show a file's contents."""
    db_file = extras.get("db_file")
    if db_file:
        field, path = "db_file", str(db_file)
        if not os.path.isabs(path) and db_path:
            path = os.path.join(str(db_path), path)
    else:
        db_id = extras.get("db_id")
        data = extras.get("data")
        if not db_id:
            raise DataError('text2sql row needs "db_file", or "db_id" with "data" (one of synsql, spider, bird)')
        if data not in DATASET_DB_FOLDERS:
            raise DataError(
                f'text2sql row has data={data!r}; expected one of {sorted(DATASET_DB_FOLDERS)} '
                f'(or give the database path in "db_file")'
            )
        if not db_path:
            raise DataError(f"text2sql env_config.db_path is not set; it must point at the folder holding {DATASET_DB_FOLDERS[data]}")
        field = "db_id"
        path = os.path.join(str(db_path), DATASET_DB_FOLDERS[data], str(db_id), f"{db_id}.sqlite")
    if "\0" in path:
        raise DataError(f"text2sql row's {field} holds a NUL character")
    if db_path and not _inside(str(db_path), path):
        raise DataError(
            f"text2sql row's {field} {str(db_file or extras.get('db_id'))!r:.200} names a file outside the "
            f"data folder (env_config.db_path); databases must lie inside it (no absolute paths elsewhere, "
            f"no '..', no links out of it)"
        )
    # A row's mistake, said in the row's words: the data folder's own path stays on the server.
    named = f"text2sql row's {field} {str(db_file or extras.get('db_id'))!r:.200}"
    if not os.path.isfile(path):
        where = " in the data folder (env_config.db_path)" if db_path else f" at {path}"
        if not db_path and not os.path.isabs(path):
            where += (" (a relative db_file is read from env_config.db_path, which is not set: set it to the "
                      "folder that holds the databases, e.g. env_config {\"db_path\": \"/data/sql\"})")
        raise DataError(f"{named}: database file not found{where}")
    try:
        with open(path, "rb") as handle:
            header = handle.read(16)
    except OSError as exc:
        raise DataError(f"{named}: the database cannot be read ({exc.strerror})") from None
    if header != b"SQLite format 3\x00":
        raise DataError(f"{named} is not a SQLite 3 file")
    return path


def schema_ddl(db_file: str) -> str:
    """The ``CREATE TABLE`` statements of a database, as text prompts show the schema."""
    conn: Optional[sqlite3.Connection] = None
    try:
        conn = open_read_only(db_file)
        rows: List[tuple] = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND sql IS NOT NULL ORDER BY rowid"
        ).fetchall()
    finally:
        if conn is not None:
            conn.close()
    return "\n\n".join(row[0].strip() + ";" for row in rows)
