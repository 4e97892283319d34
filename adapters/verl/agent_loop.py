"""A veRL agent loop that runs any ``skyrl_gym`` env inside veRL's multi-turn rollout.

Registered in veRL's agent-loop registry as ``skyrl_gym_agent``: rows whose ``agent_name`` column says
so (see :mod:`skygym_adapters.verl.rows`) are rolled out here, other rows keep veRL's own loops. Each episode:

1. builds the row's env (``env_class`` column) with the row's other columns as ``extras``;
2. tokenizes ``env.init(prompt)`` with veRL's Continuous Token builder (the same token bookkeeping as
   veRL's ``ToolAgentLoop``, so chat-template boundaries match what veRL trains on);
3. per turn: token ids in, token ids out through veRL's server manager; the decoded text is the env action;
   the env's observation messages are appended as context tokens with ``response_mask`` 0;
4. stops when the env is done, after ``max_turns`` assistant turns, or when ``rollout.response_length``
   is used up.

The episode reward (sum of the turn rewards) becomes ``reward_score``; the per-turn rewards and the
position of each turn's last token are in ``extra_fields`` (``turn_scores``, ``turn_reward_positions``)
for token-level credit. An env that raises ends its own episode with reward 0 and the error in
``extra_fields["skyrl_gym_error"]``; the batch goes on.

Outside Ray (or before veRL imports this module in its workers), list it in a veRL agent-loop config
file instead: ``actor_rollout_ref.rollout.agent.agent_loop_config_path=examples/verl/agent_loop.yaml``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Dict, List, Mapping, Optional
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

import skyrl_gym
from skyrl_gym.data import row_extras

from skygym_adapters.verl.reward import ENV_CLASS_KEY, EPISODE_REWARD_KEY
from skygym_adapters.verl.rows import AGENT_NAME, verl_to_row

logger = logging.getLogger(__name__)


def _plain_config(value: Any) -> Any:
    """Hydra hands nested agent-loop settings over as DictConfig; envs want plain dicts."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a veRL dependency
        pass
    return value


