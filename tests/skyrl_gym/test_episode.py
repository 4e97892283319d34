"""The one episode driver: turn limits, how episodes end, env errors, async steps, and the env told its limit."""

from __future__ import annotations

import asyncio
import math
import sys
import threading
from typing import Any, Dict, Optional

import pytest

from skyrl_gym import BaseTextEnv, StepOutput
from skyrl_gym.episode import (
    BasePolicy,
    EnvCaller,
    EpisodeEnd,
    ScriptedPolicy,
    make_env_factory,
    resolve_max_turns,
    run_episode,
    run_sync,
)

PROMPT = [{"role": "user", "content": "count with me"}]


class Counter(BaseTextEnv):
    """Done once the action says "stop" or at its own max_turns; turn k earns k; observation "obs k"."""

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None, own_max_turns: Optional[int] = 4):
        super().__init__(env_config, extras)
        if own_max_turns is not None:
            self.max_turns = int(self.extras.get("max_turns", own_max_turns))
        self.closed = 0

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        done = action == "stop" or (not self.max_turns_is_default and self.turns >= self.max_turns)
        observations = [] if done else [{"role": "user", "content": f"obs {self.turns}"}]
        return StepOutput(observations=observations, reward=float(self.turns), done=done, metadata={"turn": self.turns})

    def close(self) -> None:
        self.closed += 1


def play(env: Any, policy: Any, **kwargs: Any):
    return run_sync(run_episode(lambda: env, PROMPT, policy, env_class="counter", **kwargs))


@pytest.mark.parametrize(
    "row, env_default, cap, expected",
    [
        (3, 5, None, 3),  # the row wins over the env's default
        (None, 5, None, 5),  # else the env's own
        (None, 5, 2, 2),  # the cap bounds it
        (7, 5, 4, 4),  # the cap bounds the row too
        (None, None, 6, 6),  # an env with no limit of its own: the cap
        (None, None, None, None),  # no limit at all: the env alone ends the episode
        (0, 5, None, 5),  # a non-positive row value is not a limit
        (True, 5, None, 5),  # nor is a boolean
    ],
)
def test_max_turns_precedence_is_row_then_env_then_cap(row, env_default, cap, expected):
    assert resolve_max_turns(row, env_default, cap) == expected


def test_a_bad_cap_is_refused_with_its_value():
    with pytest.raises(ValueError, match="positive integer or None, got 0"):
        resolve_max_turns(None, 3, 0)


def test_the_env_ending_the_episode_is_termination():
    env = Counter()
    episode = play(env, ScriptedPolicy(["go", "stop"]))
    assert episode.end is EpisodeEnd.ENV_DONE and episode.terminated and not episode.truncated
    assert episode.rewards == [1.0, 2.0] and episode.total_reward == 3.0
    assert [m["content"] for m in episode.messages] == ["count with me", "go", "obs 1", "stop"]
    assert env.closed == 1


def test_the_cap_is_told_to_the_env_so_both_agree_on_the_last_turn():
    env = Counter()  # its own limit is 4
    episode = play(env, ScriptedPolicy("go"), max_turns_cap=2)
    assert env.max_turns == 2 and episode.max_turns == 2
    assert episode.num_turns == 2 and episode.end is EpisodeEnd.ENV_DONE
    assert episode.cap_reached  # env_done on the turn the cap made its last: the record says so


def test_an_episode_the_env_ends_before_the_cap_or_under_its_own_limit_did_not_reach_the_cap():
    assert not play(Counter(), ScriptedPolicy(["go", "stop"]), max_turns_cap=3).cap_reached  # the env ended
    assert not play(Counter(), ScriptedPolicy("go"), max_turns_cap=4).cap_reached  # its own limit
    assert not play(Counter(), ScriptedPolicy("go")).cap_reached  # no cap


class Endless(BaseTextEnv):
    """Never done, never sets max_turns (keeps BaseTextEnv's placeholder)."""

    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[{"role": "user", "content": "more"}], reward=0.5, done=False, metadata={})


def test_an_env_without_a_limit_of_its_own_is_truncated_at_the_cap():
    env = Endless()
    assert env.max_turns_is_default
    episode = play(env, ScriptedPolicy("go"), max_turns_cap=3)
    assert episode.num_turns == 3 and episode.end is EpisodeEnd.MAX_TURNS and episode.truncated
    assert episode.cap_reached


