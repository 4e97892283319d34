"""A veRL agent loop that runs one trajectory of the agent layer (:mod:`skygym_adapters.agents`) per veRL sample.

Registered in veRL's agent-loop registry as ``skyrl_agent_runner``: rows whose ``agent_name`` column says so
(``rows_to_verl(rows, agent_name="skyrl_agent_runner")``) are played by an agent, other rows keep their loops.
The agent YAML (SkyAgent's keys: ``agent_cls``, ``task``, ``tools``, ``generator``, ...) is named by this loop's
``agent_config`` setting in veRL's agent-loop config file (a path, the name of a shipped config such as
``gsm8k_env``, or the YAML's content as a mapping)::

    # actor_rollout_ref.rollout.agent.agent_loop_config_path=examples/verl/agent_runner_loop.yaml
    - name: skyrl_agent_runner
      _target_: skygym_adapters.verl.agent_runner_loop.SkyAgentRunnerLoop
      agent_config: gsm8k_env

For each sample the loop builds an :class:`~skygym_adapters.agents.AgentRunner` on that config with the ``verl``
backend (:class:`~skygym_adapters.agents.backends.VerlServerEngine` over veRL's server manager) and runs ONE
trajectory (veRL's ``rollout.n`` already repeats the samples): the task starts the runtime, the agent plays it
through the episode driver with the rollout loop's token bookkeeping, the task scores it. What veRL gets:

* ``prompt_ids``/``response_ids``/``response_mask``/``response_logprobs``: the rollout loop's record (the model's
  tokens 1, tool/env observation tokens 0), cut at ``rollout.response_length``;
* ``reward_score``: the task's reward (``task: env``: the env's episode reward); veRL puts it on the last response
  token (``rm_scores``), and it is also in ``extra_fields["skyrl_gym_reward"]`` for the reward function;
* ``num_turns``: veRL's count of chat turns (the prompt, each assistant turn and each observation turn);
* ``extra_fields``: ``finish_reason`` (SkyAgent's words), ``error``, ``eval_error``, ``turn_scores``,
  ``turn_reward_positions``, ``assistant_turns``, ``skyrl_gym_reward``.

The agent layer's training rule applies: a trajectory that ended as ``CONTEXT_WINDOW_EXCEEDED``,
``max_iterations_reached``, ``error_runtime``, ``error_backend`` or ``aborted``, or whose evaluation failed, keeps
its tokens and reward but gets an all-zero ``response_mask``. So does one whose prompt is longer than
``rollout.prompt_length`` (its prompt is cut to the last ``prompt_length`` tokens so that veRL's batch still pads).

What the loop sets in the agent config: ``infer_backend: verl`` (any other backend and its ``backend_config`` are
replaced), ``num_trajectories: 1``, and veRL's sampling (``temperature``, ``top_p``, ``top_k``, ``logprobs``, and
``repetition_penalty`` sent as it is) over ``generator.sampling_params``; ``max_tokens`` per turn stays the YAML's
(default: all of ``rollout.response_length``), and no turn asks for more than the trajectory has left of it.
veRL's ``data.apply_chat_template_kwargs`` go to the chat template.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Dict, List, Mapping, Optional, Tuple

from verl.experimental.agent_loop import agent_loop as verl_agent_loop
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from skygym_adapters.agents.config import AgentConfig, load_agent_config, parse_agent_config
from skygym_adapters.agents.runner import AgentRunner
from skygym_adapters.verl.agent_loop import _plain_config
from skygym_adapters.verl.reward import EPISODE_REWARD_KEY
from skygym_adapters.verl.rows import verl_to_row

logger = logging.getLogger(__name__)

AGENT_RUNNER_NAME = "skyrl_agent_runner"
"""The name this loop is registered under in veRL's agent-loop registry."""

_OUR_SAMPLING_KEYS = ("temperature", "top_p", "top_k")
_MAX_TOKEN_KEYS = ("max_generate_length", "max_tokens", "max_new_tokens")
_CONFIGS: Dict[str, AgentConfig] = {}  # agent YAML path/name -> parsed config (one parse per worker process)


def _agent_config(value: Any) -> AgentConfig:
    value = _plain_config(value)
    if value is None:
        raise ValueError(
            f"the {AGENT_RUNNER_NAME} agent loop needs agent_config (an agent YAML path, a shipped config name, "
            "or a mapping) in its entry of veRL's agent-loop config file"
        )
    if isinstance(value, Mapping):
        return parse_agent_config(value)
    key = str(value)
    if key not in _CONFIGS:
        _CONFIGS[key] = load_agent_config(key)
    return _CONFIGS[key]


