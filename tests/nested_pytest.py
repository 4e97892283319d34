"""A pytest run inside a test, with options of its own only."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Mapping, Optional


def run_pytest(*args: str, env: Optional[Mapping[str, str]] = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` in a process of its own. The outer run's ``PYTEST_ADDOPTS`` and ``PYTEST_PLUGINS``
    are left out: a plugin or option given to the suite (a timing plugin, ``-x``, ``--lf``) would load into the inner
    run, which has its own rootdir and may not import it."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    return subprocess.run([sys.executable, "-m", "pytest", *args], env=env, **kwargs)
