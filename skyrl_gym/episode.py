"""The one episode driver: build an env, ``init`` it, then let a policy act and the env step until the episode ends.

Every place that plays episodes uses :func:`run_episode`: the token-in/token-out rollout and the trainer's generator,
evaluation, the veRL agent loop, TRL, the OpenAI-agents adapter, the conformance kit, the checker and
``skyrl-gym step``. What differs between them is the *policy* (how the next action is produced and what is recorded
about it) and the *env caller* (where blocking env calls run); the episode itself is written once, here:

1. build the env (``make_env``), ``init`` it with the prompt, hand the first observation to the policy;
2. resolve the turn limit once (:func:`resolve_max_turns`) and tell the env (``env.max_turns``);
3. loop: the policy acts (or stops the episode with a reason); the env steps; the step output is validated; the
   policy observes the step; stop when the env is done or the turn limit is reached;
4. collect the env's metrics and close it, whatever happened.

An exception raised by an env call, or by a policy hook as :class:`EnvCallError`, ends only that episode, with
:attr:`EpisodeEnd.ERROR` and the error text; any other exception from the policy (a broken engine) propagates.

How an episode ended has one vocabulary, :class:`EpisodeEnd`: ``env_done`` is termination (the env said done);
``max_turns`` and ``length`` are truncation (a limit ended it); ``aborted`` and ``error`` are neither.
"""

from __future__ import annotations

import asyncio
import enum
import math
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple, Union

from skyrl_gym.core import ConversationType, Env, MessageType, StepOutput


class EpisodeEnd(str, enum.Enum):
    """Why an episode ended."""

    ENV_DONE = "env_done"  # terminated: the env returned done=True
    MAX_TURNS = "max_turns"  # truncated: the turn limit (resolve_max_turns) was reached first
    LENGTH = "length"  # truncated: the policy's context or token budget was used up
    ABORTED = "aborted"  # the policy stopped without a limit being reached (an aborted generation, ...)
    ERROR = "error"  # an env call raised or returned something malformed

    @property
    def terminated(self) -> bool:
        return self is EpisodeEnd.ENV_DONE

    @property
    def truncated(self) -> bool:
        return self in (EpisodeEnd.MAX_TURNS, EpisodeEnd.LENGTH)


class EnvCallError(Exception):
    """An env call (``make``, ``init``, ``step``, ``get_metrics``) failed, or a policy hook failed in a way that
    concerns only this episode (an agent that raised, a prompt the chat template cannot render): ends only its own
    episode, with ``method`` naming what failed."""

    def __init__(self, method: str, error: BaseException) -> None:
        super().__init__(f"{method}: {type(error).__name__}: {error}")
        self.method = method
        self.error = error


def resolve_max_turns(row_max_turns: Any, env_max_turns: Any, cap: Optional[int]) -> Optional[int]:
    """The turn limit of an episode, in one documented order.

    1. the dataset row's ``max_turns`` (``extras["max_turns"]``), when it is a positive integer;
    2. else the env's own ``max_turns`` after construction (its default, or what it read from the row); an env
       that read 0 (a row's ``max_turns: 0``, as SkyRL-gym's envs read it) ends after its first step: 1;
    3. then the caller's cap (``RolloutConfig.max_turns``, veRL's ``max_assistant_turns``, ...) bounds it.

    None means no limit: the env alone ends the episode.
    """
    if _whole(env_max_turns) and env_max_turns == 0:  # else a cap would raise it: 1 turn or 5, by the caller
        env_max_turns = 1
    limit = next((int(v) for v in (row_max_turns, env_max_turns) if _positive_int(v)), None)
    if cap is not None:
        if not _positive_int(cap):
            raise ValueError(f"a max_turns cap must be a positive integer or None, got {cap!r}")
        limit = int(cap) if limit is None else min(limit, int(cap))
    return limit


def _positive_int(value: Any) -> bool:
    return _whole(value) and value > 0


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class StepRecord:
    """One turn: the policy's action and what the env answered."""

    action: str
    reward: float
    done: bool
    observations: ConversationType
    metadata: Dict[str, Any]
    output: StepOutput  # the env's raw step output


