"""``swe``: fix a bug in a real repository inside a container, rewarded by SWE-bench's resolved rule.

Each episode gets a container of the row's image with the repository at ``base_commit``. The model
calls tools (``<tool_call>{"name": "bash", "arguments": {"command": "..."}}</tool_call>``, or
``<bash>...</bash>``): ``bash``, ``str_replace_editor`` and ``submit`` (see :mod:`.tools`). When it
submits, or at ``max_turns``, its patch is the ``git diff`` against ``base_commit``; the patch is
graded in a fresh container with the hidden tests (:mod:`.grading`): reward 1.0 iff resolved. When grading
gives no verdict on the patch (its set-up failed: the image went missing, the hidden tests do not apply), the step
raises :class:`SWEInstanceError` rather than reward a 0 the patch did not earn: a trainer masks the episode out.
A row the grader cannot grade (test ids that are not pytest's) raises it as the env is built: the trainer names
such rows before it starts.
``metadata`` of the last step carries the patch (``model_patch``; one over 1,000,000 characters is graded
but left out, named by its length and SHA-256) and the per-test report.

``env_config``: ``docker_host`` (default ``$SKYGYM_DOCKER_HOST`` or docker's own), ``bash_timeout_s``
(60), ``message_timeout_s`` (what the commands of one message may take together; twice ``bash_timeout_s``),
``output_cap`` (16000 bytes per tool result), ``eval_timeout_s`` (600), ``memory_mb`` (2048),
``cpus`` (1.0), ``max_turns`` (30; a row's ``max_turns`` wins), ``images`` (image-name prefixes a row's image must
start with; default any; on ``serve-env`` the operator must set it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Optional, Tuple

from skygym_sandboxes.containers import ContainerLimits

from skyrl_gym.core import ConversationType, StepOutput
from skyrl_gym.envs._common import turn_limit
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.config_values import config_value
from skyrl_gym.envs.swe.grading import EvalReport, evaluate_patch
from skyrl_gym.envs.swe.instances import SWEInstanceError, normalize_row
from skyrl_gym.envs.swe.runtime import SWERuntime
from skyrl_gym.envs.swe.tools import SWEToolGroup
from skyrl_gym.errors import DataError
from skyrl_gym.tools.parsers import parse_tool_calls

# The patch rides in the last step's metadata, which a trainer holds for every episode of a batch and writes to
# its trajectory files: a longer one (the diff may reach 20 MB) is graded, then left out, named by size and hash.
MAX_KEPT_PATCH_CHARS = 1_000_000

NO_TOOL_CALL = (
    'No tool call was found. Call a tool with <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call> '
    "(tools: bash, str_replace_editor, submit); call submit when the fix is done."
)


def check_image(image: str, images: Any) -> None:
    """Refuses a row whose image starts with none of ``images`` (``env_config["images"]``: image-name
    prefixes, such as ``["skyrl-gym-swe-"]`` for the images ``skyrl-gym swe build`` makes; None: any image)."""
    if images is None:
        return
    prefixes = [images] if isinstance(images, str) else images
    if not isinstance(prefixes, (list, tuple)) or not all(isinstance(p, str) and p for p in prefixes):
        raise ValueError(f'env "swe": env_config.images must be a list of image-name prefixes such as '
                         f'["skyrl-gym-swe-"], got {images!r:.100}')
    if not any(image.startswith(prefix) for prefix in prefixes):
        raise DataError(f"env 'swe': the row's image {image!r:.200} is not one this env may run "
                        f"(env_config.images: {list(prefixes)})")


def patch_metadata(patch: str) -> Dict[str, Any]:
    """``model_patch`` (SWE-bench's name) when it is at most :data:`MAX_KEPT_PATCH_CHARS` long; else an empty
    one, with its length, its SHA-256 and why."""
    if len(patch) <= MAX_KEPT_PATCH_CHARS:
        return {"model_patch": patch}
    return {"model_patch": "", "model_patch_chars": len(patch),
            "model_patch_sha256": hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest(),
            "model_patch_left_out": f"the patch has {len(patch):,} characters, over the {MAX_KEPT_PATCH_CHARS:,} "
                                    "an episode's metadata keeps; it was graded whole"}


class SWEEnv(BaseTextEnv):
    """Fix a bug in the row's repository with bash, an editor and submit, in a container of its own; reward 1.0
    iff the hidden tests pass as SWE-bench's resolved rule asks (see the module docstring)."""

    # The defaults of the env_config keys it reads: also serve-env's ceilings of what a client may set.
    config_defaults = {
        "bash_timeout_s": 60.0,
        "message_timeout_s": None,  # twice bash_timeout_s
        "output_cap": 16_000,
        "eval_timeout_s": 600.0,
        "memory_mb": 2048,
        "cpus": 1.0,
        "max_turns": 30,
        "docker_host": None,
        "images": None,
    }
    # A row names the image its container runs: on serve-env the operator must say which (a client could
    # otherwise get a shell in any image of the host's engine, a private one with credentials included).
    server_requires_env_config = ("images",)

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.instance = normalize_row(self.extras)
        check_image(self.instance.image_name, config_value(env_config, "images"))  # first: what may run here
        if self.instance.grading_problem:  # a trainer names such rows before it starts (check_env_row)
            raise SWEInstanceError(self.instance.grading_problem)
        self.base_url: Optional[str] = config_value(env_config, "docker_host", None)
        defaults = self.config_defaults
        self.bash_timeout_s = float(config_value(env_config, "bash_timeout_s", defaults["bash_timeout_s"]))
        message_timeout_s = config_value(env_config, "message_timeout_s", defaults["message_timeout_s"])
        self.message_timeout_s = None if message_timeout_s is None else float(message_timeout_s)
        self.output_cap = int(config_value(env_config, "output_cap", defaults["output_cap"]))
        self.eval_timeout_s = float(config_value(env_config, "eval_timeout_s", defaults["eval_timeout_s"]))
        self.limits = ContainerLimits(
            memory_mb=int(config_value(env_config, "memory_mb", defaults["memory_mb"])),
            cpus=float(config_value(env_config, "cpus", defaults["cpus"])),
        )
        self.max_turns = turn_limit(self.extras, env_config, defaults["max_turns"], "swe")
        self.runtime: Optional[SWERuntime] = None
        self.tools: Optional[SWEToolGroup] = None
        self.tool_calls = 0
        self.report: Optional[EvalReport] = None
        self.patch = ""

    def init(self, prompt: ConversationType = None) -> Tuple[ConversationType, Dict[str, Any]]:  # type: ignore[override]
        self.runtime = SWERuntime(self.instance, limits=self.limits, base_url=self.base_url)
        try:
            self.runtime.setup()
        except BaseException:
            self.close()
            raise
        self.tools = SWEToolGroup(self.runtime.container, timeout_s=self.bash_timeout_s, output_cap=self.output_cap,
                                  message_timeout_s=self.message_timeout_s)
        self.init_tool_groups([self.tools])
        return (prompt if prompt is not None else []), {"instance_id": self.instance.instance_id}

    def tool_schemas(self) -> List[Dict[str, Any]]:
        if self.tools is None:  # before init there is no container yet; what the tools are does not depend on one
            return [spec.schema() for spec in SWEToolGroup.tools_of_class().values()]
        return super().tool_schemas()

    def _arguments(self, call: Any) -> Dict[str, Any]:
        if call.syntax == "json":
            return dict(call.arguments)
        return {"command": call.content} if call.name == "bash" else {}

    def step(self, action: str) -> StepOutput:  # type: ignore[override]
        if self.tools is None:
            raise RuntimeError("call init() before step()")
        if self.report is not None:
            raise RuntimeError("the episode has ended; make a new env for the next one")
        self.turns += 1
        self._start_tool_calls()
        parsed = parse_tool_calls(action, xml_tags=("bash", "submit"))
        observations: List[Dict[str, str]] = [
            {"role": "user", "content": f"Your tool call could not be parsed: {error}"} for error in parsed.errors
        ]
        for call in parsed.calls:
            if call.name not in self.tool_to_toolgroup:
                observations.append({"role": "user", "content": f"There is no tool {call.name!r}; the tools are {list(self.tool_to_toolgroup)}."})
                continue
            self.tool_calls += 1
            try:
                output = self._execute_tool("swe", call.name, self._arguments(call))
            except TypeError as exc:  # wrong or missing arguments: tell the model, as a tool would
                output = f"Error: bad arguments for {call.name}: {exc}"
            if self.tools.submitted or self.runtime is None or self.runtime.container.id is None:
                break
            text = output if isinstance(output, str) else json.dumps(output, default=str)
            observations.append({"role": "user", "content": text})
        if not parsed.calls and not parsed.errors:
            observations.append({"role": "user", "content": NO_TOOL_CALL})
        if self.runtime is not None and self.runtime.container.id is None:
            # A command left processes nothing could stop, or it wrote more to its disk than it may: its
            # container was removed. No patch, no reward.
            return self._finish("container_lost")
        if self.tools.submitted or self.turns >= self.max_turns:
            return self._finish("submitted" if self.tools.submitted else "max_turns")
        return {"observations": observations, "reward": 0.0, "done": False, "metadata": {}}

    def _finish(self, reason: str) -> StepOutput:
        assert self.runtime is not None
        try:
            self.patch = self.runtime.diff() if self.runtime.container.id is not None else ""
            container = self.runtime.container
            why = f" ({container.gone_why})" if container.gone_why else ""
            error = "" if container.id is not None else f"the container was removed{why}: no patch"
        except RuntimeError as exc:  # the model broke its repository (removed .git, say): no patch, no reward
            self.patch, error = "", f"no patch: {exc}"
        self.runtime.close()
        if error:
            self.report = EvalReport(self.instance.instance_id, error=error)
        else:
            self.report = evaluate_patch(self.instance, self.patch, limits=self.limits,
                                         timeout_s=self.eval_timeout_s, base_url=self.base_url)
            if self.report.instance_error:  # no verdict on the patch: no reward, rather than a 0 it did not earn
                raise SWEInstanceError(self.report.error)
        return {
            "observations": [],
            "reward": 1.0 if self.report.resolved else 0.0,
            "done": True,
            "metadata": {"finish_reason": reason, "resolved": self.report.resolved, **patch_metadata(self.patch),
                         "report": self.report.to_dict()},
        }

    def close(self) -> None:
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            runtime.close()

    def get_metrics(self) -> Dict[str, Any]:
        return {
            "tool_calls": self.tool_calls,
            "submitted": bool(self.tools and self.tools.submitted),
            "resolved": bool(self.report and self.report.resolved),
            "patch_lines": self.patch.count("\n"),
        }
