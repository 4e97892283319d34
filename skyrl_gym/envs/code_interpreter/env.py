"""``code_interpreter``: multi-turn math with a Python tool running in a sandbox.

Each turn the model either calls the tool, ``<tool><python>...</python></tool>`` or a JSON call
``<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call>``, and gets the output back
as an observation, or answers; the answer (the last ``\\boxed{}``) is graded like the ``math`` env.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from skygym_sandboxes import Sandbox
from skyrl_gym.core import StepOutput
from skyrl_gym.envs._code_sandbox import config_dict, sandbox_for
from skyrl_gym.envs._common import clip_action, config_number, require_ground_truth, turn_limit
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.rewards.math import DEFAULT_TIMEOUT_S, compute_math_score
from skyrl_gym.tools.parsers import parse_tool_calls
from skyrl_gym.tools.python import PythonCodeExecutorToolGroup

TOOL_NAMES = ("python",)


class CodeInterpreterEnv(BaseTextEnv):
    """``env_config``: ``sandbox`` (backend and options), ``timeout`` (seconds per tool call),
    ``message_timeout_s`` (seconds for the tool calls of one message together; default twice ``timeout``),
    ``max_turns`` (default 5; a row's ``max_turns`` wins), ``max_output_chars`` (default 2000),
    ``stateful`` (default true: later calls see earlier variables), ``observation_role`` (``"user"``
    or ``"tool"``). Reward: 1.0 for a correct boxed answer at the end, else 0.0; tool turns give 0.0.
    """

    # The defaults of the env_config keys it reads: also serve-env's ceilings of what a client may set.
    config_defaults = {"timeout": 10.0, "message_timeout_s": None, "verify_timeout": DEFAULT_TIMEOUT_S, "max_output_chars": 2000, "max_turns": 5,
                       "observation_role": "user", "stateful": True, "sandbox": None}

    def __init__(
        self,
        env_config: Any = None,
        extras: Optional[Dict[str, Any]] = None,
        sandbox: Optional[Sandbox] = None,
    ) -> None:
        super().__init__(env_config, extras)
        self.ground_truth = str(require_ground_truth(extras, "code_interpreter"))
        config = config_dict(env_config)
        row = self.extras if isinstance(self.extras, dict) else {}
        defaults = self.config_defaults
        self.max_turns = turn_limit(row, config, defaults["max_turns"], "code_interpreter")
        self.observation_role = str(config.get("observation_role", defaults["observation_role"]))
        self.verify_timeout = config_number(config, "verify_timeout", defaults["verify_timeout"],
                                            "code_interpreter")
        self._config = env_config
        message_timeout_s = config.get("message_timeout_s", defaults["message_timeout_s"])
        self.python_tool = PythonCodeExecutorToolGroup(
            timeout=config_number(config, "timeout", defaults["timeout"], "code_interpreter"),
            message_timeout_s=None if message_timeout_s is None else config_number(
                config, "message_timeout_s", None, "code_interpreter"),
            sandbox=sandbox,
            stateful=bool(config.get("stateful", defaults["stateful"])),
            max_output_chars=config_number(config, "max_output_chars", defaults["max_output_chars"],
                                           "code_interpreter", int),
        )
        self.init_tool_groups([self.python_tool])
        self.tool_calls = 0
        self.tool_errors = 0

    def _ensure_sandbox(self) -> None:
        if self.python_tool._sandbox is None:
            self.python_tool._sandbox = sandbox_for(self._config)

    def _final(self, text: str, metadata: Dict[str, Any]) -> StepOutput:
        result = compute_math_score(text, self.ground_truth, timeout=self.verify_timeout)
        metadata.update(pred=result["pred"], reason=result["reason"])
        return StepOutput(observations=[], reward=result["score"], done=True, metadata=metadata)

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {"turn": self.turns}
        text = clip_action(action, metadata)
        parsed = parse_tool_calls(text, xml_tags=TOOL_NAMES, wrapper="tool")
        calls = [call for call in parsed.calls if call.name in TOOL_NAMES]
        if parsed.errors:
            metadata["tool_parse_errors"] = parsed.errors
        if not calls or self.turns >= self.max_turns:
            if calls:
                metadata["reason_done"] = "max_turns reached"
            return self._final(text, metadata)
        self._ensure_sandbox()
        self._start_tool_calls()
        outputs: List[str] = []
        for call in calls:
            code = call.content if call.syntax == "xml" else call.arguments.get("code")
            self.tool_calls += 1
            if not isinstance(code, str) or not code.strip():
                self.tool_errors += 1
                outputs.append(
                    "Error: the python tool needs code, e.g. <tool><python>print(1)</python></tool>"
                )
                continue
            output = self._execute_tool(self.python_tool.name, "python", [code])
            if output.startswith("Error executing Python code"):
                self.tool_errors += 1
            outputs.append(output)
        observation = "\n".join(f"<output>\n{output}\n</output>" for output in outputs)
        metadata["tool_calls"] = len(calls)
        metadata["reason"] = "a tool turn: only the final answer is rewarded"
        return StepOutput(
            observations=[{"role": self.observation_role, "content": observation}],
            reward=0.0,
            done=False,
            metadata=metadata,
        )

    def get_metrics(self) -> Dict[str, Any]:
        return {"turns": self.turns, "tool_calls": self.tool_calls, "tool_errors": self.tool_errors}