@dataclass
class Episode:
    """A finished (or running) episode. ``messages`` is the conversation as text: the prompt the env returned
    from ``init``, then each action as an assistant message followed by the env's observations."""

    env_class: str
    prompt: ConversationType = field(default_factory=list)
    info: Any = field(default_factory=dict)
    messages: ConversationType = field(default_factory=list)
    steps: List[StepRecord] = field(default_factory=list)
    max_turns: Optional[int] = None
    # The caller's cap set max_turns below the row's or the env's own limit (or the env had none).
    limit_from_cap: bool = False
    end: Optional[EpisodeEnd] = None
    error: Optional[str] = None
    error_method: Optional[str] = None
    exception: Optional[BaseException] = field(default=None, repr=False)  # what the failing call raised
    close_error: Optional[str] = None
    env_metrics: Dict[str, Any] = field(default_factory=dict)
    env_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def num_turns(self) -> int:
        return len(self.steps)

    @property
    def rewards(self) -> List[float]:
        return [step.reward for step in self.steps]

    @property
    def total_reward(self) -> float:
        """The sum of the turn rewards; 0.0 for an episode that ended in an error."""
        return 0.0 if self.end is EpisodeEnd.ERROR else float(sum(self.rewards))

    @property
    def terminated(self) -> bool:
        return self.end is not None and self.end.terminated

    @property
    def cap_reached(self) -> bool:
        """The episode played every turn the caller's cap allowed, fewer than the row or the env would
        have given. The env is told the capped limit, so it says done on that turn (``end`` is ``env_done``)
        whether it ended the game there or only ran out of turns: the cap may have cut the episode short."""
        return (self.limit_from_cap and self.max_turns is not None and self.num_turns >= self.max_turns
                and self.end in (EpisodeEnd.ENV_DONE, EpisodeEnd.MAX_TURNS))

    @property
    def truncated(self) -> bool:
        return self.end is not None and self.end.truncated


class Policy(Protocol):
    """What plays the model's side of an episode. Subclass :class:`BasePolicy`, which has no-op hooks."""

    async def start(self, episode: Episode) -> Optional[EpisodeEnd]:
        """The env has returned its first observation (``episode.prompt``); return an :class:`EpisodeEnd` to stop."""

    async def act(self, episode: Episode) -> Union[str, EpisodeEnd]:
        """The next action, or an :class:`EpisodeEnd` (e.g. ``LENGTH`` when the context is full) to stop."""

    async def observe(self, episode: Episode, step: StepRecord) -> Optional[EpisodeEnd]:
        """The env has answered ``step`` (already in ``episode.steps``); return an :class:`EpisodeEnd` to stop."""


class BasePolicy:
    """A policy with no-op ``start``/``observe``: subclasses write ``act``."""

    async def start(self, episode: Episode) -> Optional[EpisodeEnd]:
        return None

    async def act(self, episode: Episode) -> Union[str, EpisodeEnd]:
        raise NotImplementedError(f"{type(self).__name__} must implement act(episode)")

    async def observe(self, episode: Episode, step: StepRecord) -> Optional[EpisodeEnd]:
        return None


class ScriptedPolicy(BasePolicy):
    """Plays fixed actions in order: reward functions, tests, the checker. Once they run out it plays the last one
    again (``repeat_last=True``) or stops the episode as ``ABORTED``."""

    def __init__(self, actions: Union[str, List[str]], repeat_last: bool = True) -> None:
        self.actions = [actions] if isinstance(actions, str) else list(actions)
        if not self.actions:
            raise ValueError("ScriptedPolicy needs at least one action")
        self.repeat_last = repeat_last

    async def act(self, episode: Episode) -> Union[str, EpisodeEnd]:
        if episode.num_turns >= len(self.actions) and not self.repeat_last:
            return EpisodeEnd.ABORTED
        return self.actions[min(episode.num_turns, len(self.actions) - 1)]