def agent_config_for_verl(
    base: AgentConfig, verl_sampling: Mapping[str, Any], response_length: int
) -> AgentConfig:
    """A copy of ``base`` as the veRL loop runs it (see the module docstring)."""
    cfg = copy.deepcopy(base)
    g = cfg.generator
    if g.infer_backend != "verl":
        logger.info("agent config: infer_backend %r is replaced by verl inside veRL's agent loop", g.infer_backend)
        g.infer_backend, g.backend_config = "verl", {}
    sampling = dict(g.sampling_params)
    extra: Dict[str, Any] = {}
    for key, value in verl_sampling.items():
        if key in _OUR_SAMPLING_KEYS:
            if value is not None:
                sampling[key] = value
        elif key == "logprobs":
            sampling["logprobs"] = bool(value)
        elif key not in _MAX_TOKEN_KEYS and value is not None:
            extra[key] = value
    if not any(key in sampling for key in _MAX_TOKEN_KEYS):
        sampling["max_tokens"] = response_length
    g.sampling_params = sampling
    g.backend_config = {
        **dict(g.backend_config),
        "response_length": response_length,
        "extra_sampling_params": {**dict(g.backend_config.get("extra_sampling_params") or {}), **extra},
    }
    g.num_trajectories = 1
    return cfg


def _seconds(output: Mapping[str, Any], key: str) -> float:
    return float(sum((output.get("trajectory_time_splits") or {}).get(key) or [0.0]))


class SkyAgentRunnerLoop(AgentLoopBase):
    """One agent-layer trajectory per veRL sample (see the module docstring).

    Settings (keys of this loop's entry in veRL's agent-loop config file): ``agent_config`` (required).
    """

    def __init__(self, *args: Any, agent_config: Any = None, tools: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_config = _agent_config(agent_config)
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)
        template_kwargs = getattr(self.data_config, "apply_chat_template_kwargs", None)
        self.chat_template_kwargs: Dict[str, Any] = dict(_plain_config(template_kwargs) or {})

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        row, row_error = self._row(kwargs)
        cfg = agent_config_for_verl(self.agent_config, sampling_params, self.response_length)
        runner = AgentRunner(cfg, infer_engine=self.server_manager, tokenizer=self.tokenizer)
        runner.chat_template_kwargs.update(self.chat_template_kwargs)
        finished: List[Any] = []
        try:
            output = await runner.run([row], val_mode=False, on_trajectory_done=finished.append)
        finally:
            await runner.aclose()
        return self._output(output, finished[0], row_error, sampling_params)

    @staticmethod
    def _row(kwargs: Mapping[str, Any]) -> Tuple[Dict[str, Any], Optional[str]]:
        """The dataset row of this sample; a row veRL's columns cannot give still runs (and fails) in the task."""
        try:
            return dict(verl_to_row(kwargs)), None
        except Exception as exc:
            prompt = [dict(m) for m in (kwargs.get("raw_prompt") or kwargs.get("prompt") or [])]
            return {"prompt": prompt}, f"row: {type(exc).__name__}: {exc}"

    def _output(
        self, output: Mapping[str, Any], trajectory: Any, row_error: Optional[str], sampling_params: Mapping[str, Any]
    ) -> AgentLoopOutput:
        result = dict(trajectory.result or {})
        record = getattr(getattr(trajectory, "run", None), "trajectory", None)  # the rollout loop's Trajectory
        prompt_ids = list(output["prompt_token_ids"][0])
        response_ids = list(output["response_ids"][0])
        mask = list(output["loss_masks"][0])
        logprobs = (output.get("rollout_logprobs") or [None])[0]
        error = result.get("error")
        if row_error and error is not None:
            error = f"{row_error} ({error})"
        if len(prompt_ids) > self.prompt_length:
            error = error or f"the prompt has {len(prompt_ids)} tokens, more than rollout.prompt_length={self.prompt_length}"
            prompt_ids = prompt_ids[-self.prompt_length :]
            mask = [0] * len(mask)
        kept = min(len(response_ids), self.response_length)
        turns = list(record.turns) if record is not None and record.error is None else []
        turn_positions = [t.output_end - 1 for t in turns if t.output_end - 1 < kept]
        observation_turns = sum(1 for t in turns[:-1] if t.end > t.output_end)
        reward = float(output["trajectory_rewards"][0])
        extra_fields = {
            "finish_reason": result.get("finish_reason"),
            "error": error,
            "eval_error": result.get("eval_error"),
            "turn_scores": [float(t.reward) for t in turns],
            "turn_reward_positions": turn_positions,
            "assistant_turns": len(turns),
            EPISODE_REWARD_KEY: reward,
        }
        wants_logprobs = bool(sampling_params.get("logprobs"))
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:kept],
            response_mask=mask[:kept],
            response_logprobs=(
                list(logprobs[:kept]) if logprobs is not None else ([] if wants_logprobs else None)
            ),
            reward_score=reward,
            num_turns=1 + len(turns) + observation_turns,
            metrics={"generate_sequences": _seconds(output, "llm"), "tool_calls": _seconds(output, "env")},
            extra_fields=extra_fields,
        )


# Registered by name only when no agent-loop config file registered it first: veRL imports this module when it
# instantiates the first sample's loop, and a plain @register would then replace the file's entry (and its
# agent_config) for every later sample of the worker.
if AGENT_RUNNER_NAME not in getattr(verl_agent_loop, "_agent_loop_registry", {}):
    register(AGENT_RUNNER_NAME)(SkyAgentRunnerLoop)


__all__ = ["AGENT_RUNNER_NAME", "SkyAgentRunnerLoop", "agent_config_for_verl"]
