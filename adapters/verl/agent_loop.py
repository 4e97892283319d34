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

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Optional, Union
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from skyrl_gym.data import row_extras
from skyrl_gym.episode import (
    BasePolicy,
    EnvCaller,
    Episode,
    EpisodeEnd,
    StepRecord,
    make_env_factory,
    run_episode,
)
from skyrl_gym.registration import env_config_for

from skygym_adapters.verl.reward import ENV_CLASS_KEY, EPISODE_REWARD_KEY
from skygym_adapters.verl.rows import AGENT_NAME, verl_to_row

logger = logging.getLogger(__name__)

# One pool for the blocking env calls of every episode of this worker process.
_DEFAULT_EXECUTOR = ThreadPoolExecutor(max_workers=32, thread_name_prefix="skyrl-gym-verl-env")


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

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        env_class = str(kwargs.get("env_class") or "?")
        prompt: List[Dict[str, Any]] = [dict(m) for m in (kwargs.get("raw_prompt") or kwargs.get("prompt") or [])]
        policy = _VerlPolicy(self, sampling_params)
        try:  # a bad row ends this episode only, never veRL's batch
            row = verl_to_row(kwargs)
        except Exception as exc:
            episode = Episode(env_class=env_class, end=EpisodeEnd.ERROR, error=f"row: {type(exc).__name__}: {exc}")
            logger.warning("skyrl_gym row for env %r is unusable: %s", env_class, episode.error)
        else:
            env_class, prompt = row["env_class"], [dict(m) for m in row["prompt"]]
            extras = row_extras(row)
            episode = await run_episode(
                make_env_factory(env_class, env_config_for(self.env_configs, env_class), extras), prompt, policy,
                env_class=env_class, max_turns_cap=self.max_turns_cap, row_max_turns=extras.get("max_turns"),
                caller=EnvCaller(_DEFAULT_EXECUTOR),  # env calls may block (SQL, sandboxes, HTTP): off the loop
            )
            if episode.error:
                logger.warning("skyrl_gym env %r ended with an error: %s", env_class, episode.error)
        if policy.prompt_ids is None:  # the episode never started: still hand veRL a (masked-out) sample
            await policy.start(Episode(env_class=env_class, prompt=prompt))
        return policy.output(episode, env_class, sampling_params)


class _VerlPolicy(BasePolicy):
    """The model's side of an episode through veRL's server manager, with veRL's own token bookkeeping
    (``ct_build_initial_tokens`` / ``ct_merge_assistant_token`` / ``ct_merge_context_msg``)."""

    def __init__(self, loop: SkyRLGymAgentLoop, sampling_params: Dict[str, Any]) -> None:
        self.loop = loop
        self.sampling_params = sampling_params
        self.request_id = uuid4().hex
        self.prompt_ids: Optional[List[int]] = None
        self.runtime_ids: List[int] = []
        self.response_mask: List[int] = []
        self.response_logprobs: Optional[List[float]] = None
        self.turn_reward_positions: List[int] = []
        self.observation_turns = 0
        self.aborted = False
        self.metrics: Dict[str, Any] = {"generate_sequences": 0.0, "tool_calls": 0.0}

    async def start(self, episode: Episode) -> Optional[EpisodeEnd]:
        self.prompt_ids = list(await self.loop.ct_build_initial_tokens([dict(m) for m in episode.prompt]))
        self.runtime_ids = list(self.prompt_ids)
        return None

    async def act(self, episode: Episode) -> Union[str, EpisodeEnd]:
        budget = self.loop.response_length - len(self.response_mask)
        if budget <= 0:
            return EpisodeEnd.LENGTH
        if self.loop.max_tokens_per_turn is not None:
            budget = min(budget, self.loop.max_tokens_per_turn)
        started = time.perf_counter()
        output = await self.loop.server_manager.generate(
            request_id=self.request_id, prompt_ids=self.runtime_ids,
            sampling_params={**self.sampling_params, "max_tokens": budget},
        )
        self.metrics["generate_sequences"] += time.perf_counter() - started
        wants_logprobs = bool(output.log_probs) or self.response_logprobs is not None
        merge, self.response_mask, merged_logprobs = await self.loop.ct_merge_assistant_token(
            self.runtime_ids, output.token_ids, self.response_mask,
            (self.response_logprobs or []) if wants_logprobs else None,
            assistant_logprobs=output.log_probs or None,
        )
        self.runtime_ids = merge.token_ids
        if merged_logprobs is not None:
            self.response_logprobs = merged_logprobs
        self.aborted = output.stop_reason == "aborted"
        return self.loop.tokenizer.decode(output.token_ids, skip_special_tokens=True)

    async def observe(self, episode: Episode, step: StepRecord) -> Optional[EpisodeEnd]:
        self.turn_reward_positions.append(len(self.response_mask) - 1)
        if step.done:
            return None
        if self.aborted:
            return EpisodeEnd.ABORTED
        if episode.max_turns is not None and episode.num_turns >= episode.max_turns:
            return None  # the driver ends the episode at the turn limit: nothing more will be generated
        if not step.observations:
            return EpisodeEnd.ABORTED  # nothing to say back: the chat has no next turn to open
        previous = episode.messages[: len(episode.messages) - len(step.observations)]
        self.observation_turns += 1
        merge, merged_mask, merged_logprobs = await self.loop.ct_merge_context_msg(
            previous, list(episode.messages), self.runtime_ids, self.response_mask, self.response_logprobs
        )
        if len(merged_mask) >= self.loop.response_length:
            return EpisodeEnd.LENGTH
        self.runtime_ids, self.response_mask = merge.token_ids, merged_mask
        if self.response_logprobs is not None:
            self.response_logprobs = merged_logprobs or []
        return None

    def output(self, episode: Episode, env_class: str, sampling_params: Dict[str, Any]) -> AgentLoopOutput:
        response_length = self.loop.response_length
        n_response = len(self.response_mask)
        response_ids = self.runtime_ids[len(self.runtime_ids) - n_response :] if n_response else []
        final_prompt_ids = self.runtime_ids[: len(self.runtime_ids) - n_response]
        kept = min(n_response, response_length)
        extra_fields = {
            "turn_scores": list(episode.rewards),
            "tool_rewards": [],
            "turn_reward_positions": [p for p in self.turn_reward_positions if p < kept],
            "assistant_turns": episode.num_turns,
            "stop": (episode.end or EpisodeEnd.ERROR).value,
            EPISODE_REWARD_KEY: episode.total_reward,
            ENV_CLASS_KEY: env_class,
            "skyrl_gym_error": episode.error,
            "skyrl_gym_env_metrics": episode.env_metrics,
        }
        self.metrics["tool_calls"] = episode.env_seconds
        return AgentLoopOutput(
            prompt_ids=final_prompt_ids,
            response_ids=response_ids[:kept],
            response_mask=self.response_mask[:kept],
            # veRL stacks logprobs over the batch: a sample that generated nothing still needs a (empty) list.
            response_logprobs=(
                self.response_logprobs[:kept] if self.response_logprobs is not None
                else ([] if sampling_params.get("logprobs") else None)
            ),
            reward_score=episode.total_reward,
            # veRL counts chat turns: the prompt, each assistant turn and each observation turn.
            num_turns=1 + episode.num_turns + self.observation_turns,
            metrics=self.metrics,
            extra_fields=extra_fields,
        )


__all__ = ["SkyRLGymAgentLoop"]
