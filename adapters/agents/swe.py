"""``SWEBenchTask`` (``task: swe_bench``): SWE-bench-format instances for an agent, one container per trajectory.

The four hooks, on the hub's ``swe`` environment pieces (:mod:`skyrl_gym.envs.swe`):

* ``initialize_runtime``: a :class:`~skyrl_gym.envs.swe.runtime.SWERuntime` of the instance (a fresh container of
  its image, the repository in ``/testbed`` at ``base_commit``), wrapped in :class:`SWEAgentEnv`, the env the
  agent plays: the SWE tools ``bash``, ``str_replace_editor`` and ``submit`` (``finish`` is read as ``submit``,
  and a fenced ```` ```bash ```` block in a message without a tool call runs as ``bash``, CodeAct style);
* ``get_instruction``: the tool instructions and the problem statement;
* ``complete_runtime``: the patch (``runtime.diff()``: everything changed since ``base_commit``), then the
  container is removed;
* ``evaluate_result``: the patch graded by SWE-bench's resolved rule in a fresh container
  (:func:`~skyrl_gym.envs.swe.grading.evaluate_patch`): reward 1.0 iff resolved. The result's ``results`` get
  ``resolved`` and ``report`` (per-test outcomes of FAIL_TO_PASS and PASS_TO_PASS). An empty patch is not
  resolved and starts no container.

Every blocking Docker call runs on the task's threads, off the event loop, so a dispatcher overlaps one
trajectory's container start with another's generation and a third one's grading.

Rows: the hub's SWE rows (:func:`skyrl_gym.envs.swe.dataset.instance_row`), bare SWE-bench rows
(``skyrl-gym swe build``'s ``instances.jsonl``, :meth:`SWEInstance.to_row`), or SkyAgent's rows with the
instance under a key (``data.instance_key: instance``). ``env_config`` in the YAML takes the ``swe`` env's
keys: ``docker_host``, ``bash_timeout_s``, ``message_timeout_s``, ``output_cap``, ``eval_timeout_s``, ``memory_mb``,
``cpus``, ``max_turns``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Set

from skygym_sandboxes.containers import ContainerLimits

from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.config_values import config_value
from skyrl_gym.envs.swe.grading import EvalReport, evaluate_patch
from skyrl_gym.envs.swe.instances import SWEInstance, SWEInstanceError, normalize_row
from skyrl_gym.envs.swe.runtime import TESTBED, SWERuntime
from skyrl_gym.envs.swe.tools import SWEToolGroup
from skyrl_gym.tools.parsers import parse_tool_calls

from skygym_adapters.agents.config import AgentConfigError
from skygym_adapters.agents.tasks import TASK_REGISTRY, BaseTask

logger = logging.getLogger(__name__)

SWE_SYSTEM_PROMPT = f"""You are a software engineer fixing an issue in the repository at {TESTBED}.
You work through tools. Call one per message, written as
<tool_call>{{"name": "<tool>", "arguments": {{...}}}}</tool_call>
Tools:
- bash: {{"command": "..."}} runs a bash command in {TESTBED} (each call starts in {TESTBED}; chain steps with &&).
  A message with no tool call but a ```bash code block runs that block the same way.
- str_replace_editor: {{"command": "view" | "create" | "str_replace" | "insert" | "undo_edit", "path": "{TESTBED}/...",
  plus "file_text", "old_str", "new_str", "insert_line" or "view_range" as the command needs}}.
- submit: {{}} ends your work (finish does the same); your changes are graded by hidden tests.
Find the cause, fix the library code (not the tests), check your fix, then submit."""

ISSUE_TEMPLATE = """The repository {repo} is checked out in {testbed}. Fix this issue:

<issue_description>
{problem_statement}
</issue_description>

The tests for the issue are already taken care of: change only non-test files, as little as the fix needs."""

NO_ACTION = (
    'No tool call was found. Call a tool with <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call> '
    "(tools: bash, str_replace_editor, submit), or put a command in a ```bash block; call submit when the fix "
    "is done."
)
BASH_BLOCK = re.compile(r"```(?:bash|sh|shell|console)[ \t]*\n(.*?)```", re.DOTALL)
# The swe env's keys (skyrl_gym/envs/swe/env.py), read from the agent YAML's env_config.
SETTINGS_KEYS = (
    "docker_host",
    "bash_timeout_s",
    "message_timeout_s",
    "output_cap",
    "eval_timeout_s",
    "memory_mb",
    "cpus",
    "max_turns",
)


