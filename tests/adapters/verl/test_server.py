"""EngineServerManager: veRL's server-manager call answered by one of this project's engines."""

from __future__ import annotations

import asyncio

import pytest

from skygym_adapters.verl.server import EngineServerManager, verl_to_engine_sampling


def test_verl_sampling_params_become_engine_sampling_params():
    params = verl_to_engine_sampling(
        {"temperature": 0.7, "top_p": 0.9, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True, "max_tokens": 12},
        default_max_tokens=256,
    )
    assert params == {"max_generate_length": 12, "temperature": 0.7, "top_p": 0.9, "logprobs": True}
    assert verl_to_engine_sampling({"top_k": 5}, default_max_tokens=64) == {"max_generate_length": 64, "top_k": 5}


@pytest.mark.verl
def test_generate_returns_verl_token_output(tokenizer):
    pytest.importorskip("verl", reason="needs the 'verl' extra, in a venv of its own: nox -s verl")
    from verl.workers.rollout.replica import TokenOutput

    from skygym_adapters.scripted import ScriptedEngine

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "say hi"}], add_generation_prompt=True, tokenize=False)
    server = EngineServerManager(ScriptedEngine(tokenizer, {"say hi": ["hi there"]}))
    output = asyncio.run(
        server.generate("r1", prompt_ids=tokenizer.encode(prompt), sampling_params={"logprobs": True, "max_tokens": 50})
    )
    assert isinstance(output, TokenOutput) and output.stop_reason == "completed"
    assert tokenizer.decode(output.token_ids, skip_special_tokens=True) == "hi there"
    assert output.log_probs == [0.0] * len(output.token_ids)
    with pytest.raises(ValueError, match="text models only"):
        asyncio.run(server.generate("r2", prompt_ids=[1], sampling_params={}, image_data=["img"]))
