"""What an env whose real env lives elsewhere (an env service, a Ray actor) shows to the episode driver.

A proxy takes the real env's ``max_turns``, whether that is still the default, and its tool schemas
from the answer to "create"; a ``max_turns`` the driver sets here reaches the real env with the next
step (``_max_turns_to_send``, cleared by :meth:`ProxyEnv._stepped`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from skyrl_gym.core import Env
from skyrl_gym.metrics import default_aggregate_metrics


class ProxyEnv(Env):
    def _describe(self, described: Mapping[str, Any]) -> None:
        """Take what the real env said about itself when it was created."""
        self.turns = 0
        self._max_turns: Optional[int] = described.get("max_turns")
        self._max_turns_is_default = bool(described.get("max_turns_is_default", True))
        self._max_turns_to_send: Optional[int] = None
        self._tool_schemas: List[Dict[str, Any]] = list(described.get("tool_schemas") or [])
        self._metrics: Optional[Dict[str, Any]] = None

    def _stepped(self, answer: Mapping[str, Any]) -> Any:
        """The step output of the real env's answer; takes its metrics and turn count."""
        self._max_turns_to_send = None
        self._metrics = answer.get("metrics")
        turns = answer.get("turns")
        self.turns = turns if isinstance(turns, int) else self.turns + 1
        return answer["output"]

    @property
    def max_turns(self) -> Optional[int]:
        return self._max_turns

    @max_turns.setter
    def max_turns(self, value: int) -> None:
        self._max_turns = value
        self._max_turns_is_default = False
        self._max_turns_to_send = value  # the real env hears it with the next step

    @property
    def max_turns_is_default(self) -> bool:
        return self._max_turns_is_default

    def tool_schemas(self) -> List[Dict[str, Any]]:
        return list(self._tool_schemas)

    @property
    def has_native_astep(self) -> bool:
        return True

    @staticmethod
    def aggregate_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
        return default_aggregate_metrics(metrics)
