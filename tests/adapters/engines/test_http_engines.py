"""The SGLang and OpenAI-compatible clients against real local HTTP servers backed by a real (tiny) model.

SGLang cannot run on this CPU machine, so its client is tested against ``http_test_servers``, which speaks
SGLang's native API; the OpenAI client is tested against real ``vllm serve`` in ``test_vllm.py`` and here
against a text-only server for its fallbacks.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

import pytest

from skygym_adapters.engines import EngineError
from skygym_adapters.engines.hf import HFEngine
from skygym_adapters.engines.remote import RemoteEngine
from skygym_adapters.engines.sglang import SGLangEngine
from skygym_adapters.rollout import RolloutConfig, RolloutGenerator
from tests.adapters.conftest import assert_no_template_drift
from tests.adapters.http_test_servers import make_app, make_canned_openai_app, serve
from tests.adapters.support import user


SEEDED = {"max_generate_length": 6, "temperature": 1.0, "seed": 9}
GREEDY = {"max_generate_length": 6, "temperature": 0.0}


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[Any]:
    backend = HFEngine(str(tiny_model_dir), device="cpu")
    app = make_app(backend, str(tiny_model_dir))
    with serve(app) as url:
        yield url, backend, app.state.sglang
    backend.close()


def prompt(tokenizer: Any, text: str) -> list:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)


async def test_sglang_generate_returns_the_models_ids_and_logprobs(server: Any, tokenizer: Any) -> None:
    url, backend, _ = server
    engine = SGLangEngine(url, tokenizer)
    try:
        prompts = [prompt(tokenizer, "one"), prompt(tokenizer, "two two")]
        out = await engine.generate(prompts, {**SEEDED, "logprobs": True})
        direct = await backend.generate(prompts, {**SEEDED, "logprobs": True})
        assert out["response_ids"] == direct["response_ids"]
        for got, want in zip(out["response_logprobs"], direct["response_logprobs"]):
            assert got == pytest.approx(want)
        assert out["stop_reasons"] == ["length", "length"]
        assert out["responses"][0] == tokenizer.decode(out["response_ids"][0], skip_special_tokens=True)
    finally:
        await engine.aclose()


async def test_sglang_weight_update_and_memory_release(server: Any, tokenizer: Any, tiny_model_dir: Path,
                                                       tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    url, _, state = server
    engine = SGLangEngine(url, tokenizer, weights_dir=str(tmp_path / "w"))
    try:
        p = prompt(tokenizer, "weights")
        before = (await engine.generate([p], GREEDY))["response_ids"][0]
        torch.manual_seed(1)
        original = load_file(str(tiny_model_dir / "model.safetensors"))
        scrambled = {k: torch.randn_like(v) for k, v in original.items() if ".layers." in k and v.dim() == 2}
        await engine.update_weights(scrambled)  # saved as a checkpoint folder, loaded with update_weights_from_disk
        assert state["model_path"] == str(tmp_path / "w") and (tmp_path / "w" / "config.json").is_file()
        assert (await engine.generate([p], GREEDY))["response_ids"][0] != before
        await engine.update_weights(str(tiny_model_dir))
        assert (await engine.generate([p], GREEDY))["response_ids"][0] == before
        with pytest.raises(EngineError, match="success|refused|HTTP"):
            await engine.update_weights(str(tmp_path / "missing"))
        await engine.sleep()
        with pytest.raises(EngineError, match="memory released"):
            await engine.generate([p], GREEDY)
        await engine.wake_up()
        assert (await engine.generate([p], GREEDY))["response_ids"][0] == before
    finally:
        await engine.aclose()


async def test_rollout_through_the_sglang_client(server: Any, tokenizer: Any) -> None:
    url, _, _ = server
    engine = SGLangEngine(url, tokenizer)
    generator = RolloutGenerator(engine, tokenizer, RolloutConfig(
        max_turns=2, check_drift=True, sampling_params={**SEEDED, "logprobs": True}))
    try:
        trajectories = await generator.run([user("a"), user("b")], ["test_countdown_turns"] * 2, [{"turns": 2}] * 2)
    finally:
        generator.close()
        await engine.aclose()
    assert_no_template_drift(trajectories, generator.chat)
    assert all(t.num_turns == 2 and len(t.response_logprobs()) == len(t.response_ids()) for t in trajectories)


async def test_remote_engine_falls_back_to_text_with_a_warning(server: Any, tokenizer: Any,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    url, _, _ = server
    engine = RemoteEngine(url + "/v1", tokenizer)
    try:
        with caplog.at_level(logging.WARNING, logger="skygym_adapters.engines.remote"):
            out = await engine.generate([prompt(tokenizer, "text please")], {**SEEDED, "stop": ["."]})
        assert engine.model == "text-only"
        assert engine._prompt_as_text  # the server refused the token-id prompt
        messages = " ".join(r.getMessage() for r in caplog.records)
        assert "refuses token-id prompts" in messages and "returned no token ids" in messages
        text = out["responses"][0]
        ids = out["response_ids"][0]
        expected = tokenizer.encode(text, add_special_tokens=False)
        assert ids[: len(expected)] == expected  # re-tokenized text (plus EOS when the model stopped on it)
    finally:
        await engine.aclose()


@pytest.fixture(scope="module")
def canned() -> Iterator[Any]:
    state: dict = {}
    with serve(make_canned_openai_app(state)) as url:
        yield url, state


CHAT_FORMAT = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "6"}, "finish_reason": "stop"}]}


@pytest.mark.parametrize(("api", "answer", "error"), [
    # a chat-format answer to /v1/completions was read as an empty reply, scored 0 and counted as no error
    ("completions", CHAT_FORMAT, r"choices\[0\]\.text is missing; the reply is in chat format .*--api chat"),
    ("completions", {"choices": [{"text": None, "finish_reason": "stop"}]}, r"choices\[0\]\.text is NoneType$"),
    ("completions", {"choices": [{"text": ["6"]}]}, r"choices\[0\]\.text is list$"),
    ("completions", {"choices": []}, r"without choices\[0\]"),
    ("completions", {"choices": "6"}, r"without choices\[0\]"),
    ("completions", ["not", "an", "object"], r"without choices\[0\]"),
    ("completions", "plain text", r"without choices\[0\]"),
    ("completions", {"choices": [{"text": "6", "token_ids": ["x"]}]}, r"token_ids that are not a list of token ids"),
    ("completions", {"choices": [{"text": "6", "token_ids": [-1]}]}, r"token_ids that are not a list of token ids"),
    ("completions", {"choices": [{"text": "6", "token_ids": 7}]}, r"token_ids that are not a list of token ids"),
    ("completions", {"choices": [{"text": "6", "token_ids": [2**40]}]}, r"token_ids that are not a list of token ids"),
    ("completions", {"choices": [{"text": "6", "token_ids": [True]}]}, r"token_ids that are not a list of token ids"),
    ("chat", {"choices": [{"message": {"role": "assistant", "content": None}}]},
     r"choices\[0\]\.message\.content is NoneType$"),
    ("chat", {"choices": [{"message": {"role": "assistant"}}]}, r"choices\[0\]\.message\.content is missing$"),
    ("chat", {"choices": [{"message": "6"}]}, r"choices\[0\]\.message is str$"),
    ("chat", {"choices": [{"text": "6"}]}, r"choices\[0\]\.message is NoneType$"),
])
async def test_remote_engine_refuses_an_answer_that_is_not_a_reply(canned: Any, tokenizer: Any, api: str,
                                                                  answer: Any, error: str) -> None:
    """A broken or hostile server's answer is an EngineError naming the field, never a silent empty reply or a
    KeyError/TypeError traceback."""
    url, state = canned
    state["answer"] = answer
    engine = RemoteEngine(url, tokenizer, api=api)
    messages = [[{"role": "user", "content": "2*3?"}]] if api == "chat" else None
    try:
        with pytest.raises(EngineError, match=error) as caught:
            await engine.generate([prompt(tokenizer, "2*3?")], {**GREEDY, "logprobs": True}, messages=messages)
        assert str(caught.value).startswith(f"{url}/v1/")  # names the server that answered so
    finally:
        await engine.aclose()


async def test_a_chat_only_server_is_named_as_such(canned: Any, tokenizer: Any) -> None:
    """A cold run: a 404 from /v1/completions said only the status, not that --api chat was the way."""
    url, state = canned
    state.update(chat_only=True, answer=CHAT_FORMAT)
    engine = RemoteEngine(url, tokenizer)
    try:
        with pytest.raises(EngineError, match=r"HTTP 404.*no completions API: .*skyrl-gym eval --api chat"):
            await engine.generate([prompt(tokenizer, "2*3?")], GREEDY)
    finally:
        state.pop("chat_only")
        await engine.aclose()


async def test_a_model_the_server_does_not_serve_is_named_as_such(canned: Any, tokenizer: Any) -> None:
    """A cold run: vLLM's 404 for an unknown model name got the hint for a server without a completions API."""
    url, state = canned
    state["answer"] = {"status": 404, "body": {"object": "error", "message": "The model `gpt-4o` does not exist."}}
    engine = RemoteEngine(url, tokenizer, model="gpt-4o")
    try:
        with pytest.raises(EngineError, match=r"HTTP 404.*serves no model named 'gpt-4o': its names are at "
                                              r".*/v1/models \(skyrl-gym eval --served-model NAME\)$"):
            await engine.generate([prompt(tokenizer, "2*3?")], GREEDY)
    finally:
        state.pop("answer")
        await engine.aclose()


