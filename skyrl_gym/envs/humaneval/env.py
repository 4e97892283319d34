"""``humaneval``: complete a function; reward 1.0 when HumanEval's ``check`` passes against it in a sandbox."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from skygym_sandboxes import Limits, Sandbox
from skyrl_gym.core import StepOutput
from skyrl_gym.envs._code_sandbox import config_dict, sandbox_for
from skyrl_gym.envs._common import clip_action, config_number, require_ground_truth
from skyrl_gym.envs._grading import grade_check
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.lcb.grading import extract_last_code_block
from skyrl_gym.errors import DataError

DEFAULT_TIMEOUT_S = 5.0


def build_program(problem_prompt: str, code: str) -> str:
    """The prompt (imports, helpers, signature), then the model's code: what the candidate process runs.

    A completion that continues the prompt's function body (indented, as in the original HumanEval
    protocol) is appended directly; a whole function is appended after it and replaces the stub.
    The tests never join it: they run in the grading harness, which calls the entry point.
    """
    joiner = "" if code[:1] in (" ", "\t") else "\n"
    return f"{problem_prompt}{joiner}{code}\n"


# The sandbox status names this env reported before verdicts existed, kept for ``metadata["status"]``.
_STATUS_OF_VERDICT = {
    "passed": "ok",
    "wrong_answer": "error",
    "runtime_error": "error",
    "timeout": "timeout",
    "memory": "memory",
    "output_limit": "output_limit",
    "sandbox_error": "sandbox_error",
}


def parse_ground_truth(value: Any) -> Dict[str, str]:
    shape = "a JSON object (or a dict) of 'prompt', 'test' and 'entry_point' strings"
    try:
        data = json.loads(value) if isinstance(value, (str, bytes)) else value
    except ValueError:  # e.g. a task id, 'HumanEval/0': the row builders write the whole problem
        raise DataError(f"env 'humaneval': reward_spec.ground_truth must be {shape}, got {value!r:.80}; "
                        "build rows with skyrl_gym.datasets.build_rows('humaneval', ...)") from None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("prompt", "test", "entry_point")
    ):
        raise DataError("env 'humaneval': reward_spec.ground_truth must hold 'prompt', 'test' and "
                        f"'entry_point' strings ({shape})")
    return data


class HumanEvalEnv(BaseTextEnv):
    """Single turn. The code is the last fenced block of the response, or the whole response when it
    has none (a raw completion). ``metadata``: ``parsed_code``, ``status``, ``stderr`` (cut), and
    ``reason`` whenever the reward is 0.0.

    The completion runs in a candidate process of the grading harness (:mod:`skyrl_gym.envs._grading`);
    the problem's ``check`` runs in the harness itself with a proxy for the entry point, so the
    completion can neither see the tests nor fake their result (``sys.exit(0)`` is a failure)."""

    # The defaults of the env_config keys it reads: also serve-env's ceilings of what a client may set.
    config_defaults = {"timeout": DEFAULT_TIMEOUT_S, "memory_mb": 1024, "sandbox": None}

    def __init__(
        self,
        env_config: Any = None,
        extras: Optional[Dict[str, Any]] = None,
        sandbox: Optional[Sandbox] = None,
    ) -> None:
        super().__init__(env_config, extras)
        self.problem = parse_ground_truth(require_ground_truth(extras, "humaneval"))
        config = config_dict(env_config)
        defaults = self.config_defaults
        timeout = config_number(config, "timeout", defaults["timeout"], "humaneval")
        memory_mb = config_number(config, "memory_mb", defaults["memory_mb"], "humaneval", int)
        self.limits = Limits(wall_s=timeout, cpu_s=timeout, memory_mb=memory_mb)
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
            metadata.update(status="no_code", stderr="", reason="the response holds no code")
            return StepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        program = build_program(self.problem["prompt"], code)
        result = grade_check(
            self.sandbox,
            program,
            self.problem["prompt"],
            self.problem["test"],
            self.problem["entry_point"],
            self.limits,
        )
        verdict = result.verdicts[0].verdict
        metadata.update(status=_STATUS_OF_VERDICT.get(verdict, "error"), stderr=result.stderr[-1000:])
        if verdict == "sandbox_error":
            metadata["sandbox_error"] = result.reason
        if not result.passed:
            metadata["reason"] = result.reason
        return StepOutput(observations=[], reward=1.0 if result.passed else 0.0, done=True, metadata=metadata)
