"""A trajectory token for token: the episode driver (:mod:`skyrl_gym.episode`) with a token-in/token-out policy.

The episode itself (make, init, act, step, stop rules, the turn limit, env errors) is :func:`skyrl_gym.episode.run_episode`;
this module is the policy that generates with an :class:`~skygym_adapters.types.InferenceEngine` and records every
token: the model's ids with loss mask 1, observation ids (from the chat template) with loss mask 0, logprobs, and
each turn's reward on its last token.
"""

from __future__ import annotations

import copy
import itertools
import logging
import time
from concurrent.futures import Executor
from typing import Any, Callable, Dict, List, Optional, Union

from skyrl_gym.episode import (
    BasePolicy,
    EnvCallError,
    EnvCaller,
    Episode,
    EpisodeEnd,
    StepRecord,
    make_env_factory,
    run_episode,
)
from skyrl_gym.registration import env_config_for, fingerprint_or_none

from skygym_adapters.engines.base import ResolvedSampling, resolve_sampling
from skygym_adapters.engines.client import call_if_present
from skygym_adapters.rollout.chat import ChatTokenizer
from skygym_adapters.rollout.config import RolloutConfig
from skygym_adapters.rollout.trajectory import Trajectory, Turn
from skygym_adapters.types import InferenceEngine, SamplingParams, TrajectoryID

logger = logging.getLogger(__name__)

__all__ = ["EnvCallError", "TokenPolicy", "run_trajectory"]


def _session_key(trajectory_id: TrajectoryID) -> str:
    return f"{trajectory_id['instance_id']}_{trajectory_id['repetition_id']}"


# Two batches on one engine at once (a trainer's evaluation beside its training batch) may number their trajectories
# alike, and an engine keys its kept KV caches, last-turn hints and engine pins by session: each trajectory run is a
# session of its own (its id, then a number no other run in this process has).
_session_serial = itertools.count()


