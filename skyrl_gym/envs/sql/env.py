"""``text2sql`` (also ``sql``): answer a question with SQL, exploring a real SQLite database.

Each turn the model either runs one exploratory query with ``<sql>...</sql>`` and reads the result
inside ``<observation>...</observation>`` (with a reminder of the turns left), or ends the episode
with its final query in ``<solution>...</solution>``. The episode also ends at ``max_turns``.
Only the final step is rewarded: see :mod:`skyrl_gym.envs.sql.utils`.

Dataset row (extras)::

    {"db_id": "retail", "data": "spider" | "bird" | "synsql"  (or "db_file": "/path/x.sqlite"),
     "reward_spec": {"method": "rule", "ground_truth": "<gold SQL>"}, "max_turns": 5}

``env_config``: ``db_path`` (root of the public layouts), ``sql_timeout_s`` (per tool query,
default 5), ``reward_timeout_s`` (default 30), ``max_rows_shown`` (default 50), ``max_turns``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym.core import ConversationType, StepOutput
from skyrl_gym.envs._common import require_ground_truth, turn_limit, uses_default_tool_path
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.config_values import config_value
from skyrl_gym.envs.sql.databases import resolve_database_file
from skyrl_gym.envs.sql.utils import REWARD_LIMITS, score_with_reason
from skyrl_gym.errors import DataError
from skyrl_gym.tools.blocking import run_cpu_bound
from skyrl_gym.tools.parsers import tag_or_json_call
from skyrl_gym.tools.sql import INVALID_ACTION_MESSAGE, SQLCodeExecutorToolGroup, SQLDisplay
from skyrl_gym.tools.sqlite_readonly import QueryLimits, QueryResult

@dataclass
class Text2SQLEnvConfig:
    """Settings shared by all text2sql episodes (SkyRL-gym's ``db_path`` plus limits)."""

    db_path: Optional[str] = None
    sql_timeout_s: float = QueryLimits.timeout_s
    reward_timeout_s: float = REWARD_LIMITS.timeout_s
    max_rows_shown: int = 50
    max_turns: int = 5


class SQLEnv(BaseTextEnv):
    """Multi-turn text-to-SQL over one read-only SQLite database per episode."""

    # The defaults of the env_config keys it reads: also serve-env's ceilings of what a client may set.
    config_defaults = dataclasses.asdict(Text2SQLEnvConfig())
    # On serve-env the operator must give the data folder: without it a row's db_file could name any file.
    server_requires_env_config = ("db_path",)

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        extras = self.extras
        gold_sql = require_ground_truth(extras, "text2sql")
        if not isinstance(gold_sql, str):
            raise DataError(f'text2sql row needs "reward_spec": {{"ground_truth": "<gold SQL query>"}}, got {gold_sql!r}')
        self.gold_sql: str = gold_sql
        self.db_id: Optional[str] = extras.get("db_id")
        self.task: Optional[str] = extras.get("data")
        self.db_path: Optional[str] = config_value(env_config, "db_path")
        self.db_file: str = resolve_database_file(extras, self.db_path)
        defaults = self.config_defaults
        self.max_turns = turn_limit(extras, env_config, defaults["max_turns"], "text2sql")
        sql_timeout_s = float(config_value(env_config, "sql_timeout_s", defaults["sql_timeout_s"]))
        tool_limits = dataclasses.replace(QueryLimits(), timeout_s=sql_timeout_s)
        self.reward_limits = dataclasses.replace(
            REWARD_LIMITS,
            timeout_s=float(config_value(env_config, "reward_timeout_s", defaults["reward_timeout_s"])),
        )
        max_rows_shown = int(config_value(env_config, "max_rows_shown", defaults["max_rows_shown"]))
        display = SQLDisplay(max_rows_shown=max_rows_shown)
        self.tool_group = SQLCodeExecutorToolGroup(
            os.path.dirname(os.path.dirname(self.db_file)), db_file=self.db_file, limits=tool_limits, display=display
        )
        self.init_tool_groups([self.tool_group])

        # role/content of every action and observation: the reward reads them joined together.
        self.chat_history: ConversationType = []
        self._tool_calls = 0
        self._tool_errors = 0
        self._final_reward: Optional[float] = None

    # ----- parsing -----------------------------------------------------------------------------
    def _parse_action(self, action: str) -> Tuple[str, str, Tuple[Optional[str], Optional[str], int]]:
        """``(group, tool, (db_id, sql_or_None, turns_left))`` as SkyRL-gym reports it; the query is the first
        complete ``<sql>`` block, or a function-calling agent's JSON call of ``sql``."""
        sql = tag_or_json_call(action, "sql", "sql")
        return self.tool_group.get_name(), "sql", (self.db_id, sql, self.max_turns - self.turns)

    def _is_done(self, action: str) -> bool:
        if self.turns >= self.max_turns:
            return True
        return "<solution>" in action and "</solution>" in action

    def tool_schemas(self) -> List[Dict[str, Any]]:
        """The ``sql`` tool as a model calls it: the query alone (the env knows the database and the turns left,
        which the tool group's own schema asks for)."""
        return [{"type": "function", "function": {
            "name": "sql",
            "description": "Run one read-only SQLite query on this episode's database and see the rows it returns.",
            "parameters": {"type": "object", "properties": {
                "sql": {"type": "string", "description": "a single SELECT statement"}}, "required": ["sql"]},
        }}]

    # ----- one step, shared by step() and astep() -------------------------------------------------
    def _begin(self, action: str) -> Tuple[bool, Tuple[str, str, Any]]:
        if not isinstance(action, str):
            action = "" if action is None else str(action)
        self.turns += 1
        self.chat_history.append({"role": "assistant", "content": action})
        done = self._is_done(action)
        return done, ("", "", None) if done else self._parse_action(action)

    def _reward_args(self) -> Tuple[Any, ...]:
        """``score_with_reason``'s arguments (the reward reads the whole transcript)."""
        transcript = "".join(message["content"] for message in self.chat_history)
        return transcript, self.gold_sql, self.db_file, self.reward_limits

    def _final_output(self, scored: Tuple[float, str]) -> StepOutput:
        reward, reason = scored
        self._final_reward = float(reward)
        return StepOutput(observations=[], reward=float(reward), done=True,
                          metadata={"db_id": self.db_id, "reward_reason": reason})

    def _observe(self, call: Tuple[str, str, Any], text: str, result: Optional[QueryResult]) -> StepOutput:
        group_name, tool_name, tool_input = call
        if result is not None:
            self._tool_calls += 1
            self._tool_errors += int(not result.ok)
        observation = {"role": "user", "content": text}
        self.chat_history.append(observation)
        metadata: Dict[str, Any] = {"tool_group": group_name, "tool_name": tool_name, "tool_input": tool_input}
        if result is not None and not result.ok:
            metadata["tool_error"] = result.error_kind
        return StepOutput(observations=[observation], reward=0.0, done=False, metadata=metadata)

    def _tool_text(self, call: Tuple[str, str, Any]) -> Tuple[str, Optional[QueryResult]]:
        """The observation from ``_execute_tool`` (so a subclass overriding it is used); a tool that
        raises gives its message as the observation, as in SkyRL-gym."""
        if hasattr(self.tool_group, "last_result"):
            self.tool_group.last_result = None  # so an override that skips the tool reports no query
        try:
            text = self._execute_tool(*call)
        except Exception as exc:
            return str(exc), None
        return str(text), getattr(self.tool_group, "last_result", None)

    def step(self, action: str) -> StepOutput:
        done, call = self._begin(action)
        if done:
            return self._final_output(score_with_reason(*self._reward_args()))
        return self._observe(call, *self._tool_text(call))

    async def astep(self, action: str) -> StepOutput:
        """Like :meth:`step`, with the queries (sqlglot parsing, SQLite) run in tool worker processes,
        so hundreds of concurrent episodes neither block the event loop nor fight it for the GIL."""
        done, call = self._begin(action)
        if done:
            return self._final_output(await run_cpu_bound(score_with_reason, *self._reward_args()))
        if not uses_default_tool_path(self, self.tool_group):
            from skyrl_gym.tools.blocking import run_blocking

            return self._observe(call, *(await run_blocking(self._tool_text, call)))
        db_id, sql, turns_left = call[2]
        result = await self.tool_group.arun(sql.strip()) if sql is not None else None
        body = self.tool_group.render(result) if result is not None else INVALID_ACTION_MESSAGE
        reminder = f"<reminder>You have {turns_left} turns left to complete the task.</reminder>"
        return self._observe(call, f"\n\n<observation>{body}\n{reminder}</observation>\n\n", result)

    async def ainit(self, prompt: ConversationType = None) -> Tuple[ConversationType, Dict[str, Any]]:
        return self.init(prompt)

    def get_metrics(self) -> Dict[str, Any]:
        return {
            "turns": self.turns,
            "sql_calls": self._tool_calls,
            "sql_errors": self._tool_errors,
            "solved": self._final_reward == 1.0,
            "format_ok": self._final_reward is not None and self._final_reward >= 0.0,
        }
