"""Runs the kit: built-in cases (from :mod:`.cases`) through the default adapters (from :mod:`.adapters`),
checked against the reference play with :mod:`.kit`'s checks."""

from __future__ import annotations

import copy
from typing import Any, List, Optional, Sequence

from skygym_adapters.conformance.adapters import default_adapters
from skygym_adapters.conformance.cases import builtin_case_set
from skygym_adapters.conformance.kit import (
    CHECKS,
    FAIL,
    SKIPPED,
    AdapterReport,
    Case,
    ConformanceReport,
    Context,
    check_runs,
    play_reference,
)


class BadCases(ValueError):
    """Cases :func:`run_conformance` cannot play: none, one of another env, two of one prompt."""


def check_cases(env_id: str, cases: Sequence[Case]) -> None:
    """Raise :class:`BadCases` naming what is wrong with ``cases`` before any is played."""
    if not cases:
        raise BadCases(f"no conformance cases for env {env_id!r}")
    for case in cases:
        if case.row.get("env_class") not in (None, env_id):
            raise BadCases(f"a case for {env_id!r} has env_class {case.row['env_class']!r}")
    keys = [case.key for case in cases]
    if len(set(keys)) != len(keys):
        raise BadCases("conformance cases need distinct prompts (the scripted engine finds its script by prompt)")


def run_conformance(
    env_id: str,
    cases: Optional[Sequence[Case]] = None,
    adapters: Optional[Sequence[Any]] = None,
    context: Optional[Context] = None,
    only: Optional[Sequence[str]] = None,
) -> ConformanceReport:
    """Replay ``cases`` (default: the env's built-in cases, resources included) through each available adapter.

    An adapter that raises is reported as failing ``ran`` with the error; it does not stop the others.
    ``only`` restricts the run to adapters with those names.
    """
    if cases is None:
        with builtin_case_set(env_id) as builtin:
            return run_conformance(env_id, builtin, adapters, context, only)
    cases = list(cases)
    check_cases(env_id, cases)
    for case in cases:
        case.row.setdefault("env_class", env_id)
    context = context or Context()
    references = [play_reference(case) for case in cases]
    reports = []
    if adapters is None:
        adapters = default_adapters()
    for adapter in adapters:
        if only is not None and adapter.name not in only:
            continue
        available, reason = adapter.available()
        if available and adapter.produces_tokens:
            reason = _missing_tokenizer(context)
            available = not reason
        if not available:
            reports.append(AdapterReport(adapter.name, {c: SKIPPED for c in CHECKS}, skipped_reason=reason))
            continue
        try:
            runs = adapter.run(cases, context, references)
        except Exception as exc:
            status = {c: FAIL for c in CHECKS}
            reports.append(AdapterReport(adapter.name, status, [f"the adapter raised {type(exc).__name__}: {exc}"]))
            continue
        reports.append(check_runs(adapter, runs, cases, references, context))
    return ConformanceReport(env_id, len(cases), reports)


def _missing_tokenizer(context: Context) -> str:
    """Why the token adapters cannot run here when an optional piece is missing (the embedded model's package,
    an extra), with the fix; "" when the tokenizer loads. Any other failure is the adapter's to report."""
    from skygym_adapters.models import EmbeddedModelMissing
    from skyrl_gym.extras import missing_extra_message

    try:
        context.require_tokenizer()
    except EmbeddedModelMissing as exc:
        return f"{exc}; or pass --model with a local checkpoint"
    except ModuleNotFoundError as exc:
        return missing_extra_message(exc) or ""  # a module no extra provides: the adapter reports it
    return ""


def builtin_cases(env_id: str) -> List[Case]:
    """Scripted cases of a built-in env that needs no running resources (see :mod:`skygym_adapters.conformance.cases`).

    Envs whose cases need a database, a retrieval server or a sandbox: use ``builtin_case_set(env_id)``.
    """
    with builtin_case_set(env_id) as cases:
        for case in cases:
            if case.env_config is not None:
                raise LookupError(f"the cases of {env_id!r} need running resources: use builtin_case_set({env_id!r})")
        return copy.deepcopy(cases)


__all__ = ["BadCases", "builtin_cases", "check_cases", "run_conformance"]
