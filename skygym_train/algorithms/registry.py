"""Name -> function registries, so that users add algorithms without editing the trainer.

``@register_advantage_estimator("my_adv")`` or ``@register_policy_loss("my_loss")`` in the user's own
module, then ``trainer.algorithm.advantage_estimator=my_adv``. The trainer looks names up in the
driver and hands the function itself to its workers, so Ray workers need no registration of their own.
"""

from __future__ import annotations

import difflib
from typing import Callable, Dict, Generic, List, TypeVar

F = TypeVar("F", bound=Callable)


class FunctionRegistry(Generic[F]):
    def __init__(self, kind: str):
        self.kind = kind
        self._functions: Dict[str, F] = {}

    def register(self, name: str, func: F, *, override: bool = False) -> F:
        name = str(name)
        if name in self._functions and not override:
            raise ValueError(f"{self.kind} {name!r} is already registered (pass override=True to replace it)")
        self._functions[name] = func
        return func

    def decorator(self, name: str, *, override: bool = False) -> Callable[[F], F]:
        def wrap(func: F) -> F:
            return self.register(name, func, override=override)

        return wrap

    def get(self, name: str) -> F:
        try:
            return self._functions[str(name)]
        except KeyError:
            close = difflib.get_close_matches(str(name), list(self._functions), n=2)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise KeyError(
                f"unknown {self.kind} {name!r}{hint} (registered: {', '.join(sorted(self._functions))})"
            ) from None

    def unregister(self, name: str) -> None:
        if name not in self._functions:
            raise KeyError(f"{self.kind} {name!r} is not registered")
        del self._functions[name]

    def names(self) -> List[str]:
        return sorted(self._functions)

    def __contains__(self, name: object) -> bool:
        return name in self._functions