class EnvCaller:
    """Runs an env's blocking calls, inline on the loop (``executor=None``) or in ``executor``, and adds up
    the time they run (``seconds``: busy time, not the wait for a free executor thread, which under many
    episodes would count each other's work). An exception becomes :class:`EnvCallError` naming the call.
    Subclass it to run calls elsewhere (the checker runs each episode on a thread of its own, with a timeout
    per call)."""

    def __init__(self, executor: Optional[Executor] = None) -> None:
        self.executor = executor
        self.seconds = 0.0

    async def call(self, method: str, fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        self._ran: Optional[float] = None  # what _run timed of the call itself (a caller's calls take turns)
        try:
            return await self._run(fn, *args)
        except EnvCallError:
            raise
        except Exception as exc:
            raise EnvCallError(method, exc) from exc
        finally:
            self.seconds += self._ran if self._ran is not None else time.perf_counter() - start

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.executor is None:
            return fn(*args)

        def timed() -> Any:
            begin = time.perf_counter()  # on the executor's thread: the queue wait before it is not env time
            try:
                return fn(*args)
            finally:
                self._ran = time.perf_counter() - begin

        return await asyncio.get_running_loop().run_in_executor(self.executor, timed)

    async def step(self, env: Env, action: str) -> Any:
        """``await env.astep(action)`` when the env awaits its own I/O, else ``env.step`` through :meth:`call`."""
        if not env.has_native_astep:
            return await self.call("step", env.step, action)
        start = time.perf_counter()
        try:
            return await env.astep(action)
        except Exception as exc:
            raise EnvCallError("step", exc) from exc
        finally:
            self.seconds += time.perf_counter() - start


def validate_step_output(output: Any, turn: int) -> Tuple[float, bool]:
    """The reward and done flag of a step output, or :class:`TypeError`/:class:`ValueError` saying what is wrong."""
    if not isinstance(output, Mapping) or "reward" not in output or "done" not in output:
        raise TypeError(f"step() on turn {turn} must return a StepOutput dict with reward/done/observations, "
                        f"got {output!r:.120}")
    observations = output.get("observations") or []
    if not isinstance(observations, list) or any(
        not isinstance(m, Mapping) or "role" not in m or "content" not in m for m in observations
    ):
        raise TypeError(f"step() on turn {turn}: observations must be a list of chat messages, got {observations!r:.120}")
    return finite_reward(output["reward"], f"step() on turn {turn}"), bool(output["done"])


def finite_reward(raw: Any, source: str) -> float:
    """``raw`` as a float: a number of any kind (numpy scalars too), not text, a boolean, NaN or an infinity.
    Else :class:`ValueError` naming ``source``: one NaN reward turns a whole GRPO group's advantages into NaN."""
    try:
        reward = float(raw) if not isinstance(raw, (str, bytes, bool)) else math.nan
    except (TypeError, ValueError):
        reward = math.nan
    if not math.isfinite(reward):
        raise ValueError(f"{source}: reward must be a finite number, got {raw!r:.60}")
    return reward


StepValidator = Callable[[Any, int], Tuple[float, bool]]


async def run_episode(
    make_env: Callable[[], Env],
    prompt: ConversationType,
    policy: Policy,
    *,
    env_class: str = "",
    max_turns_cap: Optional[int] = None,
    row_max_turns: Any = None,
    caller: Optional[EnvCaller] = None,
    validate: StepValidator = validate_step_output,
    turns_past_limit: int = 0,
) -> Episode:
    """Play one episode of the env that ``make_env()`` builds, with ``policy`` choosing the actions.

    ``max_turns_cap`` and ``row_max_turns`` feed :func:`resolve_max_turns`, and the env is told the result
    (``env.max_turns``). ``turns_past_limit > 0`` is for checking an env: it is not told, and the driver stops
    only that many turns past the limit (1 when there is none), so an env that never ends is caught.
    """
    started = time.perf_counter()
    caller = caller or EnvCaller()
    episode = Episode(env_class=env_class)
    env: Optional[Env] = None
    try:
        env = await caller.call("make", make_env)
        await _init(env, prompt, caller, episode)
        episode.max_turns = _turn_limit(env, row_max_turns, max_turns_cap, turns_past_limit, episode)
        episode.end = await policy.start(episode)
        while episode.end is None:
            episode.end = await _turn(env, policy, caller, episode, validate)
        metrics = await caller.call("get_metrics", _metrics_of, env)
        if not isinstance(metrics, Mapping):
            raise EnvCallError("get_metrics", TypeError(f"get_metrics() must return a dict, got {type(metrics).__name__}"))
        episode.env_metrics = dict(metrics)
    except EnvCallError as exc:
        episode.end, episode.error, episode.error_method = EpisodeEnd.ERROR, str(exc), exc.method
        episode.exception = exc.error
    finally:
        if env is not None:
            try:
                await caller.call("close", env.close)
            except EnvCallError as exc:  # a failing close must not hide the episode
                episode.close_error = str(exc)
        episode.env_seconds = caller.seconds
        episode.total_seconds = time.perf_counter() - started
    return episode


async def _init(env: Env, prompt: ConversationType, caller: EnvCaller, episode: Episode) -> None:
    result = await caller.call("init", env.init, [dict(m) for m in prompt])
    if not (isinstance(result, tuple) and len(result) == 2):
        raise EnvCallError("init", TypeError(f"init() must return (observation, info), got {result!r:.120}"))
    observation, info = result
    if not isinstance(observation, list) or any(
        not isinstance(m, Mapping) or "role" not in m or "content" not in m for m in observation
    ):
        raise EnvCallError("init", TypeError(f"init() must return a list of chat messages, got {observation!r:.120}"))
    episode.prompt = [dict(m) for m in observation]
    episode.info = info  # as the env returned it (the checker reports an info that is not a dict)
    episode.messages = [dict(m) for m in observation]


def own_max_turns(env: Env) -> Optional[int]:
    """The env's own turn limit, or None: BaseTextEnv's placeholder of 1, which no subclass set, is not one."""
    return None if getattr(env, "max_turns_is_default", False) else getattr(env, "max_turns", None)


def apply_turn_limit(env: Env, row_max_turns: Any = None, cap: Optional[int] = None) -> Optional[int]:
    """Resolve an episode's turn limit (:func:`resolve_max_turns`) for a freshly built env and tell the env
    (``env.max_turns``), so that the env and whoever drives it agree on the last turn. Used by the driver and by
    the Gymnasium bridge; None means no limit."""
    env_max_turns = own_max_turns(env)
    limit = resolve_max_turns(row_max_turns, env_max_turns, cap)
    if limit is not None and hasattr(env, "max_turns") and env.max_turns != limit:
        env.max_turns = limit
    return limit


def _turn_limit(env: Env, row_max_turns: Any, cap: Optional[int], turns_past_limit: int,
                episode: Episode) -> Optional[int]:
    env_max_turns = own_max_turns(env)
    own = resolve_max_turns(row_max_turns, env_max_turns, None)
    episode.limit_from_cap = cap is not None and (own is None or int(cap) < own)
    if turns_past_limit > 0:  # checking an env: it is not told, and must end the episode by itself
        return (resolve_max_turns(row_max_turns, env_max_turns, cap) or 1) + turns_past_limit
    return apply_turn_limit(env, row_max_turns, cap)


async def _turn(env: Env, policy: Policy, caller: EnvCaller, episode: Episode, validate: StepValidator) -> Optional[EpisodeEnd]:
    """One turn; returns how the episode ended, or None to go on."""
    if episode.max_turns is not None and episode.num_turns >= episode.max_turns:
        return EpisodeEnd.MAX_TURNS
    action = await policy.act(episode)
    if isinstance(action, EpisodeEnd):
        return action
    turn = episode.num_turns + 1
    output = await caller.step(env, action)
    try:
        reward, done = validate(output, turn)
    except (TypeError, ValueError) as exc:
        raise EnvCallError("step", exc) from exc
    raw_observations = output.get("observations") or []
    # A lenient validator (the checker's) may let malformed messages through: keep them as they are.
    observations = [dict(m) if isinstance(m, Mapping) else m for m in raw_observations] if isinstance(
        raw_observations, list) else []
    metadata = output.get("metadata")
    step = StepRecord(action, reward, done, observations, dict(metadata) if isinstance(metadata, Mapping) else {}, output)
    episode.steps.append(step)
    episode.messages.append({"role": "assistant", "content": action})
    episode.messages.extend(observations)
    stop = await policy.observe(episode, step)
    if done:
        return EpisodeEnd.ENV_DONE
    return stop


def _metrics_of(env: Env) -> Dict[str, Any]:
    get_metrics = getattr(env, "get_metrics", None)  # BaseTextEnv has it; a bare Env need not
    if not callable(get_metrics):
        return {}
    metrics = get_metrics()
    return {} if metrics is None else metrics


def make_env_factory(env_class: str, env_config: Any = None, extras: Optional[Mapping[str, Any]] = None) -> Callable[[], Env]:
    """``make_env`` for :func:`run_episode` from a registered id (``skyrl_gym.make``). Each env gets a copy of
    ``extras``' data of its own, nested values too (:func:`skyrl_gym.data.copy_containers`): a group's samples share
    one row, and an env that changed its ``reward_spec`` or ``extra_info`` would change its siblings'."""
    from skyrl_gym.data import copy_containers
    from skyrl_gym.registration import make

    return lambda: make(env_class, env_config=env_config, extras=copy_containers(dict(extras or {})))


def _lives_elsewhere(env_class: str) -> bool:
    """Whether ``env_class`` is a proxy of an env that lives elsewhere (:class:`skyrl_gym.remote.proxy.ProxyEnv`:
    a served env, an env on a Ray actor), whose every build is a remote call."""
    import functools

    from skyrl_gym.registration import spec
    from skyrl_gym.remote.proxy import ProxyEnv

    try:
        creator = spec(env_class).load_entry_point()
    except Exception:  # not loadable here: building it will say why
        return False
    while isinstance(creator, functools.partial):
        creator = creator.func
    return isinstance(creator, type) and issubclass(creator, ProxyEnv)


def check_env_row(row: Mapping[str, Any], env_config: Any = None) -> Tuple[Optional[str], Optional[int]]:
    """Build the row's env once and return (what the env says is wrong with the row, or None; the episode's
    turn limit before any caller's cap, :func:`resolve_max_turns` of the row's ``max_turns`` and the env's
    own, or None when the env was not built, lives elsewhere, or sets no limit).

    The env is built for the row as an episode builds it (:func:`make_env_factory` with the row's
    extras), which is where each env checks the columns it reads: ``reward_spec.ground_truth`` above all. Nothing
    is played. An ``env_config`` value the env refuses raises its :class:`~skyrl_gym.errors.EnvConfigError` (the
    config's, not the row's: every row of the env would say it). Anything else the build raises is the env's or
    the machine's, not the row's: it surfaces when the env runs. The row must hold a registered ``env_class``."""
    from skyrl_gym.data import row_extras
    from skyrl_gym.errors import DataError, EnvConfigError

    if _lives_elsewhere(row["env_class"]):
        return None, None  # building it is a call to an env service or a Ray actor, per row: the run checks it
    extras = row_extras(row)
    try:
        env = make_env_factory(row["env_class"], env_config, extras)()
    except DataError as exc:
        return str(exc), None
    except EnvConfigError:
        raise
    except Exception:  # the env's own failure, not the row's (the run reports it)
        return None, None
    env_max_turns = own_max_turns(env)
    limit = resolve_max_turns(extras.get("max_turns"), env_max_turns, None)
    try:
        env.close()
    except Exception:  # closing an env that never started is not the row's problem either
        pass
    return None, limit


def turn_cap_warning(env_class: str, limit: Optional[int], cap: Optional[int], option: str) -> Optional[str]:
    """The line that says a caller's turn cap (``option``, e.g. ``generator.max_turns``, set to ``cap``) ends
    the episodes of ``env_class`` before the ``limit`` its env and rows allow; None when it does not."""
    if limit is None or cap is None or limit <= cap:
        return None
    return (f"env {env_class} plays up to {limit} turns (its max_turns) but {option}={cap} ends every episode "
            f"after {cap}; set {option}={limit} to play all of them")


async def ascore_response(
    env_class: str, prompt: ConversationType, response: str, env_config: Any = None,
    extras: Optional[Mapping[str, Any]] = None,
) -> Episode:
    """One turn: the env of ``env_class`` scores ``response`` as the model's first action (reward functions, the
    ``score`` command). The episode stops after that turn (``ABORTED`` unless the env said done); the reward is
    ``episode.steps[0].reward`` when the episode did not end in an error."""
    extras = dict(extras or {})
    return await run_episode(make_env_factory(env_class, env_config, extras), list(prompt or []),
                             ScriptedPolicy(response, repeat_last=False), env_class=env_class,
                             row_max_turns=extras.get("max_turns"))


def score_response(env_class: str, prompt: ConversationType, response: str, env_config: Any = None,
                   extras: Optional[Mapping[str, Any]] = None) -> Episode:
    """:func:`ascore_response` from sync code."""
    return run_sync(ascore_response(env_class, prompt, response, env_config, extras))


def run_sync(coroutine: Any) -> Any:
    """Run a coroutine to completion from sync code, also when the calling thread already runs an event loop
    (then on a thread of its own)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop_running = False
    else:
        loop_running = True
    if not loop_running:  # run outside the except block: an error of the episode is not "during" this one
        return _run_with_result_aside(coroutine)
    import threading

    result: Dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = _run_with_result_aside(coroutine)
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target, name="skyrl-gym-episode")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def _run_with_result_aside(coroutine: Any) -> Any:
    """``asyncio.run(coroutine)``, with the result kept out of the main task. In the main thread, ``asyncio.run``
    ends by asking ``signal.getsignal`` for its Ctrl-C handler, a partial holding the task, and the signal module
    formats that handler's repr on the way (an enum lookup that fails): the task's repr holds its result's repr,
    whole. An episode with a 10 MB action took 0.15 s per run there (`skyrl-gym check` spent 6 of its 7 s on it),
    and an `eval` of many long trajectories would format all of them once."""
    box: List[Any] = []

    async def main() -> None:
        box.append(await coroutine)

    asyncio.run(main())
    return box[0]


__all__ = [
    "BasePolicy",
    "apply_turn_limit",
    "EnvCallError",
    "EnvCaller",
    "Episode",
    "finite_reward",
    "EpisodeEnd",
    "MessageType",
    "Policy",
    "ScriptedPolicy",
    "StepRecord",
    "ascore_response",
    "check_env_row",
    "make_env_factory",
    "resolve_max_turns",
    "run_episode",
    "run_sync",
    "score_response",
    "validate_step_output",
]