class TokenPolicy(BasePolicy):
    """Plays the model's side of an episode through ``engine`` and records it, token for token, in ``trajectory``."""

    def __init__(
        self,
        engine: InferenceEngine,
        chat: ChatTokenizer,
        config: RolloutConfig,
        trajectory: Trajectory,
        sampling_params: Dict[str, Any],
    ) -> None:
        self.engine = engine
        self.chat = chat
        self.config = config
        self.trajectory = trajectory
        self.sampling_params = sampling_params
        self.sampling: ResolvedSampling = resolve_sampling(sampling_params)
        self.session = f"{_session_key(trajectory.trajectory_id)}#{next(_session_serial)}"
        self.multi_turn = config.use_conversation_multi_turn
        self._pending: Optional[Dict[str, Any]] = None  # the generated turn, until the env has answered it

    async def start(self, episode: Episode) -> Optional[EpisodeEnd]:
        trajectory = self.trajectory
        trajectory.conversation = [dict(m) for m in episode.prompt]  # grows with every turn
        try:
            trajectory.prompt_ids = self.chat.prompt_ids(trajectory.conversation)
        except Exception as exc:  # init() returned something the chat template cannot render
            raise EnvCallError("init", ValueError(f"the prompt returned by init() cannot be templated: {exc}")) from exc
        trajectory.prompt_message_count = len(trajectory.conversation)
        return None

    async def act(self, episode: Episode) -> Union[str, EpisodeEnd]:
        trajectory, chat = self.trajectory, self.chat
        context = trajectory.prompt_ids + trajectory.ids
        if self.config.max_input_length is not None and len(context) > self.config.max_input_length:
            return EpisodeEnd.LENGTH
        if episode.max_turns is not None and len(episode.steps) + 1 >= episode.max_turns:
            call_if_present(self.engine, "last_turn", self.session)  # nothing of this turn need be kept
        started = time.perf_counter()
        output = await self.engine.generate(
            [context], self.sampling_params, messages=[list(trajectory.conversation)], session_ids=[self.session]
        )
        trajectory.model_seconds += time.perf_counter() - started
        output_ids = list(output["response_ids"][0])
        logprobs = (output.get("response_logprobs") or [None])[0]
        if self.sampling.logprobs and logprobs is None:
            raise RuntimeError(f"{type(self.engine).__name__} returned no logprobs although they were requested")
        text = chat.decode(output_ids, skip_special_tokens=True)
        added_eos = False
        if not output_ids:  # nothing generated: close the turn so its reward has a token to sit on
            output_ids, logprobs, added_eos = [chat.turn_end_token_id], ([] if logprobs is not None else None), True
        stop_reason = output["stop_reasons"][0]
        if self.multi_turn and not self._ends_turn(output_ids) and stop_reason == "stop" and self.sampling.stop and (
            self.config.append_eos_token_after_stop_str_in_multi_turn
        ):
            output_ids.append(chat.turn_end_token_id)
            added_eos = True
        self._pending = {"ids": output_ids, "logprobs": logprobs, "added_eos": added_eos, "stop_reason": stop_reason,
                         "text": text, "context_length": len(context)}
        return text

    async def observe(self, episode: Episode, step: StepRecord) -> Optional[EpisodeEnd]:
        trajectory, chat, turn = self.trajectory, self.chat, self._pending
        assert turn is not None, "observe() without act()"
        self._pending = None
        output_ids, added_eos = turn["ids"], turn["added_eos"]
        if step.output.get("postprocessed_action") is not None:
            # Re-tokenizing a rewritten action would break token-faithfulness: keep the model's tokens.
            logger.debug("env %s rewrote the action; the model's own tokens are kept", trajectory.env_class)
        if self.multi_turn and not step.done and not added_eos and not self._ends_turn(output_ids):
            # A turn cut by max_generate_length (or a stop string with EOS-appending off) must still be closed
            # before the next message starts; the closing token is not the model's, so it is masked out.
            output_ids.append(chat.turn_end_token_id)
            added_eos = True
        logprobs = list(turn["logprobs"]) if turn["logprobs"] is not None else None
        if logprobs is not None and added_eos:
            logprobs.append(0.0)
        observation_ids, method, note = self._observation_ids(output_ids, step)
        self._record(turn, step.reward, output_ids, logprobs, added_eos, observation_ids, method, note)
        return None

    # ------------------------------------------------------------------ helpers
    def _ends_turn(self, ids: List[int]) -> bool:
        return bool(ids) and ids[-1] in (self.chat.turn_end_token_id, self.chat.eos_token_id)

    def _observation_ids(self, output_ids: List[int], step: StepRecord) -> Any:
        """The observation's token ids, how they were made, and a note when templating needed a fallback."""
        conversation, chat = self.trajectory.conversation, self.chat
        if self.multi_turn:
            conversation.append({"role": "assistant", "content": chat.assistant_text(output_ids)})
            ids, method, note = [], "", ""
            if not step.done:
                obs = chat.observation_ids(conversation, step.observations, add_generation_prompt=True)
                ids, method, note = obs.ids, obs.method, obs.note
                if note:
                    logger.warning("trajectory %s: %s", self.session, note)
            conversation.extend(step.observations)
            return ids, method, note
        count = self.trajectory.prompt_message_count
        _append_to_single_assistant_message(conversation, count, step.action)
        if step.done or not step.observations:
            return [], "", ""
        raw = "".join(str(m["content"]) for m in step.observations)
        _append_to_single_assistant_message(conversation, count, raw)
        return chat.encode(raw), "raw", ""

    def _record(self, turn: Dict[str, Any], reward: float, output_ids: List[int], logprobs: Optional[List[float]],
                added_eos: bool, observation_ids: List[int], method: str, note: str) -> None:
        trajectory = self.trajectory
        start = len(trajectory.ids)
        turn_mask = [1] * len(output_ids)
        if added_eos:
            turn_mask[-1] = 0
        trajectory.ids.extend(output_ids + observation_ids)
        trajectory.loss_mask.extend(turn_mask + [0] * len(observation_ids))
        if logprobs is not None:
            if trajectory.logprobs is None:
                trajectory.logprobs = [0.0] * start
            trajectory.logprobs.extend(logprobs + [0.0] * len(observation_ids))
        trajectory.turns.append(
            Turn(start=start, output_end=start + len(output_ids), end=len(trajectory.ids),
                 context_length=turn["context_length"], reward=reward, stop_reason=turn["stop_reason"],
                 text=turn["text"], added_eos=added_eos, observation_method=method, observation_note=note)
        )
        trajectory.stop_reason = turn["stop_reason"]


async def run_trajectory(
    engine: InferenceEngine,
    chat: ChatTokenizer,
    config: RolloutConfig,
    prompt: List[Dict[str, Any]],
    env_class: str,
    env_extras: Optional[Dict[str, Any]],
    trajectory_id: TrajectoryID,
    sampling_params: Optional[SamplingParams] = None,
    executor: Optional[Executor] = None,
    make_env: Optional[Callable[[], Any]] = None,
    caller: Optional[EnvCaller] = None,
) -> Trajectory:
    """Run one episode of ``env_class`` on ``prompt`` with ``engine`` and record it token for token.

    ``make_env`` builds the env instead of ``skyrl_gym.make(env_class, ...)`` (the agent layer hands over an env
    its task built beforehand; the generator hands over one that builds it in a Ray env worker). ``caller`` runs
    the env's calls instead of ``EnvCaller(executor)``.

    The turn limit is :func:`skyrl_gym.episode.resolve_max_turns`: the row's ``max_turns``, else the env's own,
    capped by ``config.max_turns``. An env that raises (in make, init, step or get_metrics) ends this trajectory
    with ``stop_reason="error"``, the error text in :attr:`Trajectory.error`, zero reward and an all-zero loss
    mask. Engine errors propagate: a broken engine is the caller's problem, not one trajectory's.
    """
    params = dict(sampling_params if sampling_params is not None else config.sampling_params)
    extras = dict(env_extras or {})
    trajectory = Trajectory(trajectory_id=trajectory_id, env_class=env_class, prompt_ids=[],
                            env_fingerprint=fingerprint_or_none(env_class))
    policy = TokenPolicy(engine, chat, config, trajectory, params)
    make_env = make_env or make_env_factory(env_class, env_config_for(config.env_configs, env_class, {}), extras)
    try:
        episode = await run_episode(
            make_env, copy.deepcopy(prompt), policy, env_class=env_class, max_turns_cap=config.max_turns,
            row_max_turns=extras.get("max_turns"), caller=caller or EnvCaller(executor),
        )
    finally:
        engine.finish_session(policy.session)
    _finish(trajectory, episode, chat, config, prompt)
    return trajectory


