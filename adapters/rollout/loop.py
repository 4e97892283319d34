"""The agent loop of one trajectory: token-in/token-out generation interleaved with env steps."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from concurrent.futures import Executor
from typing import Any, Dict, List, Optional

from skygym_adapters.engines.base import resolve_sampling
from skygym_adapters.rollout.chat import ChatTokenizer
from skygym_adapters.rollout.config import RolloutConfig
from skygym_adapters.rollout.trajectory import Trajectory, Turn
from skygym_adapters.types import SamplingParams, TrajectoryID

logger = logging.getLogger(__name__)


class EnvCallError(Exception):
    """An env method raised; ends only the trajectory it belongs to."""

    def __init__(self, method: str, error: BaseException) -> None:
        super().__init__(f"{method}: {type(error).__name__}: {error}")
        self.method = method
        self.error = error


class _EnvRunner:
    """Runs blocking env calls in a bounded thread pool (or inline) and accumulates their time."""

    def __init__(self, executor: Optional[Executor]) -> None:
        self.executor = executor
        self.seconds = 0.0

    async def call(self, method: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            if self.executor is None:
                return func(*args, **kwargs)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, lambda: func(*args, **kwargs))
        except Exception as exc:
            raise EnvCallError(method, exc) from exc
        finally:
            self.seconds += time.perf_counter() - start

    async def step(self, env: Any, action: str) -> Any:
        """``await env.astep(action)`` where the env has an async path (the tool envs wait on HTTP or
        SQLite there without holding a thread), else ``env.step`` through :meth:`call`."""
        astep = getattr(env, "astep", None)
        if astep is None or not asyncio.iscoroutinefunction(astep):
            return await self.call("step", env.step, action)
        start = time.perf_counter()
        try:
            return await astep(action)
        except Exception as exc:
            raise EnvCallError("step", exc) from exc
        finally:
            self.seconds += time.perf_counter() - start


def _session_key(trajectory_id: TrajectoryID) -> str:
    return f"{trajectory_id['instance_id']}_{trajectory_id['repetition_id']}"


def _validate_step_output(output: Any) -> Dict[str, Any]:
    if not isinstance(output, dict) or "done" not in output or "reward" not in output:
        raise TypeError(f"env.step must return a StepOutput dict with reward/done/observations, got {output!r:.120}")
    observations = output.get("observations") or []
    if not isinstance(observations, list) or any(
        not isinstance(m, dict) or "role" not in m or "content" not in m for m in observations
    ):
        raise TypeError(f"env.step observations must be a list of chat messages, got {observations!r:.120}")
    return output


async def run_trajectory(
    engine: Any,
    chat: ChatTokenizer,
    config: RolloutConfig,
    prompt: List[Dict[str, Any]],
    env_class: str,
    env_extras: Optional[Dict[str, Any]],
    trajectory_id: TrajectoryID,
    sampling_params: Optional[SamplingParams] = None,
    executor: Optional[Executor] = None,
) -> Trajectory:
    """Run one episode of ``env_class`` on ``prompt`` with ``engine`` and record it token for token.

    An env that raises (in make, init, step or get_metrics) ends this trajectory with ``stop_reason="error"``,
    the error text in :attr:`Trajectory.error`, zero reward and an all-zero loss mask. Engine errors propagate:
    a broken engine is the caller's problem, not one trajectory's.
    """
    import skyrl_gym

    started = time.perf_counter()
    sampling_params = dict(sampling_params if sampling_params is not None else config.sampling_params)
    sampling = resolve_sampling(sampling_params)
    env_runner = _EnvRunner(executor)
    session = _session_key(trajectory_id)
    extras = dict(env_extras or {})
    extras["max_turns"] = config.max_turns
    multi_turn = config.use_conversation_multi_turn

    trajectory = Trajectory(trajectory_id=trajectory_id, env_class=env_class, prompt_ids=[])
    env = None
    try:
        env = await env_runner.call(
            "make", skyrl_gym.make, env_class, env_config=config.env_configs.get(env_class, {}), extras=extras
        )
        conversation, _info = await env_runner.call("init", env.init, copy.deepcopy(prompt))
        conversation = list(conversation)
        trajectory.conversation = conversation  # the same list: grows with every turn
        try:
            trajectory.prompt_ids = chat.prompt_ids(conversation)
        except Exception as exc:  # init() returned something the chat template cannot render
            raise EnvCallError("init", ValueError(f"the prompt returned by init() cannot be templated: {exc}")) from exc
        trajectory.prompt_message_count = len(conversation)
        done = False
        while not done:
            if len(trajectory.turns) >= config.max_turns:
                trajectory.truncated_by_max_turns = True
                break
            context = trajectory.prompt_ids + trajectory.ids
            if config.max_input_length is not None and len(context) > config.max_input_length:
                trajectory.stop_reason = "length"
                break

            model_start = time.perf_counter()
            if hasattr(engine, "engine_for"):  # an EngineClient: keep the trajectory on one engine
                output = await engine.generate([context], sampling_params, session_ids=[session],
                                               messages=[list(conversation)])
            elif getattr(engine, "wants_messages", False):  # a chat-completions engine templates by itself
                output = await engine.generate([context], sampling_params, messages=[list(conversation)])
            else:
                output = await engine.generate([context], sampling_params)
            trajectory.model_seconds += time.perf_counter() - model_start
            output_ids = list(output["response_ids"][0])
            stop_reason = output["stop_reasons"][0]
            output_logprobs = (output.get("response_logprobs") or [None])[0]
            if sampling.logprobs and output_logprobs is None:
                raise RuntimeError(f"{type(engine).__name__} returned no logprobs although they were requested")
            text = chat.decode(output_ids, skip_special_tokens=True)
            if not output_ids:  # nothing generated: close the turn so its reward has a token to sit on
                output_ids = [chat.turn_end_token_id]
                output_logprobs = [] if output_logprobs is not None else None
                empty_output = True
            else:
                empty_output = False

            ends_turn = bool(output_ids) and output_ids[-1] in (chat.turn_end_token_id, chat.eos_token_id)
            added_eos = empty_output
            if multi_turn and not ends_turn and stop_reason == "stop" and sampling.stop and (
                config.append_eos_token_after_stop_str_in_multi_turn
            ):
                output_ids.append(chat.turn_end_token_id)
                added_eos = True

            step_output = await env_runner.step(env, text)
            try:
                _validate_step_output(step_output)
                reward = float(step_output["reward"])
            except (TypeError, ValueError) as exc:
                raise EnvCallError("step", exc) from exc
            done = bool(step_output["done"])
            observations = list(step_output.get("observations") or [])
            if step_output.get("postprocessed_action") is not None:
                # Re-tokenizing a rewritten action would break token-faithfulness: keep the model's tokens and
                # only note the rewrite.
                logger.debug("env %s rewrote the action; the model's own tokens are kept", env_class)

            if multi_turn and not done and not added_eos and not (
                output_ids and output_ids[-1] in (chat.turn_end_token_id, chat.eos_token_id)
            ):
                # A turn cut by max_generate_length (or a stop string with EOS-appending off) must still be closed
                # before the next message starts; the closing token is not the model's, so it is masked out.
                output_ids.append(chat.turn_end_token_id)
                added_eos = True

            logprobs = list(output_logprobs) if output_logprobs is not None else None
            if logprobs is not None and added_eos:
                logprobs.append(0.0)

            observation_ids: List[int] = []
            method, note = "", ""
            if multi_turn:
                conversation.append({"role": "assistant", "content": chat.assistant_text(output_ids)})
                if not done:
                    obs = chat.observation_ids(conversation, observations, add_generation_prompt=True)
                    observation_ids, method, note = obs.ids, obs.method, obs.note
                    if note:
                        logger.warning("trajectory %s: %s", session, note)
                conversation.extend(observations)
            else:
                _append_to_single_assistant_message(conversation, trajectory.prompt_message_count, text)
                if not done and observations:
                    raw = "".join(str(m["content"]) for m in observations)
                    observation_ids = chat.encode(raw)
                    method = "raw"
                    _append_to_single_assistant_message(conversation, trajectory.prompt_message_count, raw)

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
                Turn(
                    start=start,
                    output_end=start + len(output_ids),
                    end=len(trajectory.ids),
                    context_length=len(context),
                    reward=reward,
                    stop_reason=stop_reason,
                    text=text,
                    added_eos=added_eos,
                    observation_method=method,
                    observation_note=note,
                )
            )
            trajectory.stop_reason = stop_reason

        if not multi_turn and trajectory.turns:
            _finish_single_message(trajectory, chat)
        trajectory.env_metrics = dict(await env_runner.call("get_metrics", _metrics_of, env) or {})
    except EnvCallError as exc:
        trajectory.error = str(exc)
        trajectory.stop_reason = "error"
        logger.warning("trajectory %s of %s ended by an env error: %s", session, env_class, exc)
        if not trajectory.prompt_ids:
            try:
                trajectory.prompt_ids = chat.prompt_ids(prompt)
            except Exception:  # a prompt that cannot be templated still yields a (masked-out) row
                trajectory.prompt_ids = [chat.turn_end_token_id]
            trajectory.conversation = list(prompt)
    finally:
        if env is not None:
            try:
                await env_runner.call("close", env.close)
            except EnvCallError as exc:  # a failing close must not hide the episode
                logger.warning("trajectory %s: env.close failed: %s", session, exc)
        close_session = getattr(engine, "finish_session", None)
        if callable(close_session):
            close_session(session)
    trajectory.env_seconds = env_runner.seconds
    trajectory.total_seconds = time.perf_counter() - started
    return trajectory


def _metrics_of(env: Any) -> Dict[str, Any]:
    get_metrics = getattr(env, "get_metrics", None)
    return get_metrics() if callable(get_metrics) else {}


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