async def test_remote_engine_reads_an_empty_text_as_an_empty_reply_and_bad_logprobs_as_none(
        canned: Any, tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    url, state = canned
    engine = RemoteEngine(url, tokenizer)
    try:
        state["answer"] = {"choices": [{"text": "", "finish_reason": "length", "token_ids": []}]}
        out = await engine.generate([prompt(tokenizer, "say nothing")], GREEDY)
        assert out["responses"] == [""] and out["response_ids"] == [[]] and out["stop_reasons"] == ["length"]
        state["answer"] = {"choices": [{"text": "6", "token_ids": [21], "logprobs": {"token_logprobs": ["x"]}}]}
        with caplog.at_level(logging.WARNING, logger="skygym_adapters.engines.remote"):
            out = await engine.generate([prompt(tokenizer, "2*3?")], {**GREEDY, "logprobs": True})
        assert out["response_ids"] == [[21]] and out["response_logprobs"] == [[0.0]]
        assert "no usable logprobs" in caplog.text
        state["answer"] = {"choices": [{"text": "6", "token_ids": [21], "logprobs": "junk"}]}
        out = await engine.generate([prompt(tokenizer, "2*3?")], {**GREEDY, "logprobs": True})
        assert out["response_logprobs"] == [[0.0]]
    finally:
        await engine.aclose()


async def test_remote_engine_refuses_a_model_list_without_a_model_name(canned: Any, tokenizer: Any) -> None:
    url, state = canned
    state["models"] = {"data": [{"id": 5}]}
    engine = RemoteEngine(url, tokenizer)
    try:
        with pytest.raises(EngineError, match=r"/v1/models for the model name \(ValueError: data\[0\]\.id is 5"):
            await engine.generate([[1, 2]], GREEDY)
    finally:
        state.pop("models")
        await engine.aclose()


async def test_remote_engine_reports_unreachable_servers_clearly(tokenizer: Any) -> None:
    engine = RemoteEngine("http://127.0.0.1:9", tokenizer, model="m")
    with pytest.raises(EngineError, match="127.0.0.1:9/v1/completions failed.*check that an OpenAI-compatible "
                       "server is running at http://127.0.0.1:9"):
        await engine.generate([[1, 2, 3]], GREEDY)
    await engine.aclose()
    sglang = SGLangEngine("http://127.0.0.1:9", tokenizer)
    with pytest.raises(EngineError, match="127.0.0.1:9/generate failed.*check that an SGLang server"):
        await sglang.generate([[1, 2, 3]], GREEDY)
    await sglang.aclose()
    with pytest.raises(ValueError, match="needs the conversation"):
        await RemoteEngine("http://127.0.0.1:9", tokenizer, model="m", api="chat").generate([[1]], GREEDY)


async def test_one_prompt_the_server_refuses_does_not_turn_every_later_prompt_into_text(canned: Any,
                                                                                      tokenizer: Any) -> None:
    """A 400 for a token-id prompt once switched the engine to text prompts for good, though the server refused
    that one prompt (too long) whatever its form: every later prompt was re-tokenized by the server while the
    recorded ids stayed the client's. Now the engine first asks whether the server takes a one-token id prompt;
    it does, so the error is this prompt's, and the engine keeps sending ids."""
    url, state = canned
    too_long = {"status": 400, "body": {"detail": "This model's maximum context length is 32 tokens"}}
    reply = {"choices": [{"text": "6", "token_ids": [21], "finish_reason": "stop"}]}
    state.update(answers=[too_long, reply, reply], prompts=[])
    engine = RemoteEngine(url, tokenizer)
    try:
        long_prompt = prompt(tokenizer, "a long one " * 20)
        with pytest.raises(EngineError, match="HTTP 400.*maximum context length"):
            await engine.generate([long_prompt], GREEDY)
        assert state["prompts"] == [long_prompt, long_prompt[:1]]  # the prompt, then the one-token question
        out = await engine.generate([prompt(tokenizer, "2*3?")], GREEDY)
        assert out["response_ids"] == [[21]] and not engine._prompt_as_text
        assert isinstance(state["prompts"][-1], list)  # the next prompt went as ids
    finally:
        state.pop("answers", None)
        await engine.aclose()
