"""Wording of the lines the package prints for people."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless it is one: ``counted(1, "step")`` is ``"1 step"``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


__all__ = ["counted"]
