"""Envs in Ray actors (``skygym_adapters.ray_envs``): the episode driver and the generator get the same episodes,
rewards and errors from actor-hosted envs as from local ones; a dead actor is a clear error; sessions are closed.

A real local Ray (``ray.init(address="local", num_cpus=2)``) with real actors; the two-node cluster test is in
``test_ray_envs_cluster.py``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict

import pytest

ray = pytest.importorskip("ray", reason="Ray env workers need ray: pip install -e '.[train]'")

from skygym_adapters.ray_envs import EnvWorkerDied, EnvWorkerPool, RayEnv, RayEnvCaller  # noqa: E402
from skygym_adapters.scripted import ScriptedEngine  # noqa: E402

from skyrl_gym.episode import EnvCaller, EpisodeEnd, ScriptedPolicy, make_env_factory, run_episode  # noqa: E402
from tests.adapters.ray_envs_support import CASES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = "tests.adapters.ray_envs_support"


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        ray.shutdown()
    try:
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}},
        )
    except Exception as exc:  # pragma: no cover - a machine where Ray cannot start
        pytest.skip(
            f"Ray could not start a local instance here ({type(exc).__name__}: {exc}); see `ray start --head`"
        )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def pool(local_ray):
    pool = EnvWorkerPool(2, num_cpus_per_worker=0.5, imports=[SUPPORT], max_concurrency=8)
    pool.start()
    yield pool
    pool.shutdown()


@pytest.fixture
def own_pool(local_ray):
    pool = EnvWorkerPool(2, num_cpus_per_worker=0.5, imports=[SUPPORT])
    pool.start()
    yield pool
    pool.shutdown()


def _summary(episode) -> Dict[str, Any]:
    return {
        "end": episode.end,
        "rewards": episode.rewards,
        "messages": episode.messages,
        "metrics": episode.env_metrics,
        "error": episode.error,
        "max_turns": episode.max_turns,
    }


async def _local(env_id, extras, actions):
    return await run_episode(
        make_env_factory(env_id, None, extras),
        [{"role": "user", "content": "q"}],
        ScriptedPolicy(actions),
        env_class=env_id,
        row_max_turns=extras.get("max_turns"),
    )


async def test_multi_turn_episodes_in_actors_match_local_ones(pool):
    from tests.adapters.support import register_test_envs

    register_test_envs()
    turns = 0
    for env_id, extras, actions in CASES:
        local = await _local(env_id, extras, actions)
        assert local.end is not EpisodeEnd.ERROR, local.error
        turns += local.num_turns
        for caller in (RayEnvCaller(), EnvCaller()):  # awaited calls, and the plain driver's blocking calls
            remote = await run_episode(
                pool.env_factory(env_id, None, extras),
                [{"role": "user", "content": "q"}],
                ScriptedPolicy(actions),
                env_class=env_id,
                caller=caller,
                row_max_turns=extras.get("max_turns"),
            )
            assert _summary(remote) == _summary(local), (env_id, type(caller).__name__)
    assert [r for r in (await _local(*CASES[0])).rewards] == [0.0, pytest.approx(0.2 / 3), 1.0]
    infos = pool.worker_info()
    assert sum(i["calls"].get("step", 0) for i in infos) == 2 * turns
    assert all(i["calls"].get("create", 0) > 0 for i in infos), "sessions go to both workers"
    assert [i["sessions_open"] for i in infos] == [0, 0] and pool.open_sessions() == [0, 0], (
        "every session closed"
    )
    assert sum(i["sessions_closed"] for i in infos) == sum(i["sessions_created"] for i in infos)


async def test_a_ray_env_looks_like_the_local_env(pool):
    extras = {"reward_spec": {"method": "rule", "ground_truth": "42"}, "max_turns": 4}
    env = await pool.amake("multiply", {"boxed_wrong_reward": 0.25}, extras)
    local = make_env_factory("multiply", {"boxed_wrong_reward": 0.25}, extras)()
    assert (
        isinstance(env, RayEnv)
        and env.has_native_astep
        and env.node_id == ray.get_runtime_context().get_node_id()
    )
    assert env.max_turns == local.max_turns == 4 and env.tool_schemas() == []
    assert env.init([{"role": "user", "content": "6 * 7"}]) == local.init(
        [{"role": "user", "content": "6 * 7"}]
    )
    env.max_turns = local.max_turns = 2  # heard by the actor's env with the next step
    for action in ("\\boxed{40}", "\\boxed{41}"):
        assert await env.astep(action) == local.step(action)
    assert env.turns == local.turns == 2
    assert env.get_metrics() == local.get_metrics()
    env.close()
    env.close()  # a second close does nothing
    with pytest.raises(RuntimeError, match="closed"):
        env.step("\\boxed{42}")


async def test_env_errors_in_an_actor_are_the_same_error_results_as_local(pool):
    cases = [
        ("gsm8k_multi_turn", {"max_turns": 2}, ["#### 1"]),  # no ground truth: DataError in make
        ("test_failing", {"fail_at": 2}, ["x", "y"]),  # RuntimeError in the second step
        ("test_malformed", {"mode": "bad_reward"}, ["x"]),  # a reward of None
    ]
    from tests.adapters.support import register_test_envs

    register_test_envs()
    for env_id, extras, actions in cases:
        local = await _local(env_id, extras, actions)
        remote = await run_episode(
            pool.env_factory(env_id, None, extras),
            [{"role": "user", "content": "q"}],
            ScriptedPolicy(actions),
            env_class=env_id,
            caller=RayEnvCaller(),
        )
        assert local.end is EpisodeEnd.ERROR and remote.end is EpisodeEnd.ERROR, env_id
        assert (remote.error, remote.error_method, type(remote.exception)) == (
            local.error,
            local.error_method,
            type(local.exception),
        ), env_id
    assert pool.open_sessions() == [0, 0]
    assert sum(i["sessions_open"] for i in pool.worker_info()) == 0


def wait_until_dead(actor, timeout_s: float = 60.0) -> None:
    """Until ``actor`` refuses calls: ray.kill is asynchronous, and a call may still be served just after it (or,
    on a loaded machine, go unanswered for a while: asked again, not an error)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ray.get(actor.info.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        assert time.monotonic() < deadline, f"the env worker outlived its kill by {timeout_s:.0f} s"
        time.sleep(0.2)


async def test_a_dead_actor_is_a_clear_error_and_new_sessions_go_to_the_live_one(own_pool):
    pool = own_pool
    extras = {"turns": 5}
    env = await pool.amake("test_countdown_turns", None, extras)
    await env.ainit([{"role": "user", "content": "q"}])
    await env.astep("a")
    ray.kill(pool._actors[env.worker])
    wait_until_dead(pool._actors[env.worker])
    with pytest.raises(
        EnvWorkerDied, match=rf"env worker {env.worker} \(Ray actor on node .*\) died during step"
    ):
        await env.astep("b")
    env.close()  # the session died with its actor: recorded, not raised
    assert env.close_error and "died" in env.close_error
    assert pool.alive().count(False) == 1
    episodes = [
        await run_episode(
            pool.env_factory("test_countdown_turns", None, {"turns": 2}),
            [{"role": "user", "content": "q"}],
            ScriptedPolicy("a"),
            caller=RayEnvCaller(),
        )
        for _ in range(3)
    ]
    assert [e.rewards for e in episodes] == [[1.0, 2.0]] * 3
    ray.kill(pool._actors[1 - env.worker])
    wait_until_dead(pool._actors[1 - env.worker])
    episode = await run_episode(
        pool.env_factory("test_countdown_turns", None, {"turns": 2}),
        [{"role": "user", "content": "q"}],
        ScriptedPolicy("a"),
        caller=RayEnvCaller(),
    )
    assert episode.end is EpisodeEnd.ERROR and episode.error_method in ("make", "init")
    assert "EnvWorkerDied" in episode.error and "died" in episode.error
    with pytest.raises(EnvWorkerDied, match="all 2 env workers have died"):
        await pool.amake("test_countdown_turns", None, {})


def test_shutdown_closes_the_sessions_left_open(local_ray):
    pool = EnvWorkerPool(1, num_cpus_per_worker=0.5, imports=[SUPPORT])
    envs = [pool.make("test_countdown_turns", None, {"turns": 2}) for _ in range(3)]
    assert pool.worker_info()[0]["sessions_open"] == 3
    actor = pool._actors[0]
    envs[0].close()
    assert pool.shutdown() == 2  # the two left open, in the actor
    assert pool.shutdown() == 0  # a second shutdown is a no-op
    wait_until_dead(actor)
    assert all(isinstance(e, RayEnv) for e in envs)


def test_a_pool_the_cluster_cannot_hold_says_so(local_ray, caplog):
    pool = EnvWorkerPool(1, num_cpus_per_worker=64, start_timeout_s=3)
    with pytest.raises(EnvWorkerDied, match="could not place 1 env workers .*64 CPUs.*add nodes"):
        pool.start()
    # said at the start, not after the whole wait in silence (120 s by default)
    assert "1 workers x 64 CPUs is more than the cluster's 2 CPUs in all: waiting up to 3 s" in caplog.text
    with pytest.raises(ValueError, match="scheduling_strategy"):
        EnvWorkerPool(1, scheduling_strategy="PACKED")
    with pytest.raises(
        EnvWorkerDied,
        match=r"env workers failed to start \(ActorDiedError\): ModuleNotFoundError: No module named 'no_such_env_package'$",
    ):
        EnvWorkerPool(1, num_cpus_per_worker=0, imports=["no_such_env_package"]).start()


async def test_the_generator_routes_env_calls_to_the_actors_by_configuration(local_ray, tokenizer):
    """The trainer's ``environment.ray_env_workers.*`` keys reach the generator (``build_generator``), which then
    builds and steps every env in the actors: same output as with local envs, and the actors counted the calls."""
    from skygym_train.config import load_config
    from skygym_train.generation import build_generator
    from tests.adapters.support import register_test_envs

    register_test_envs()
    rows = [
        {"prompt": [{"role": "user", "content": f"question {i}"}], "env_class": env_id, **extras}
        for i, (env_id, extras, _) in enumerate(CASES)
    ]
    scripts = {f"question {i}": actions for i, (_, _, actions) in enumerate(CASES)}

    async def run(*overrides: str):
        cfg = load_config(["generator.max_turns=3", *overrides], validate=False)
        generator = build_generator(cfg, ScriptedEngine(tokenizer, scripts), tokenizer)
        try:
            output = generator.to_generator_output(await generator.run_rows(rows))
            infos = generator.env_pool.worker_info() if generator.env_pool is not None else None
            return output, infos, generator
        finally:
            generator.close()

    local, no_workers, plain = await run()
    assert no_workers is None and plain.env_pool is None
    remote, infos, generator = await run(
        "environment.ray_env_workers.num_workers=2",
        "environment.ray_env_workers.num_cpus_per_worker=0.5",
        f"environment.ray_env_workers.imports=[{SUPPORT}]",
    )
    assert generator.config.ray_env_workers == 2
    assert generator.config.ray_env_worker_options["scheduling_strategy"] == "SPREAD"
    for key in (
        "trajectory_rewards",
        "rewards",
        "response_ids",
        "loss_masks",
        "num_turns",
        "env_metrics",
        "errors",
        "stop_reasons",
    ):
        assert remote[key] == local[key], key
    assert local["trajectory_rewards"][0] == pytest.approx(0.2 / 3 + 1.0)
    # every env call went to the actors: one session per trajectory, one actor step per turn
    assert sum(i["calls"].get("create", 0) for i in infos) == len(rows)
    assert sum(i["calls"].get("step", 0) for i in infos) == sum(local["num_turns"])
    assert sum(i["sessions_open"] for i in infos) == 0
    assert generator._env_pool is None, "close() ended the pool the generator started"


def test_the_trainer_config_refuses_bad_env_worker_settings():
    from skygym_train.config import ConfigError, load_config, validate_config

    cfg = load_config(
        [
            "environment.ray_env_workers.num_workers=-1",
            "environment.ray_env_workers.scheduling_strategy=PACK",
            "environment.ray_env_workers.max_concurrency=0",
        ],
        validate=False,
    )
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, has_cuda=False)
    problems = "\n".join(info.value.problems)
    assert "environment.ray_env_workers.num_workers=-1: must be >= 0" in problems
    assert "environment.ray_env_workers.scheduling_strategy=PACK: must be SPREAD or DEFAULT" in problems
    assert "environment.ray_env_workers.max_concurrency=0: must be >= 1" in problems