@pytest.fixture
def registered_counter():
    import skyrl_gym

    skyrl_gym.register("test_episode_counter", entry_point=Counter)
    yield "test_episode_counter"
    skyrl_gym.deregister("test_episode_counter")


def test_the_rows_max_turns_reaches_the_env_through_make(registered_counter):
    make_env = make_env_factory(registered_counter, extras={"max_turns": 2})
    episode = run_sync(run_episode(make_env, PROMPT, ScriptedPolicy("go"), row_max_turns=2))
    assert episode.num_turns == 2 and episode.end is EpisodeEnd.ENV_DONE


def test_each_env_of_a_group_gets_its_own_copy_of_the_rows_nested_columns(registered_counter):
    """A group's samples share one row: an env that changed its ``reward_spec`` changed its siblings' (and the
    row's) when the extras were copied one level deep."""
    row = {"reward_spec": {"ground_truth": "4"}, "extra_info": {"notes": []}}
    make_env = make_env_factory(registered_counter, extras=row)
    first, second = make_env(), make_env()
    first.extras["reward_spec"]["ground_truth"] = "forged"
    first.extras["extra_info"]["notes"].append("seen")
    assert second.extras == row == {"reward_spec": {"ground_truth": "4"}, "extra_info": {"notes": []}}


def test_a_live_object_in_the_extras_stays_the_callers(registered_counter):
    """A generator may put a live object in the extras (the rlm env's ``lm_callback``): each env gets that object,
    not a copy of it (a deep copy failed on its lock, and calls went to a copy the caller never saw)."""
    import threading

    class Callback:
        def __init__(self):
            self.lock, self.calls = threading.Lock(), 0

    callback = Callback()
    make_env = make_env_factory(registered_counter, extras={"lm_callback": callback, "extra_info": {"k": [1]}})
    first, second = make_env(), make_env()
    assert first.extras["lm_callback"] is second.extras["lm_callback"] is callback
    assert first.extras["extra_info"]["k"] is not second.extras["extra_info"]["k"]


def test_a_policy_can_stop_the_episode_with_a_reason():
    class Budget(BasePolicy):
        async def act(self, episode):
            return EpisodeEnd.LENGTH if episode.num_turns == 2 else "go"

    episode = play(Counter(), Budget())
    assert episode.end is EpisodeEnd.LENGTH and episode.truncated and episode.num_turns == 2


def test_scripted_actions_that_run_out_abort_instead_of_repeating():
    episode = play(Counter(), ScriptedPolicy(["go"], repeat_last=False))
    assert episode.end is EpisodeEnd.ABORTED and episode.num_turns == 1 and not episode.terminated


class Exploding(Counter):
    def step(self, action: str) -> StepOutput:
        if self.turns == 1:
            raise RuntimeError("tool crashed")
        return super().step(action)


def test_an_env_error_ends_only_that_episode_and_names_the_call():
    env = Exploding()
    episode = play(env, ScriptedPolicy("go"))
    assert episode.end is EpisodeEnd.ERROR and episode.error_method == "step"
    assert episode.error == "step: RuntimeError: tool crashed" and isinstance(episode.exception, RuntimeError)
    assert episode.total_reward == 0.0 and env.closed == 1  # closed all the same


@pytest.mark.parametrize("reward", [math.nan, math.inf, "1.0", None, True])
def test_a_reward_that_is_not_a_finite_number_is_an_error(reward):
    class Bad(Counter):
        def step(self, action):
            return {"observations": [], "reward": reward, "done": True, "metadata": {}}

    episode = play(Bad(), ScriptedPolicy("go"))
    assert episode.end is EpisodeEnd.ERROR and "reward must be a finite number" in episode.error


def test_make_and_init_failures_are_errors_of_the_episode():
    def broken_make():
        raise KeyError("ground_truth")

    episode = run_sync(run_episode(broken_make, PROMPT, ScriptedPolicy("go")))
    assert episode.end is EpisodeEnd.ERROR and episode.error_method == "make"

    class BadInit(Counter):
        def init(self, prompt=None):
            return "not messages", {}

    episode = play(BadInit(), ScriptedPolicy("go"))
    assert episode.error_method == "init" and "list of chat messages" in episode.error


def test_an_engine_failure_in_the_policy_propagates():
    class Broken(BasePolicy):
        async def act(self, episode):
            raise ConnectionError("engine down")

    with pytest.raises(ConnectionError, match="engine down"):
        play(Counter(), Broken())