def _optional_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


@dataclass(frozen=True)
class SWESettings:
    """The container and tool settings of a SWE task (``env_config`` in the agent YAML)."""

    docker_host: Optional[str] = None  # None: $SKYGYM_DOCKER_HOST, else docker's own default
    bash_timeout_s: float = 60.0
    message_timeout_s: Optional[float] = None  # what one message's commands may take together; twice bash_timeout_s
    output_cap: int = 16_000
    eval_timeout_s: float = 600.0
    memory_mb: int = 2048
    cpus: float = 1.0
    max_turns: int = 30  # the env's own limit; the row's max_turns and generator.max_iterations bound it

    @classmethod
    def from_env_config(cls, env_config: Any) -> "SWESettings":
        unknown = sorted(set(env_config or {}) - set(SETTINGS_KEYS))
        if unknown:
            raise AgentConfigError(
                f"unknown env_config key(s) {unknown} for task swe_bench; valid keys: {list(SETTINGS_KEYS)}"
            )
        defaults = cls()
        return cls(
            docker_host=config_value(env_config, "docker_host", None),
            bash_timeout_s=float(config_value(env_config, "bash_timeout_s", defaults.bash_timeout_s)),
            message_timeout_s=_optional_float(config_value(env_config, "message_timeout_s", None)),
            output_cap=int(config_value(env_config, "output_cap", defaults.output_cap)),
            eval_timeout_s=float(config_value(env_config, "eval_timeout_s", defaults.eval_timeout_s)),
            memory_mb=int(config_value(env_config, "memory_mb", defaults.memory_mb)),
            cpus=float(config_value(env_config, "cpus", defaults.cpus)),
            max_turns=int(config_value(env_config, "max_turns", defaults.max_turns)),
        )

    @property
    def limits(self) -> ContainerLimits:
        return ContainerLimits(memory_mb=self.memory_mb, cpus=self.cpus)


def swe_instance_of(instance: Any) -> SWEInstance:
    """The :class:`SWEInstance` of a row (a hub SWE row, a SWE-bench row) or the instance itself; a clear error
    naming the instance and the field otherwise."""
    if isinstance(instance, SWEInstance):
        return instance
    if not isinstance(instance, Mapping):
        raise SWEInstanceError(
            f"task swe_bench needs a SWE-bench row (a mapping), got {type(instance).__name__}; "
            "rows with the instance under a key need data.instance_key (e.g. instance)"
        )
    return normalize_row(instance)


