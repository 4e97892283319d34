"""``skyrl-gym`` subcommands contributed by the adapters package (entry-point group ``skyrl_gym.cli``)."""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional


def read_rows(path: str, limit: Optional[int]) -> Optional[List[Dict[str, Any]]]:
    """The rows of ``path`` (first ``limit``), or None after printing why they cannot be used (exit code 2)."""
    from skyrl_gym.data import load_rows
    from skyrl_gym.errors import DataError

    try:
        rows = load_rows(path, limit=limit)
    except (DataError, OSError, ValueError) as exc:
        print(f"error: cannot read {path}: {exc}", file=sys.stderr)
        return None
    if not rows:
        print(f"error: {path} has no rows", file=sys.stderr)
        return None
    return rows
