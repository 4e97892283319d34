"""``search``: answer a question, calling a retrieval service with ``<search>query</search>``.

The results come back as ``<information>...</information>``; the episode ends on
``<answer>...</answer>`` or at ``max_turns`` (default 2). The reward is 1.0 when the last answer
matches a target after SQuAD normalisation, else 0.0 (see :mod:`skyrl_gym.envs.search.utils`).

Dataset row (extras)::

    {"reward_spec": {"method": "rule", "ground_truth": {"target": ["Paris"]}}, "max_turns": 2}

``env_config``: ``search_url`` (default ``http://127.0.0.1:8000/retrieve``), ``topk`` (3),
``timeout`` (30 s per attempt), ``log_requests``, ``retry_attempts`` (4), ``retry_delay_s`` (0.5).
Use ``astep`` from async code: the request is then awaited on the event loop.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym.core import ConversationType, StepOutput
from skyrl_gym.envs._common import require_ground_truth, turn_limit, uses_default_tool_path
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.config_values import config_value
from skyrl_gym.envs.search.utils import compute_score, extract_solution, targets_of
from skyrl_gym.errors import DataError
from skyrl_gym.tools.parsers import tag_or_json_call
from skyrl_gym.tools.search import DEFAULT_SEARCH_URL, RetryPolicy, SearchToolGroup


@dataclass
class SearchEnvConfig:
    log_requests: bool = False
    search_url: str = DEFAULT_SEARCH_URL
    topk: int = 3
    timeout: float = 30.0
    retry_attempts: int = 4
    retry_delay_s: float = 0.5


# The defaults of the env_config keys the search envs read: also serve-env's ceilings of what a client may
# set.
SEARCH_DEFAULTS: Dict[str, Any] = asdict(SearchEnvConfig())


def search_tool_group_from_config(env_config: Any) -> SearchToolGroup:
    """A ``SearchToolGroup`` configured from an env's ``env_config`` (shared by search envs)."""
    defaults = SEARCH_DEFAULTS
    retry = RetryPolicy(
        attempts=int(config_value(env_config, "retry_attempts", defaults["retry_attempts"])),
        initial_delay_s=float(config_value(env_config, "retry_delay_s", defaults["retry_delay_s"])),
    )
    return SearchToolGroup(
        search_url=str(config_value(env_config, "search_url", defaults["search_url"])),
        topk=int(config_value(env_config, "topk", defaults["topk"])),
        timeout=float(config_value(env_config, "timeout", defaults["timeout"])),
        log_requests=bool(config_value(env_config, "log_requests", defaults["log_requests"])),
        retry=retry,
    )


class SearchEnv(BaseTextEnv):
    """Multi-turn question answering with a search tool (Search-R1 style)."""

    config_defaults = {**SEARCH_DEFAULTS, "max_turns": 2}

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.ground_truth = require_ground_truth(self.extras, "search")
        try:
            targets_of(self.ground_truth)
        except ValueError as exc:
            raise DataError(f"env 'search': {exc}") from None
        self.max_turns = turn_limit(self.extras, env_config, self.config_defaults["max_turns"], "search")
        self.tool_group = search_tool_group_from_config(env_config)
        self.init_tool_groups([self.tool_group])
        self.chat_history: ConversationType = []
        self._searches = 0
        self._search_errors = 0
        self._final_reward: Optional[float] = None

    def _parse_action(self, action: str) -> List[Optional[str]]:
        """``[query]`` of the first complete ``<search>`` block (or of a JSON call of ``search``, a function-calling
        agent's), or ``[None]``."""
        return [tag_or_json_call(action, "search", "query")]

    def _get_reward(self, action: str, done: bool) -> float:
        if not done:
            return 0.0
        return compute_score("".join(m["content"] for m in self.chat_history), self.ground_truth)

    def _is_done(self, action: str) -> bool:
        if self.turns >= self.max_turns:
            return True
        return "<answer>" in action and "</answer>" in action

    def _begin(self, action: str) -> Tuple[Optional[StepOutput], List[Optional[str]]]:
        if not isinstance(action, str):
            action = "" if action is None else str(action)
        self.turns += 1
        self.chat_history.append({"role": "assistant", "content": action})
        if self._is_done(action):
            self._final_reward = self._get_reward(action, True)
            answer = extract_solution("".join(m["content"] for m in self.chat_history))
            metadata = {"answer": answer, "targets": targets_of(self.ground_truth)}
            return StepOutput(observations=[], reward=self._final_reward, done=True, metadata=metadata), [None]
        return None, self._parse_action(action)

    def _observe(self, query: List[Optional[str]], tool_output: Optional[str], error: Optional[str] = None) -> StepOutput:
        # A tool that raised: its message is the observation, as in SkyRL-gym.
        content = error if error is not None else "\n<information>" + (tool_output or "") + "</information>\n"
        observation = {"role": "user", "content": content}
        self.chat_history.append(observation)
        metadata: Dict[str, Any] = {"tool_group": "SearchToolGroup", "tool_name": "search", "tool_input": query}
        if error is not None:
            self._search_errors += 1
            metadata["tool_error"] = error
        elif query[0] is not None:
            self._searches += 1
            status = self.tool_group.last_metadata.get("status")
            metadata["search_status"] = status
            self._search_errors += int(status == "api_error")
        return StepOutput(observations=[observation], reward=0.0, done=False, metadata=metadata)

    def step(self, action: str) -> StepOutput:
        final, query = self._begin(action)
        if final is not None:
            return final
        try:  # through _execute_tool, so that a subclass overriding it is used
            return self._observe(query, self._execute_tool("SearchToolGroup", "search", query))
        except Exception as exc:
            return self._observe(query, None, error=str(exc))

    async def astep(self, action: str) -> StepOutput:
        """Like :meth:`step`; the search request is awaited on the running event loop (or, when
        ``_execute_tool`` or the tool group's ``execute_tool`` is overridden, that runs in a worker thread)."""
        final, query = self._begin(action)
        if final is not None:
            return final
        try:
            if uses_default_tool_path(self, self.tool_group):
                return self._observe(query, await self.tool_group.asearch(query[0]))
            from skyrl_gym.tools.blocking import run_blocking

            return self._observe(query, await run_blocking(self._execute_tool, "SearchToolGroup", "search", query))
        except Exception as exc:
            return self._observe(query, None, error=str(exc))

    async def ainit(self, prompt: ConversationType = None) -> Tuple[ConversationType, Dict[str, Any]]:
        return self.init(prompt)

    def get_metrics(self) -> Dict[str, Any]:
        return {
            "turns": self.turns,
            "searches": self._searches,
            "search_errors": self._search_errors,
            "correct": self._final_reward == 1.0,
        }