@register(AGENT_NAME)
class SkyRLGymAgentLoop(AgentLoopBase):
    """Runs the ``skyrl_gym`` env named by each row's ``env_class``.

    Settings (keys of this loop's entry in an agent-loop config file, passed by veRL as keyword arguments):

    * ``env_configs``: ``{env_id: env_config}`` given to ``skyrl_gym.make`` (database folders, search URLs);
    * ``max_turns``: a cap on assistant turns on top of the env's own ``max_turns`` (default: veRL's
      ``rollout.multi_turn.max_assistant_turns`` when set, else none);
    * ``max_tokens_per_turn``: a cap on the tokens of one assistant turn (default: whatever is left of
      ``rollout.response_length``).
    """

    def __init__(
        self,
        *args: Any,
        env_configs: Optional[Mapping[str, Any]] = None,
        max_turns: Optional[int] = None,
        max_tokens_per_turn: Optional[int] = None,
        tools: Any = None,  # veRL passes its tool list to every loop; env tools live in the env
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.env_configs: Dict[str, Any] = dict(_plain_config(env_configs) or {})
        configured_cap = max_turns if max_turns is not None else self.rollout_config.multi_turn.max_assistant_turns
        self.max_turns_cap: Optional[int] = int(configured_cap) if configured_cap else None
        self.response_length: int = int(self.rollout_config.response_length)
        self.max_tokens_per_turn: Optional[int] = int(max_tokens_per_turn) if max_tokens_per_turn else None

    async def _env_call(self, fn: Any, *args: Any) -> Any:
        """Env calls may block (SQL, sandboxes, HTTP): run them off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        metrics: Dict[str, Any] = {"generate_sequences": 0.0, "tool_calls": 0.0}
        turn_rewards: List[float] = []
        turn_reward_positions: List[int] = []
        error: Optional[str] = None
        stop = "env_done"
        env = None
        request_id = uuid4().hex
        env_class = str(kwargs.get("env_class") or "?")
        messages: List[Dict[str, Any]] = [dict(m) for m in (kwargs.get("raw_prompt") or kwargs.get("prompt") or [])]

        try:  # a bad row or a broken env ends this episode only, never veRL's batch
            row = verl_to_row(kwargs)
            env_class = row["env_class"]
            messages = [dict(m) for m in row["prompt"]]
            env = await self._env_call(
                lambda: skyrl_gym.make(env_class, env_config=self.env_configs.get(env_class), extras=row_extras(row))
            )
            observation, _info = await self._env_call(env.init, messages)
            messages = [dict(m) for m in observation]
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("skyrl_gym env %r failed to start: %s", env_class, error)

        prompt_ids = await self.ct_build_initial_tokens(messages)
        runtime_ids: List[int] = list(prompt_ids)
        response_mask: List[int] = []
        response_logprobs: Optional[List[float]] = None
        assistant_turns = 0
        observation_turns = 0
        env_max_turns = getattr(env, "max_turns", None) if env is not None else None
        turn_cap = min(c for c in (env_max_turns, self.max_turns_cap) if c) if (env_max_turns or self.max_turns_cap) else None

        while env is not None and error is None:
            budget = self.response_length - len(response_mask)
            if budget <= 0:
                stop = "response_length"
                break
            if self.max_tokens_per_turn is not None:
                budget = min(budget, self.max_tokens_per_turn)
            loop = asyncio.get_running_loop()
            started = loop.time()
            output = await self.server_manager.generate(
                request_id=request_id, prompt_ids=runtime_ids, sampling_params={**sampling_params, "max_tokens": budget}
            )
            metrics["generate_sequences"] += loop.time() - started
            wants_logprobs = bool(output.log_probs) or response_logprobs is not None
            merge, response_mask, merged_logprobs = await self.ct_merge_assistant_token(
                runtime_ids,
                output.token_ids,
                response_mask,
                (response_logprobs or []) if wants_logprobs else None,
                assistant_logprobs=output.log_probs or None,
            )
            runtime_ids = merge.token_ids
            if merged_logprobs is not None:
                response_logprobs = merged_logprobs
            assistant_turns += 1
            action = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": action})
            started = loop.time()
            try:
                step = await self._env_call(env.step, action)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                logger.warning("skyrl_gym env %r raised in step: %s", env_class, error)
                break
            finally:
                metrics["tool_calls"] += loop.time() - started
            turn_rewards.append(float(step["reward"]))
            turn_reward_positions.append(len(response_mask) - 1)
            if step["done"]:
                break
            if output.stop_reason == "aborted":
                stop = "aborted"
                break
            if turn_cap is not None and assistant_turns >= turn_cap:
                stop = "max_turns"
                break
            new_messages = [dict(m) for m in step.get("observations") or []]
            if not new_messages:
                # Nothing to say back: the chat has no next turn to open, so the episode ends here.
                stop = "no_observation"
                break
            previous = list(messages)
            messages.extend(new_messages)
            observation_turns += 1
            merge, merged_mask, merged_logprobs = await self.ct_merge_context_msg(
                previous, messages, runtime_ids, response_mask, response_logprobs
            )
            if len(merged_mask) >= self.response_length:
                stop = "response_length"
                break
            runtime_ids, response_mask = merge.token_ids, merged_mask
            if response_logprobs is not None:
                response_logprobs = merged_logprobs or []

        env_metrics: Dict[str, Any] = {}
        if env is not None:
            try:
                env_metrics = dict(env.get_metrics() or {}) if hasattr(env, "get_metrics") else {}
            except Exception as exc:
                env_metrics = {"metrics_error": f"{type(exc).__name__}: {exc}"}
            try:
                await self._env_call(env.close)
            except Exception as exc:
                logger.warning("skyrl_gym env %r raised in close: %s", env_class, exc)

        episode_reward = 0.0 if error else float(sum(turn_rewards))
        n_response = len(response_mask)
        response_ids = runtime_ids[len(runtime_ids) - n_response :] if n_response else []
        final_prompt_ids = runtime_ids[: len(runtime_ids) - n_response]
        kept = min(n_response, self.response_length)
        extra_fields = {
            "turn_scores": list(turn_rewards),
            "tool_rewards": [],
            "turn_reward_positions": [p for p in turn_reward_positions if p < kept],
            "assistant_turns": assistant_turns,
            "stop": "error" if error else stop,
            EPISODE_REWARD_KEY: episode_reward,
            ENV_CLASS_KEY: env_class,
            "skyrl_gym_error": error,
            "skyrl_gym_env_metrics": env_metrics,
        }
        return AgentLoopOutput(
            prompt_ids=final_prompt_ids,
            response_ids=response_ids[:kept],
            response_mask=response_mask[:kept],
            # veRL stacks logprobs over the batch: a sample that generated nothing still needs a (empty) list.
            response_logprobs=(
                response_logprobs[:kept] if response_logprobs is not None else ([] if sampling_params.get("logprobs") else None)
            ),
            reward_score=episode_reward,
            # veRL counts chat turns: the prompt, each assistant turn and each observation turn.
            num_turns=1 + assistant_turns + observation_turns,
            metrics=metrics,
            extra_fields=extra_fields,
        )


__all__ = ["SkyRLGymAgentLoop"]