class SWEAgentEnv(BaseTextEnv):
    """The SWE tools of one trajectory's container, as the env an agent plays (see the module docstring).

    The episode ends when the agent calls ``submit`` (or ``finish``). Closing it (the episode driver does, at the
    end of every episode) leaves the container to the task, which takes the patch out of it and removes it
    (``complete_runtime``). Rewards come from the task's evaluation, not from ``step``."""

    def __init__(self, runtime: SWERuntime, settings: SWESettings = SWESettings()) -> None:
        super().__init__({}, {})
        self.runtime = runtime
        self.instance = runtime.instance
        self.tools = SWEToolGroup(
            runtime.container, timeout_s=settings.bash_timeout_s, output_cap=settings.output_cap,
            message_timeout_s=settings.message_timeout_s,
        )
        self.init_tool_groups([self.tools])
        self.max_turns = settings.max_turns
        self.tool_calls = 0
        self.finished = False  # submit/finish was called (the agent's FINISH_TOOL)
        self.answer: Optional[str] = None

    @property
    def submitted(self) -> bool:
        return self.tools.submitted

    @staticmethod
    def _arguments(call: Any) -> Dict[str, Any]:
        if call.syntax == "json":
            return dict(call.arguments)
        return {"command": call.content} if call.name == "bash" else {}

    def _run(self, name: str, arguments: Dict[str, Any]) -> str:
        self.tool_calls += 1
        try:
            output = self._execute_tool("swe", name, arguments)
        except TypeError as exc:  # wrong or missing arguments: the model should hear it, as from a tool
            return f"Error: bad arguments for {name}: {exc}"
        return output if isinstance(output, str) else json.dumps(output, default=str)

    def step(self, action: str) -> Dict[str, Any]:  # type: ignore[override]
        self.turns += 1
        self._start_tool_calls()
        parsed = parse_tool_calls(action, xml_tags=("bash", "submit", "finish"))
        observations: List[Dict[str, str]] = [
            {"role": "user", "content": f"Your tool call could not be parsed: {error}"}
            for error in parsed.errors
        ]
        for call in parsed.calls:
            name = "submit" if call.name == "finish" else call.name
            if name not in self.tool_to_toolgroup:
                observations.append(
                    {
                        "role": "user",
                        "content": f"There is no tool {call.name!r}; the tools are {list(self.tool_to_toolgroup)}.",
                    }
                )
                continue
            text = self._run(name, self._arguments(call) if name != "submit" else {})
            if self.submitted:
                self.finished = True
                return {"observations": [], "reward": 0.0, "done": True, "metadata": {"submitted": True}}
            if self.runtime.container.id is None:  # a command left processes nothing could stop: no container
                return {"observations": [{"role": "user", "content": text}], "reward": 0.0, "done": True,
                        "metadata": {"container_lost": True}}
            observations.append({"role": "user", "content": text})
        if not parsed.calls and not parsed.errors:
            blocks = BASH_BLOCK.findall(action or "")
            if blocks and blocks[-1].strip():
                observations.append(
                    {"role": "user", "content": self._run("bash", {"command": blocks[-1].strip()})}
                )
            else:
                observations.append({"role": "user", "content": NO_ACTION})
        return {"observations": observations, "reward": 0.0, "done": False, "metadata": {}}

    def close(self) -> None:
        """The episode is over; the container stays for the task's ``complete_runtime`` (which removes it)."""

    def get_metrics(self) -> Dict[str, Any]:
        return {"tool_calls": self.tool_calls, "submitted": self.submitted}