ENGINE_ERROR_PREFIX = "engine: "  # how Trajectory.error starts for a trajectory an engine error ended


def engine_error_trajectory(chat: ChatTokenizer, prompt: List[Dict[str, Any]], env_class: str,
                            trajectory_id: TrajectoryID, error: BaseException) -> Trajectory:
    """The record of a trajectory that an engine error ended (for callers that record engine errors rather
    than stop: an evaluation): masked out, reward 0, ``error`` "engine: ...", as an env error's."""
    trajectory = Trajectory(trajectory_id=trajectory_id, env_class=env_class, prompt_ids=[], conversation=list(prompt),
                            stop_reason="error", error=ENGINE_ERROR_PREFIX + str(error), episode_end=EpisodeEnd.ERROR,
                            env_fingerprint=fingerprint_or_none(env_class))
    _set_prompt_ids(trajectory, chat, prompt)
    logger.debug("trajectory %s of %s ended by an engine error: %s", _session_key(trajectory_id), env_class, error)
    return trajectory


def _set_prompt_ids(trajectory: Trajectory, chat: ChatTokenizer, prompt: List[Dict[str, Any]]) -> None:
    try:
        trajectory.prompt_ids = chat.prompt_ids(prompt)
    except Exception:  # a prompt that cannot be templated still yields a (masked-out) row
        trajectory.prompt_ids = [chat.turn_end_token_id]


def _finish(trajectory: Trajectory, episode: Episode, chat: ChatTokenizer, config: RolloutConfig,
            prompt: List[Dict[str, Any]]) -> None:
    """Copy how the episode ended into the trajectory (SkyRL's stop reasons: the engine's, ``length``, ``error``)."""
    trajectory.episode_end = episode.end
    trajectory.truncated_by_max_turns = episode.end is EpisodeEnd.MAX_TURNS
    trajectory.max_turns_cap_reached = episode.cap_reached
    trajectory.env_seconds = episode.env_seconds
    trajectory.total_seconds = episode.total_seconds
    if episode.close_error:
        logger.warning("trajectory %s: env.close failed: %s", _session_key(trajectory.trajectory_id), episode.close_error)
    if episode.end is EpisodeEnd.ERROR:
        trajectory.error = episode.error
        trajectory.stop_reason = "error"
        logger.warning("trajectory %s of %s ended by an env error: %s",
                       _session_key(trajectory.trajectory_id), trajectory.env_class, episode.error)
        if not trajectory.prompt_ids:
            _set_prompt_ids(trajectory, chat, prompt)
            trajectory.conversation = list(prompt)
        return
    if episode.end is EpisodeEnd.LENGTH:
        trajectory.stop_reason = "length"
    trajectory.env_metrics = episode.env_metrics
    if not config.use_conversation_multi_turn and trajectory.turns:
        _finish_single_message(trajectory, chat)


def _append_to_single_assistant_message(conversation: List[Dict[str, Any]], prompt_count: int, text: str) -> None:
    if len(conversation) == prompt_count:
        conversation.append({"role": "assistant", "content": ""})
    conversation[-1] = {**conversation[-1], "content": conversation[-1]["content"] + text}


def _finish_single_message(trajectory: Trajectory, chat: ChatTokenizer) -> None:
    """Single-message mode: drop the unused last observation and close the message with EOS (loss mask 1).

    The EOS is trained on (as in SkyRL) so the model learns to end the whole episode; a length-truncated
    episode gets none.
    """
    last = trajectory.turns[-1]
    del trajectory.ids[last.output_end :]
    del trajectory.loss_mask[last.output_end :]
    if trajectory.logprobs is not None:
        del trajectory.logprobs[last.output_end :]
    last.end = last.output_end
    ends = trajectory.ids and trajectory.ids[-1] in (chat.turn_end_token_id, chat.eos_token_id)
    if trajectory.stop_reason != "length" and not ends:
        trajectory.ids.append(chat.turn_end_token_id)
        trajectory.loss_mask.append(1)
        if trajectory.logprobs is not None:
            trajectory.logprobs.append(0.0)
        trajectory.final_eos_appended = True