def test_an_env_that_awaits_its_own_io_is_stepped_on_the_loop():
    class AsyncCounter(Counter):
        async def astep(self, action: str) -> StepOutput:
            self.loop_thread = threading.get_ident()
            await asyncio.sleep(0)
            return self.step(action)

    env = AsyncCounter()
    assert env.has_native_astep and not Counter().has_native_astep
    episode = play(env, ScriptedPolicy("stop"))
    assert episode.end is EpisodeEnd.ENV_DONE and env.loop_thread == threading.get_ident()


def test_blocking_steps_run_in_the_callers_executor():
    from concurrent.futures import ThreadPoolExecutor

    seen = []

    class Recording(Counter):
        def step(self, action):
            seen.append(threading.current_thread().name)
            return super().step(action)

    with ThreadPoolExecutor(1, thread_name_prefix="env-pool") as pool:
        play(Recording(), ScriptedPolicy("stop"), caller=EnvCaller(pool))
    assert seen and seen[0].startswith("env-pool")


def test_env_time_counts_the_call_not_its_wait_for_a_free_thread(monkeypatch):
    """Episodes share the executor: a call queued behind another episode's work must not count that work. A
    clock that only the two calls move keeps the check exact."""
    from concurrent.futures import ThreadPoolExecutor

    from skyrl_gym import episode as episode_module

    clock = [0.0]
    monkeypatch.setattr(episode_module.time, "perf_counter", lambda: clock[0])
    release = threading.Event()

    def other_episodes_work():
        release.wait(10)
        clock[0] += 10.0

    def env_step():
        clock[0] += 1.0
        return "done"

    async def main(pool):
        pool.submit(other_episodes_work)  # holds the only thread
        caller = EnvCaller(pool)
        call = asyncio.ensure_future(caller.call("step", env_step))
        await asyncio.sleep(0)  # the call is queued behind the other work
        release.set()
        assert await call == "done"
        return caller.seconds

    with ThreadPoolExecutor(1) as pool:
        assert asyncio.run(main(pool)) == 1.0


def test_the_default_astep_of_any_env_awaits_step():
    out = asyncio.run(Counter().astep("stop"))
    assert out["done"] and out["reward"] == 1.0


def test_a_close_that_raises_is_recorded_without_hiding_the_episode():
    class BadClose(Counter):
        def close(self):
            raise OSError("socket already gone")

    episode = play(BadClose(), ScriptedPolicy("stop"))
    assert episode.end is EpisodeEnd.ENV_DONE and "socket already gone" in episode.close_error


def test_run_sync_works_inside_a_running_loop():
    async def inside():
        return play(Counter(), ScriptedPolicy("stop")).end

    assert asyncio.run(inside()) is EpisodeEnd.ENV_DONE


def test_run_sync_never_formats_its_result():
    """`asyncio.run` in the main thread formats its task's repr, result included, when it restores the Ctrl-C
    handler; an episode holding a 10 MB action paid 0.15 s a run for it. run_sync keeps the result out of the
    task."""
    assert threading.current_thread() is threading.main_thread()  # where asyncio.run installs its handler

    class Big:
        formatted = 0

        def __repr__(self) -> str:
            Big.formatted += 1
            return "Big()"

    async def produce() -> Big:
        return Big()

    result = run_sync(produce())
    assert isinstance(result, Big) and Big.formatted == 0
    asyncio.run(produce())
    # the stdlib path run_sync avoids (if this changes, the detour can go); Python 3.10's asyncio.run did not
    assert Big.formatted >= 1 or sys.version_info < (3, 11)


def test_the_row_check_builds_local_envs_but_never_calls_an_env_service_per_row():
    """The trainer's row check builds each row's env: a served env's build is a session created over HTTP (with
    retries against a server that is down), so 7,500 rows would be 7,500 calls before training. Proxies are left
    to the run; a local env still names the row it refuses."""
    import socket

    from skyrl_gym.episode import check_env_row

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    connections = []

    def hang_up() -> None:  # every connection is counted and closed at once (a server that is down)
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(1)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        row = {"env_class": "remote", "prompt": [{"role": "user", "content": "2 * 3"}]}  # no reward_spec
        assert check_env_row(row, {"url": url, "env_id": "multiply"}) == (None, None)
    finally:
        listener.close()
    assert connections == []
    local = {"env_class": "multiply", "prompt": [{"role": "user", "content": "2 * 3"}]}
    assert "reward_spec" in check_env_row(local)[0]
