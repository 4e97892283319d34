"""``skyrl-gym`` subcommands contributed by the adapters package (entry-point group ``skyrl_gym.cli``)."""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


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


def report_errors(errors: Sequence[Optional[str]], allow_errors: bool) -> int:
    """The exit status of a command that played episodes (``eval``, ``agent eval``): 1 when any errored (an
    env that cannot be built, a bad row, an engine or server that does not answer), naming the first error on
    stderr; 0 with ``--allow-errors`` (then a warning)."""
    failed = [e for e in errors if e is not None]
    if not failed:
        return 0
    level = "warning" if allow_errors else "error"
    print(f"{level}: {len(failed)} of {len(errors)} trajectories errored "
          f"(first: {failed[0]}); see 'error' in the trajectories file"
          + ("" if allow_errors else "; pass --allow-errors to exit 0 anyway"), file=sys.stderr)
    return 0 if allow_errors else 1


def local_hf_engine(model: str, device: Optional[str], dtype: Optional[str]) -> Tuple[Any, Callable[[], None]]:
    """The HF engine on ``model`` in this process (``eval --engine hf``, ``agent eval --local-model``), and the call
    that puts back the CPU thread count it chose. A model that cannot be found raises ``ModelResolutionError``."""
    from skygym_adapters.engines import make_engine
    from skygym_adapters.models import fit_cpu_threads_to_load

    engine = make_engine("hf", model=model, device=device, dtype=dtype)
    busy, restore = fit_cpu_threads_to_load()  # said once the model has loaded: a bad model is the one line
    if busy:
        print(busy, file=sys.stderr)
    return engine, restore
