"""``lcb``: LiveCodeBench-style code generation, graded by running tests in a sandbox."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from skygym_sandboxes import Limits, Sandbox
from skyrl_gym.core import StepOutput
from skyrl_gym.envs._code_sandbox import config_dict, sandbox_for
from skyrl_gym.envs._common import clip_action, config_number, require_ground_truth
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.lcb.grading import extract_last_code_block, grade, parse_tests
from skyrl_gym.errors import DataError, EnvConfigError

logger = logging.getLogger(__name__)

DEFAULT_TEST_TIMEOUT_S = 6.0  # per test, as in SkyRL-gym
DEFAULT_MEMORY_MB = 2048


class LCBEnv(BaseTextEnv):
    """Single turn: reward 1.0 when the last fenced code block passes every test, else 0.0.

    ``env_config``: ``sandbox`` (backend and options, see ``docs/sandboxes.md``), ``timeout``
    (seconds per test), ``memory_mb``, ``stop_on_first_failure`` (default true), ``total_timeout`` (seconds for
    all tests of a response; default none: a row of N tests may take N times ``timeout``).
    ``metadata``: ``parsed_code``, ``tests`` (one verdict per test), ``num_passed``, and ``reason``
    whenever the reward is 0.0.
    """

    # The defaults of the env_config keys it reads: also serve-env's ceilings of what a client may set.
    config_defaults = {"timeout": DEFAULT_TEST_TIMEOUT_S, "memory_mb": DEFAULT_MEMORY_MB, "stop_on_first_failure": True,
                       "sandbox": None, "total_timeout": None}

    def __init__(
        self,
        env_config: Any = None,
        extras: Optional[Dict[str, Any]] = None,
        sandbox: Optional[Sandbox] = None,
    ) -> None:
        super().__init__(env_config, extras)
        ground_truth = require_ground_truth(extras, "lcb")  # its errors name the env already
        try:
            self.tests = parse_tests(ground_truth)
        except ValueError as exc:
            raise DataError(f"env 'lcb': {exc}") from None
        config = config_dict(env_config)
        timeout = config_number(config, "timeout", self.config_defaults["timeout"], "lcb")
        self.limits = Limits(
            wall_s=timeout,
            cpu_s=timeout,
            memory_mb=config_number(config, "memory_mb", self.config_defaults["memory_mb"], "lcb", int),
        )
        self.stop_on_first_failure = bool(config.get("stop_on_first_failure", self.config_defaults["stop_on_first_failure"]))
        self.total_timeout = None
        if config.get("total_timeout") is not None:
            self.total_timeout = config_number(config, "total_timeout", None, "lcb")
            if not 0 < self.total_timeout < float("inf"):
                raise EnvConfigError(f"env 'lcb': env_config.total_timeout must be a number of seconds above 0, got "
                                 f"{config['total_timeout']!r}")
        self._sandbox = sandbox
        self._config = env_config

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:  # started on first use, so building an env stays cheap
            self._sandbox = sandbox_for(self._config)
        return self._sandbox

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        metadata: Dict[str, Any] = {}
        text = clip_action(action, metadata)
        code = extract_last_code_block(text)
        metadata["parsed_code"] = code
        if code is None:
            metadata["reason"] = "no fenced code block in the response"
            return StepOutput(observations=[], reward=0.0, done=True, metadata=metadata)
        result = grade(self.sandbox, code, self.tests, self.limits, self.stop_on_first_failure, self.total_timeout)
        metadata["tests"] = [verdict.to_dict() for verdict in result.verdicts]
        metadata["num_passed"] = result.num_passed
        if not result.passed:
            metadata["reason"] = result.reason
        if any(v.verdict == "sandbox_error" for v in result.verdicts):
            logger.warning(
                "lcb: the sandbox failed while grading: %s",
                next(v.detail for v in result.verdicts if v.verdict == "sandbox_error"),
            )
        return StepOutput(observations=[], reward=1.0 if result.passed else 0.0, done=True, metadata=metadata)

    def get_metrics(self) -> Dict[str, Any]:
        return {}
