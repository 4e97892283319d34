"""The configuration error, in a module of its own: the loader imports the validation, which raises it too."""

from __future__ import annotations

from typing import Sequence, Union


class ConfigError(ValueError):
    """A configuration that cannot run; the message names every offending key and why."""

    def __init__(self, problems: Union[str, Sequence[str]]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid trainer configuration:\n{lines}")
