"""Env work spread over a real two-node Ray cluster on this machine: two ``ray start`` processes (a head and a
second node, one CPU each), a driver that joins with ``ray.init(address=...)``, env workers placed with
``scheduling_strategy="SPREAD"`` and with a custom resource, episodes on both nodes with the same rewards as local.

The cluster is ``tests.ray_two_nodes`` (nodes ended by signal, not ``ray stop``, which would end every Ray instance
on the machine).
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest

ray = pytest.importorskip("ray", reason="Ray env workers need ray: pip install -e '.[train]'")

from skygym_adapters.ray_envs import EnvWorkerPool, RayEnvCaller  # noqa: E402

from skyrl_gym.episode import ScriptedPolicy, make_env_factory, run_episode  # noqa: E402
from tests.adapters.ray_envs_support import CASES  # noqa: E402
from tests.ray_two_nodes import two_node_ray_cluster  # noqa: E402

pytestmark = pytest.mark.slow

SUPPORT = "tests.adapters.ray_envs_support"


@pytest.fixture(scope="module")
def two_node_cluster():
    with two_node_ray_cluster(head_cpus=1, node2_cpus=1) as nodes:
        yield nodes


async def _episode(
    make_env: Any, env_id: str, extras: Dict[str, Any], actions: List[str], caller: Any = None
):
    return await run_episode(
        make_env,
        [{"role": "user", "content": "q"}],
        ScriptedPolicy(actions),
        env_class=env_id,
        row_max_turns=extras.get("max_turns"),
        caller=caller,
    )


def _summary(episode: Any) -> Any:
    return episode.end, episode.rewards, episode.messages, episode.env_metrics, episode.error


async def test_env_work_runs_on_both_nodes_with_the_same_rewards_as_local(two_node_cluster):
    from tests.adapters.support import register_test_envs

    register_test_envs()
    assert set(two_node_cluster) == {"head", "node2"}
    with EnvWorkerPool(2, num_cpus_per_worker=1, scheduling_strategy="SPREAD", imports=[SUPPORT]) as pool:
        assert sorted(pool.worker_nodes()) == sorted(two_node_cluster.values()), "one worker on each node"
        local = [
            await _episode(make_env_factory(env_id, None, extras), env_id, extras, actions)
            for env_id, extras, actions in CASES
        ]
        # every case twice, all in flight at once: sessions go to the least busy worker, so to both nodes
        remote = await asyncio.gather(
            *[
                _episode(pool.env_factory(env_id, None, extras), env_id, extras, actions, RayEnvCaller())
                for _ in range(2)
                for env_id, extras, actions in CASES
            ]
        )
        assert [_summary(e) for e in remote] == [_summary(e) for e in local] * 2
        infos = pool.worker_info()
        assert {i["node_id"] for i in infos} == set(two_node_cluster.values())
        for info in infos:  # both nodes stepped envs, and closed every session they opened
            assert info["calls"].get("step", 0) > 0 and info["sessions_created"] > 0, info
            assert info["sessions_open"] == 0 and info["sessions_closed"] == info["sessions_created"], info
        assert sum(i["calls"]["step"] for i in infos) == 2 * sum(e.num_turns for e in local)

    # a custom resource pins env work to a node (here the second one)
    with EnvWorkerPool(
        1, num_cpus_per_worker=0, resources_per_worker={"node2": 1}, imports=[SUPPORT]
    ) as pinned:
        assert pinned.worker_nodes() == [two_node_cluster["node2"]]
        env_id, extras, actions = CASES[2]
        episode = await _episode(
            pinned.env_factory(env_id, None, extras), env_id, extras, actions, RayEnvCaller()
        )
        assert _summary(episode) == _summary(local[2]) and episode.rewards == [0.0, 0.0, 1.0]