class SWEBenchTask(BaseTask):
    """SkyAgent's ``SWEBenchTask`` on the hub's ``swe`` pieces (see the module docstring).

    The task owns the containers it starts: ``complete_runtime`` removes a trajectory's container, ``close_runtime``
    does when a trajectory fails, and ``close_all_runtimes`` removes whatever is left (the runner calls it when a
    run ends, also on Ctrl-C)."""

    def __init__(self, max_workers: int = 64) -> None:
        self.settings = SWESettings()
        self._live: Set[SWERuntime] = set()
        self._lock = threading.Lock()
        self._starting = 0  # containers being made, not yet live
        self._started = threading.Condition(self._lock)
        self._max_workers = max_workers
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None

    # ----- threads for the blocking docker calls -------------------------------------------------------
    async def _off_loop(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._max_workers, thread_name_prefix="swe-task"
            )
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(fn, *args, **kwargs)
        )

    def _start(self, instance: SWEInstance, settings: SWESettings, abandoned: threading.Event) -> SWERuntime:
        with self._lock:
            self._starting += 1
        try:  # the container exists from here: close_all_runtimes waits for it to be counted live
            runtime = SWERuntime(instance, limits=settings.limits, base_url=settings.docker_host)
            with self._lock:
                self._live.add(runtime)
        finally:
            with self._lock:
                self._starting -= 1
                self._started.notify_all()
        if not abandoned.is_set():  # else cancelled while the container was made: its trajectory is gone
            try:
                runtime.setup()
            except BaseException:
                self._release(runtime)
                raise
        if abandoned.is_set():  # the trajectory was cancelled while the container started
            self._release(runtime)
        return runtime

    def _release(self, runtime: SWERuntime) -> None:
        # live until removed: close_all_runtimes, called meanwhile, closes it too and so waits for the removal
        runtime.close()
        with self._lock:
            self._live.discard(runtime)

    # ----- SkyAgent's four hooks -----------------------------------------------------------------------
    async def initialize_runtime(self, instance: Mapping[str, Any], cfg: Any) -> SWEAgentEnv:
        swe = swe_instance_of(instance)
        self.settings = settings = SWESettings.from_env_config(getattr(cfg, "env_config", None))
        abandoned = threading.Event()
        try:
            runtime = await self._off_loop(self._start, swe, settings, abandoned)
        except BaseException:
            abandoned.set()  # cancelled: the thread goes on and removes the container it started
            raise
        return SWEAgentEnv(runtime, settings)

    async def get_instruction(self, instance: Mapping[str, Any]) -> List[Dict[str, Any]]:
        swe = swe_instance_of(instance)
        issue = ISSUE_TEMPLATE.format(
            repo=swe.repo, testbed=TESTBED, problem_statement=swe.problem_statement.strip()
        )
        return [{"role": "system", "content": SWE_SYSTEM_PROMPT}, {"role": "user", "content": issue}]

    async def complete_runtime(self, runtime: SWEAgentEnv, run: Any) -> Dict[str, Any]:
        """The patch (``git_patch``, SkyAgent's key) and whether the agent submitted; the container is removed."""
        try:
            patch = await self._off_loop(runtime.runtime.diff)
        except RuntimeError as exc:  # no repository to diff (.git removed) or no container: no patch
            logger.info("%s: no patch: %s", runtime.instance.instance_id, exc)
            patch = ""
        finally:
            await self._off_loop(self._release, runtime.runtime)
        return {
            "instance_id": runtime.instance.instance_id,
            "git_patch": patch,
            "submitted": runtime.submitted,
        }

    async def evaluate_result(
        self, result: Any, instance: Mapping[str, Any], data_source: str, instance_id: Any, trajectory_id: int
    ) -> float:
        """1.0 iff the patch resolves the instance (graded in a fresh container); ``result`` gets ``resolved``
        and ``report``. A broken instance (its image or its hidden tests) raises: an evaluation error, not a 0."""
        swe = swe_instance_of(instance)
        patch = str((result or {}).get("git_patch") or "")
        if not patch.strip():
            report = EvalReport(swe.instance_id, error="the patch is empty: nothing was changed")
        else:
            settings = self.settings
            report = await self._off_loop(
                evaluate_patch,
                swe,
                patch,
                timeout_s=settings.eval_timeout_s,
                limits=settings.limits,
                base_url=settings.docker_host,
            )
        if isinstance(result, dict):
            result["resolved"] = report.resolved
            result["report"] = report.to_dict()
        if report.instance_error:
            raise SWEInstanceError(report.error)
        return 1.0 if report.resolved else 0.0

    # ----- clean-up --------------------------------------------------------------------------------------
    async def close_runtime(self, runtime: Any) -> None:
        """Remove a failed trajectory's container."""
        swe_runtime = getattr(runtime, "runtime", None)
        if isinstance(swe_runtime, SWERuntime):
            await self._off_loop(self._release, swe_runtime)

    start_wait_s = 120.0
    """How long :meth:`close_all_runtimes` waits for containers being made to be counted live."""

    def close_all_runtimes(self) -> None:
        """Remove every container this task started and has not removed yet (blocking), those being made too."""
        with self._lock:
            if not self._started.wait_for(lambda: self._starting == 0, timeout=self.start_wait_s):
                logger.warning("%d container(s) still being made after %.0f s: they are removed when made",
                               self._starting, self.start_wait_s)
            live, self._live = list(self._live), set()
        for runtime in live:
            try:
                runtime.close()
            except Exception:
                logger.warning(
                    "removing the container of %s failed", runtime.instance.instance_id, exc_info=True
                )

    @property
    def live_runtimes(self) -> int:
        """How many containers are started and not yet removed."""
        with self._lock:
            return len(self._live)


TASK_REGISTRY["swe_bench"] = SWEBenchTask

__all__ = ["SWEAgentEnv", "SWEBenchTask", "SWESettings", "SWE_SYSTEM_PROMPT", "swe_instance_of"]
