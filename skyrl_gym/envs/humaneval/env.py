"""``humaneval``: complete a function; reward 1.0 when HumanEval's ``check`` passes in a sandbox."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from skygym_sandboxes import Limits, RunRequest, Sandbox, Status
from skyrl_gym.core import StepOutput
from skyrl_gym.envs._code_sandbox import config_dict, sandbox_for
from skyrl_gym.envs._common import clip_action, require_ground_truth
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.lcb.grading import extract_last_code_block
from skyrl_gym.errors import DataError

DEFAULT_TIMEOUT_S = 5.0


def build_program(problem_prompt: str, code: str, test: str, entry_point: str) -> str:
    """The prompt (imports, helpers, signature), then the model's code, then the tests.

    A completion that continues the prompt's function body (indented, as in the original HumanEval
    protocol) is appended directly; a whole function is appended after it and replaces the stub.
    """
    joiner = "" if code[:1] in (" ", "\t") else "\n"
    return f"{problem_prompt}{joiner}{code}\n\n{test}\n\ncheck({entry_point})\n"


def parse_ground_truth(value: Any) -> Dict[str, str]:
    data = json.loads(value) if isinstance(value, (str, bytes)) else value
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("prompt", "test", "entry_point")
    ):
        raise DataError(
            "env 'humaneval': reward_spec.ground_truth must hold 'prompt', 'test' and 'entry_point' strings"
        )
    return data


class HumanEvalEnv(BaseTextEnv):
    """Single turn. The code is the last fenced block of the response, or the whole response when it
    has none (a raw completion). ``metadata``: ``parsed_code``, ``status``, ``stderr`` (cut)."""

    def __init__(
        self,
        env_config: Any = None,
        extras: Optional[Dict[str, Any]] = None,
        sandbox: Optional[Sandbox] = None,
    ) -> None:
        super().__init__(env_config, extras)
        self.problem = parse_ground_truth(require_ground_truth(extras, "humaneval"))
        config = config_dict(env_config)
        timeout = float(config.get("timeout", DEFAULT_TIMEOUT_S))
        self.limits = Limits(wall_s=timeout, cpu_s=timeout, memory_mb=int(config.get("memory_mb", 1024)))
        self._sandbox = sandbox
        self._config = env_config

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = sandbox_for(self._config)
        return self._sandbox

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {}
        text = clip_action(action, metadata)
        code = extract_last_code_block(text)
        if code is None:
            code = text.rstrip()
        metadata["parsed_code"] = code
        if not code.strip():
            metadata.update(status="no_code", stderr="")
            return StepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        program = build_program(
            self.problem["prompt"], code, self.problem["test"], self.problem["entry_point"]
        )
        result = self.sandbox.run(RunRequest(code=program, limits=self.limits))
        metadata.update(status=result.status.value, stderr=result.stderr[-1000:])
        if result.status == Status.SANDBOX_ERROR:
            metadata["sandbox_error"] = result.message
        return StepOutput(
            observations=[], reward=1.0 if result.status == Status.OK else 0.0, done=True, metadata=metadata
        )
