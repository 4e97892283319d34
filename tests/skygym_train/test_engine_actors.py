"""Inference engines as Ray actors (``generator.run_engines_locally=true`` with Ray).

The trainer starts the HF engine in an actor, colocated on the policy's placement-group bundle or on bundles of its
own; weights reach the actor by the gloo broadcast from policy rank 0, and the actor then generates from them. The
two-node test places the engine actor on a second Ray node (a ``ray start`` process joined to the session's Ray on
this machine) and trains one-step-off (generation on the actor overlapping training and weight sync).
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from skygym_train.config import ConfigError, load_config
from skygym_train.config.validation import validate_config
from tests.skygym_train.toy_envs import toy_overrides

ACTORS = {"trainer.use_ray": "true", "generator.run_engines_locally": "true", "trainer.num_cpu_workers": 1,
          "trainer.max_training_steps": 1}


def _config(tiny_chat_model, toy_data, tmp_path, **extra):
    return load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{**ACTORS, **extra}))


def _problems(tiny_chat_model, toy_data, tmp_path, has_cuda=False, **extra):
    cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{**ACTORS, **extra}), validate=False)
    try:
        validate_config(cfg, has_cuda=has_cuda)
    except ConfigError as exc:
        return "\n".join(exc.problems)
    return ""


def test_settings_engine_actors_cannot_honour_are_refused(tiny_chat_model, toy_data, tmp_path):
    from skygym_train.config.validation import engines_are_ray_actors

    assert engines_are_ray_actors(_config(tiny_chat_model, toy_data, tmp_path))
    # without Ray, run_engines_locally=true is SkyRL's "launched by the trainer": the engine runs in its process
    assert not engines_are_ray_actors(_config(tiny_chat_model, toy_data, tmp_path, **{"trainer.use_ray": "false"}))
    assert _problems(tiny_chat_model, toy_data, tmp_path, **{"generator.num_inference_engines": 2}) == ""
    # several hf engines are only possible as actors
    many_here = _problems(tiny_chat_model, toy_data, tmp_path,
                          **{"generator.num_inference_engines": 2, "generator.run_engines_locally": "null"})
    assert "generator.num_inference_engines=2" in many_here and "run_engines_locally=true" in many_here
    for backend in ("inprocess", "shm"):
        text = _problems(tiny_chat_model, toy_data, tmp_path, **{"generator.weight_sync_backend": backend})
        assert f"generator.weight_sync_backend={backend}" in text and "Ray actors" in text
    remote = _problems(tiny_chat_model, toy_data, tmp_path, **{
        "generator.backend": "remote", "generator.remote_inference_engine_urls": "[http://127.0.0.1:1]",
        "trainer.placement.colocate_all": "false"})
    assert "generator.run_engines_locally=true contradicts generator.backend=remote" in remote
    cpu_only = _problems(tiny_chat_model, toy_data, tmp_path, has_cuda=False,
                         **{"generator.weight_sync_backend": "nccl"})
    assert "generator.weight_sync_backend=nccl: needs CUDA GPUs" in cpu_only
    # with GPUs: NCCL cannot join two ranks on one GPU (a colocated actor shares policy rank 0's)
    on_gpu = _problems(tiny_chat_model, toy_data, tmp_path, has_cuda=True, **{"generator.weight_sync_backend": "nccl"})
    assert "colocated engine actors" in on_gpu
    assert "engine_placement_strategy='NEAR'" in _problems(
        tiny_chat_model, toy_data, tmp_path, **{"generator.engine_placement_strategy": "NEAR"})


def _policy_sums(trainer):
    return {k: float(v.double().sum()) for k, v in trainer.policy.call("full_state_dict")[0].items()}


def _assert_same_weights(actor_sums, policy_sums):
    assert set(actor_sums) == set(policy_sums)
    for name, value in actor_sums.items():
        assert value == pytest.approx(policy_sums[name], rel=1e-5, abs=1e-5), name


def _greedy_logprobs_match_the_policy(trainer, client, model_dir):
    """The actor's greedy continuation and its logprobs, recomputed from the policy's current weights here."""
    from transformers import AutoModelForCausalLM

    prompt = [[1, 2, 3, 4, 5]]
    out = trainer._runner.run(client.generate(prompt, {"max_generate_length": 6, "temperature": 0.0,
                                                       "logprobs": True}))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.load_state_dict(trainer.policy.call("full_state_dict")[0], strict=False)
    ids = torch.tensor([prompt[0] + out["response_ids"][0]])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt[0]) - 1 : -1].float()
    expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt[0]):, None]).squeeze(-1)
    assert out["response_ids"][0] == logits.argmax(-1).tolist()
    torch.testing.assert_close(torch.tensor(out["response_logprobs"][0]), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_colocated_engine_actors_share_the_policy_bundle_and_get_its_weights(
    tiny_chat_model, toy_data, tmp_path, ray_cluster
):
    from skygym_train.engine_actors import EngineActorClient
    from skygym_train.trainer import PPOTrainer
    from skygym_train.weight_sync import EngineWeightSync

    # two engines on the policy's one bundle: they split the engines' share of it
    cfg = _config(tiny_chat_model, toy_data, tmp_path, **{"generator.num_inference_engines": 2})
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        clients = trainer.engine.engines
        assert len(clients) == 2 and all(isinstance(c, EngineActorClient) for c in clients)
        assert {c.node_id for c in clients} == set(trainer.policy.call("node_id"))
        assert len({c.info["pid"] for c in clients}) == 2
        assert [c.info["torch_threads"] for c in clients] == [2, 2]  # the bundle's cores, in turn with the policy
        before = clients[0].weight_sums()
        result = trainer.fit()
        sync = trainer._weight_sync
        assert result["global_step"] == 1 and sync.backend == "gloo" and sync.bytes_last > 0
        assert all(n > 0 for n in trainer.engine.requests_per_engine), "both engines generate"
        after = [c.weight_sums() for c in clients]
        assert after[0] != before, "the engine actor's weights did not change"
        for sums in after:  # one broadcast reached both
            _assert_same_weights(sums, _policy_sums(trainer))
        _greedy_logprobs_match_the_policy(trainer, clients[1], tiny_chat_model)

        # weights handed over through Ray (a state dict), then the checkpoint sync (a folder the actors read)
        zeros = {name: torch.zeros_like(t) for name, t in trainer.policy.call("full_state_dict")[0].items()}
        trainer._runner.run(trainer.engine.update_weights(zeros))
        assert set(clients[0].weight_sums().values()) == {0.0}
        cfg.generator.weight_sync_backend = "checkpoint"
        EngineWeightSync(cfg, trainer.policy, trainer.engine, trainer._runner).sync()
        for client in clients:
            _assert_same_weights(client.weight_sums(), _policy_sums(trainer))


@pytest.mark.slow
def test_an_engine_actor_gets_the_trajectories_sessions(tiny_chat_model, toy_data, tmp_path, ray_cluster):
    """The actor's engine hears what the trainer's process would tell it: how many trajectories are coming (each turn
    decodes as one batch) and which trajectory each request belongs to (it keeps their KV caches between turns and
    lets them go when the trajectories end)."""
    from skygym_adapters.models import load_tokenizer
    from skygym_adapters.rollout import RolloutConfig, RolloutGenerator
    from skygym_train.engine_actors import create_engine_actors
    from skygym_train.generation import create_engines
    from tests.adapters.support import register_test_envs, user

    register_test_envs()
    cfg = _config(tiny_chat_model, toy_data, tmp_path, **{"trainer.placement.colocate_all": "false"})
    tokenizer = load_tokenizer(str(tiny_chat_model))
    (client,) = create_engine_actors(cfg, str(tiny_chat_model), tokenizer, create_engines)
    try:
        generator = RolloutGenerator(client, tokenizer, RolloutConfig(
            max_turns=3, sampling_params={"max_generate_length": 4, "temperature": 1.0, "seed": 3}))
        trajectories = asyncio.run(generator.run([user(f"p{i}") for i in range(4)], ["test_countdown_turns"] * 4,
                                                 [{"turns": 3, "sleep_s": 0.05 * i} for i in range(4)]))
        generator.close()
        stats = client.engine_stats()
        assert [t.num_turns for t in trajectories] == [3] * 4
        assert stats["batches"] == 3 and stats["sequences"] == 12  # one batch per turn, whatever the envs' delays
        assert stats["resumed_tokens"] > 0
        # finish_session is not awaited, and an async actor may run a later call first: its end arrives shortly
        deadline = time.monotonic() + 10
        while stats["kept_sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
            stats = client.engine_stats()
        assert stats["kept_sessions"] == 0
    finally:
        client.close()


@pytest.fixture(scope="module")
def two_nodes(ray_cluster):
    from tests.ray_two_nodes import second_ray_node

    # a second node joins the session's Ray (two CPUs, this machine's own address, so the broadcast leaves the
    # loopback): the policy's bundle takes the head's two CPUs, so the engine's own bundle can only go to node2
    with second_ray_node(num_cpus=1) as nodes:
        yield nodes


@pytest.mark.slow
def test_an_engine_actor_on_a_second_node_trains_with_weights_broadcast_across_nodes(
    tiny_chat_model, toy_data, tmp_path, two_nodes, capsys
):
    import json

    import ray

    from skygym_train.trainer import PPOTrainer

    # one-step-off: a producer thread generates the next batch on the actor while the trainer trains and broadcasts
    cfg = _config(tiny_chat_model, toy_data, tmp_path, **{"trainer.placement.colocate_all": "false",
                                                          "trainer.async_training.enabled": "true",
                                                          "trainer.max_training_steps": 2})
    with PPOTrainer(cfg) as trainer:
        trainer.setup()
        (client,) = trainer.engine.engines
        policy_node = trainer.policy.call("node_id")[0]
        assert policy_node == two_nodes["head"]
        assert client.node_id == two_nodes["node2"] != policy_node
        result = trainer.fit()
        sync = trainer._weight_sync
        head_ip = next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == policy_node)
        # the group's rendezvous is policy rank 0's node address (this machine's own here), not a loopback default
        assert sync.backend == "gloo" and sync.rendezvous.split(":")[0] == head_ip == ray.util.get_node_ip_address()
        assert result["global_step"] == 2
        assert all(h["async/staleness"] in (0.0, 1.0) for h in result["history"])  # one-step-off ran
        _assert_same_weights(client.weight_sums(), _policy_sums(trainer))
        _greedy_logprobs_match_the_policy(trainer, client, tiny_chat_model)

        # one more sync, timed: policy rank 0 on the head to the actor on node2
        start = time.perf_counter()
        sync.sync()
        seconds = time.perf_counter() - start
        with capsys.disabled():
            print(f"\n[engine actors] sync to node2: {sync.bytes_last / 2**20:.2f} MiB in {seconds * 1000:.0f} ms")
    (log,) = (tmp_path / "logs").rglob("metrics.jsonl")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    rewards = [row["reward/mean"] for row in rows if "reward/mean" in row]
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)


@pytest.mark.slow
@pytest.mark.timeout(150)  # the bug this guards against: rank 0 waiting out the broadcast group's 300 s timeout
@pytest.mark.parametrize("stage", ["joining the weight broadcast", "receiving the weights"])
def test_an_engine_actor_that_dies_stops_the_weight_sync_with_its_name(tiny_chat_model, toy_data, tmp_path,
                                                                       ray_cluster, stage):
    import ray

    from skygym_train.trainer import PPOTrainer

    cfg = _config(tiny_chat_model, toy_data, tmp_path)
    with PPOTrainer(cfg) as trainer:  # leaving the block must not wait on the stopped workers either
        trainer.setup()
        if stage == "receiving the weights":
            trainer.sync_weights()  # joined the group and received once
        client = trainer.engine.engines[0]
        ray.kill(client.actor)
        with pytest.raises(RuntimeError, match=rf"engine actor 0 \(node [0-9a-f]+\) failed while {stage}") as info:
            trainer.sync_weights()
        assert "the policy workers were stopped" in str(info.value)
