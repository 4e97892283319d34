"""HFEngine on a tiny random Qwen2 with the real SmolLM2 tokenizer: batching, stops, logprobs, weights."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from skygym_adapters.engines import EngineClient, EngineError
from skygym_adapters.engines.base import resolve_sampling
from skygym_adapters.engines.hf import COMPILED_SHAPES_LIMIT, HFEngine
from skygym_adapters.engines.hf_sampling import draw_uniforms, sample_tokens



GREEDY = {"max_generate_length": 8, "temperature": 0.0}
# The tiny random model's greedy output is mostly one repeated token; seeded sampling gives varied,
# reproducible sequences (each row has its own generator, so batching does not change them).
SEEDED = {"max_generate_length": 8, "temperature": 1.0, "seed": 7}


def prompt(tokenizer: Any, text: str) -> list:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)


async def test_batched_generation_matches_one_by_one(tokenizer: Any, tiny_engine: HFEngine) -> None:
    prompts = [prompt(tokenizer, "short"), prompt(tokenizer, "a much longer prompt with more tokens in it")]
    together = await tiny_engine.generate(prompts, SEEDED)
    alone = [await tiny_engine.generate([p], SEEDED) for p in prompts]
    assert len(set(together["response_ids"][0])) > 1
    assert together["response_ids"] == [a["response_ids"][0] for a in alone]  # left padding does not leak
    assert together["stop_reasons"] == ["length", "length"]
    assert all(len(ids) == 8 for ids in together["response_ids"])
    assert together["responses"][0] == tokenizer.decode(together["response_ids"][0], skip_special_tokens=True)


async def test_concurrent_requests_share_batches(tokenizer: Any, tiny_engine: HFEngine) -> None:
    before = dict(tiny_engine.stats)
    p = prompt(tokenizer, "hi")
    outputs = await asyncio.gather(*(tiny_engine.generate([p], GREEDY) for _ in range(8)))
    assert len({tuple(o["response_ids"][0]) for o in outputs}) == 1
    assert tiny_engine.stats["sequences"] - before["sequences"] == 8
    assert tiny_engine.stats["batches"] - before["batches"] < 8


async def test_logprobs_are_those_of_the_sampled_tokens(tokenizer: Any, tiny_engine: HFEngine) -> None:
    import torch

    p = prompt(tokenizer, "logprobs please")
    out = await tiny_engine.generate([p], {"max_generate_length": 6, "temperature": 0.7, "logprobs": True, "seed": 3})
    ids, logprobs = out["response_ids"][0], out["response_logprobs"][0]
    assert len(ids) == len(logprobs) == 6
    with torch.no_grad():
        logits = tiny_engine.model(torch.tensor([p + ids])).logits[0, len(p) - 1 : -1].float() / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
    assert torch.allclose(expected, torch.tensor(logprobs), atol=1e-3)


async def test_seeded_sampling_is_reproducible(tokenizer: Any, tiny_engine: HFEngine) -> None:
    p = prompt(tokenizer, "sample")
    params = {"max_generate_length": 8, "temperature": 1.0, "seed": 11}
    first, second = await tiny_engine.generate([p], params), await tiny_engine.generate([p], params)
    other = await tiny_engine.generate([p], {**params, "seed": 12})
    assert first["response_ids"] == second["response_ids"]
    assert other["response_ids"] != first["response_ids"]


async def test_stop_strings_and_stop_tokens(tokenizer: Any, tiny_engine: HFEngine) -> None:
    p = prompt(tokenizer, "stop test")
    seeded = {"max_generate_length": 8, "temperature": 1.0, "seed": 5}  # varied tokens, reproducible
    free = (await tiny_engine.generate([p], seeded))["response_ids"][0]
    # Stop on the text of a later token that did not occur before: generation ends right there, reason "stop".
    k, stop_text = next(
        (k, tokenizer.decode(free[k : k + 1]).strip())
        for k in range(1, len(free))
        if tokenizer.decode(free[k : k + 1]).strip()
        and tokenizer.decode(free[k : k + 1]).strip() not in tokenizer.decode(free[:k])
    )
    stopped = await tiny_engine.generate([p], {**seeded, "stop": [stop_text]})
    ids = stopped["response_ids"][0]
    assert stopped["stop_reasons"] == ["stop"] and ids == free[: len(ids)] and len(ids) <= k + 1
    assert stop_text in tokenizer.decode(ids)
    by_token = await tiny_engine.generate([p], {**seeded, "stop_token_ids": [free[1]]})
    assert by_token["response_ids"][0] == free[: free.index(free[1]) + 1] and by_token["stop_reasons"] == ["stop"]


async def test_bad_requests_name_the_problem(tiny_engine: HFEngine) -> None:
    with pytest.raises(ValueError, match=r"prompt_token_ids\[1\]"):
        await tiny_engine.generate([[1, 2], []], GREEDY)
    with pytest.raises(ValueError, match="max_new_tokenz"):
        await tiny_engine.generate([[1, 2]], {"max_new_tokenz": 3})
    with pytest.raises(ValueError, match="temperature"):
        await tiny_engine.generate([[1, 2]], {"temperature": -1})


async def test_update_weights_changes_the_next_generation(tokenizer: Any, tiny_model_dir: Any) -> None:
    import torch

    engine = HFEngine(str(tiny_model_dir), device="cpu")
    try:
        p = prompt(tokenizer, "weights")
        before = (await engine.generate([p], GREEDY))["response_ids"][0]
        state = {k: v.clone() for k, v in engine.model.state_dict().items()}
        torch.manual_seed(1)
        # Large random layer weights: the tiny model no longer just echoes its last input token.
        new_weights = {k: torch.randn_like(v) for k, v in state.items() if ".layers." in k and v.dim() == 2}
        await engine.update_weights(new_weights)
        after = (await engine.generate([p], GREEDY))["response_ids"][0]
        assert after != before and engine.weight_version == 1
        await engine.update_weights(state)  # and back
        assert (await engine.generate([p], GREEDY))["response_ids"][0] == before
        with pytest.raises(KeyError, match="no_such.weight"):
            await engine.update_weights({"no_such.weight": torch.zeros(1)})
        await engine.sleep()
        with pytest.raises(EngineError, match="asleep"):
            await engine.generate([p], GREEDY)
        await engine.wake_up()
        assert (await engine.generate([p], GREEDY))["response_ids"][0] == before
    finally:
        engine.close()


async def test_client_spreads_trajectories_and_keeps_each_on_one_engine(tokenizer: Any, tiny_model_dir: Any) -> None:
    engines = [HFEngine(str(tiny_model_dir), device="cpu") for _ in range(2)]
    client = EngineClient(engines)
    try:
        p = prompt(tokenizer, "route me")
        sessions = [f"traj{i}" for i in range(6)]
        first = await client.generate([p] * 6, SEEDED, session_ids=sessions)
        pinned = {s: client.engine_for(s) for s in sessions}
        assert set(pinned.values()) == {0, 1}  # both engines got trajectories
        second = await client.generate([p] * 6, SEEDED, session_ids=sessions)
        assert {s: client.engine_for(s) for s in sessions} == pinned  # affinity holds across turns
        assert first["response_ids"] == second["response_ids"]  # same weights and seeds: same outputs, in order
        assert all(e.stats["sequences"] == 6 for e in engines)
        client.finish_session("traj0")
        assert "traj0" not in client._affinity
    finally:
        client.close()


def test_sampling_draws_from_the_filtered_distribution() -> None:
    import math

    import torch

    from skygym_adapters.engines.base import resolve_sampling

    logits = torch.tensor([[0.0, math.log(2.0), math.log(5.0), -50.0]]).repeat(4000, 1)  # p = 1/8, 2/8, 5/8, ~0
    uniforms = draw_uniforms(list(range(4000)), 1, logits.device)[:, 0]
    tokens, logprobs = sample_tokens(logits, resolve_sampling({"temperature": 1.0}), uniforms)
    shares = torch.bincount(tokens, minlength=4).float() / 4000
    assert torch.allclose(shares, torch.tensor([1 / 8, 2 / 8, 5 / 8, 0.0]), atol=0.03), shares
    assert torch.allclose(logprobs[tokens == 2], torch.tensor(math.log(5 / 8)), atol=1e-5)
    # top_k=1 and a tiny top_p both reduce to the most likely token; its logprob stays the unfiltered one.
    for params in ({"temperature": 1.0, "top_k": 1}, {"temperature": 1.0, "top_p": 0.01}):
        tokens, logprobs = sample_tokens(logits[:50], resolve_sampling(params), draw_uniforms([None] * 50, 1, "cpu")[:, 0])
        assert tokens.tolist() == [2] * 50
        assert torch.allclose(logprobs, torch.tensor(math.log(5 / 8)), atol=1e-5)


async def test_rows_that_finish_early_leave_the_batch_without_disturbing_the_others(tokenizer: Any,
                                                                                     tiny_engine: HFEngine) -> None:
    short_prompt, long_prompt = prompt(tokenizer, "stop early"), prompt(tokenizer, "keep going for a while please")
    free = (await tiny_engine.generate([short_prompt], SEEDED))["response_ids"][0]
    params = {**SEEDED, "stop_token_ids": [free[1]]}  # the first row stops at its second token at the latest
    together = await tiny_engine.generate([short_prompt, long_prompt, short_prompt], params)
    alone = [(await tiny_engine.generate([p], params))["response_ids"][0] for p in (short_prompt, long_prompt)]
    assert len(together["response_ids"][0]) <= 2 and together["stop_reasons"][0] == "stop"
    assert len(together["response_ids"][1]) > len(together["response_ids"][0])  # the batch really shrank
    assert together["response_ids"] == [alone[0], alone[1], alone[0]]


async def test_how_often_the_host_looks_does_not_change_the_results(tokenizer: Any, tiny_model_dir: Any) -> None:
    """The GPU default looks every 16 steps: rows that ended in between are cut where they ended, as when the host
    looks every step (the CPU default)."""
    prompts = [prompt(tokenizer, "short"), prompt(tokenizer, "a longer prompt, with more tokens in it"), prompt(tokenizer, "x")]
    every_step = HFEngine(str(tiny_model_dir), device="cpu", sync_interval=1)
    every_five = HFEngine(str(tiny_model_dir), device="cpu", sync_interval=5)
    params = {"max_generate_length": 12, "temperature": 0.9, "top_p": 0.95, "top_k": 50, "min_p": 0.01,
              "logprobs": True}
    try:
        free = [every_step.submit(p, resolve_sampling({**params, "seed": seed})).result(timeout=120).token_ids
                for p, seed in zip(prompts, (1, 2, 3))]
        # Row 0 ends at a stop token, row 1 at a stop string (both inside a window of five), row 2 runs to the end
        # unless one of them occurs there too.
        stop_text = next(t for t in (tokenizer.decode(free[1][k : k + 1]).strip() for k in range(6, 12)) if t)
        params = {**params, "stop": [stop_text], "stop_token_ids": [free[0][3]]}
        seeded = [{**params, "seed": seed} for seed in (1, 2, 3)]
        outputs = []
        for engine in (every_step, every_five):
            futures = [engine.submit(p, resolve_sampling(s)) for p, s in zip(prompts, seeded)]
            outputs.append([f.result(timeout=120) for f in futures])
        assert any(r.stop_reason == "stop" for r in outputs[0]) and any(len(r.token_ids) > 1 for r in outputs[0])
        assert [(r.token_ids, r.stop_reason) for r in outputs[0]] == [(r.token_ids, r.stop_reason) for r in outputs[1]]
        # Log-probs agree to rounding (the batch shrinks at other steps, and a matmul's blocking with it).
        for a, b in zip(outputs[0], outputs[1]):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    finally:
        every_step.close()
        every_five.close()


async def test_announced_sessions_decode_as_one_batch(tokenizer: Any, tiny_model_dir: Any) -> None:
    """Requests that arrive far apart (slow env set-up) still decode together when the caller said how many come;
    a session that ends without a request (its env failed) stops being waited for."""
    engine = HFEngine(str(tiny_model_dir), device="cpu", batch_wait_s=0.0, max_batch_wait_s=0.0, max_expect_wait_s=600)
    try:
        p = prompt(tokenizer, "together")
        engine.expect_sessions(4)

        async def late(delay: float) -> Any:
            await asyncio.sleep(delay)
            return await engine.generate([p], GREEDY)

        async def fails_before_its_request() -> None:
            await asyncio.sleep(0.2)
            engine.finish_session("env-failed")

        outputs = await asyncio.wait_for(asyncio.gather(late(0.0), late(0.3), late(0.6), fails_before_its_request()),
                                         timeout=300)
        assert engine.stats["batches"] == 1 and engine.stats["sequences"] == 3
        assert len({tuple(o["response_ids"][0]) for o in outputs[:3]}) == 1
        for _ in range(3):
            engine.finish_session("done")
        # nothing announced: the (zero) time window splits them. The second comes once the first's batch has begun
        # (0.3 s apart could pass before the engine's thread ran, on a loaded machine)
        first = asyncio.ensure_future(late(0.0))

        async def first_batch_begun() -> None:
            while engine.stats["batches"] == 1:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(first_batch_begun(), timeout=120)
        await asyncio.gather(first, late(0.0))
        assert engine.stats["batches"] == 3
        with pytest.raises(ValueError, match="count"):
            engine.expect_sessions(-1)
    finally:
        engine.close()


async def test_unseeded_sessions_sample_the_same_whatever_order_they_arrive_in(tokenizer: Any,
                                                                               tiny_model_dir: Any) -> None:
    """A trainer's trajectories reach the engine in the order their env calls end, which varies between runs; an
    unseeded row draws the global generator's next numbers, so rows go in session order: a rerun with the same
    global seed samples each trajectory as before (the flaky resume comparison). Rows without a session keep their
    arrival order, and then the order decides who gets which numbers (the control)."""
    import torch

    engine = HFEngine(str(tiny_model_dir), device="cpu", batch_wait_s=0.0, max_batch_wait_s=0.0, max_expect_wait_s=600)
    sampled = {"max_generate_length": 8, "temperature": 1.0}
    prompts = {f"traj_{i}": prompt(tokenizer, f"question {i}") for i in range(4)}

    async def run(order: list, sessions: bool) -> dict:
        torch.manual_seed(0)
        engine.expect_sessions(len(order))

        async def one(name: str, delay: float) -> Any:
            await asyncio.sleep(delay)
            return await engine.generate([prompts[name]], sampled, session_ids=[name] if sessions else None)

        outputs = await asyncio.gather(*(one(name, 0.05 * i) for i, name in enumerate(order)))
        for name in order:
            engine.finish_session(name)
        return {name: out["response_ids"][0] for name, out in zip(order, outputs)}

    try:
        names = sorted(prompts)
        before = engine.stats["batches"]
        forward, backward = await run(names, True), await run(names[::-1], True)
        assert engine.stats["batches"] - before == 2  # each run one batch: only the order of arrival differed
        assert forward == backward
        assert len({tuple(ids) for ids in forward.values()}) > 1
        forward, backward = await run(names, False), await run(names[::-1], False)
        assert forward != backward
    finally:
        engine.close()


async def test_rows_are_handed_out_as_they_end_and_progress_adds_up(tokenizer: Any, tiny_engine: HFEngine) -> None:
    short_prompt, long_prompt = prompt(tokenizer, "stop early"), prompt(tokenizer, "keep going for a while please")
    free = (await tiny_engine.generate([short_prompt], SEEDED))["response_ids"][0]
    sampling = resolve_sampling({**SEEDED, "stop_token_ids": [free[1]]})
    order: list = []
    settled: list = []
    tiny_engine.on_progress = lambda positions, rows: settled.append((positions, rows))
    try:
        futures = [tiny_engine.submit(p, sampling) for p in (long_prompt, short_prompt)]
        for name, future in zip(("long", "short"), futures):
            future.add_done_callback(lambda _, name=name: order.append(name))
        results = [f.result(timeout=120) for f in futures]
    finally:
        tiny_engine.on_progress = None
    assert len(results[1].token_ids) <= 2 < len(results[0].token_ids)
    assert order == ["short", "long"]  # the short row did not wait for the batch to end
    assert sum(p for p, _ in settled) == 2 * SEEDED["max_generate_length"] and len(settled) > 1
    assert sum(r for _, r in settled) == 2 and settled[-1][1] == 1  # the long row ended last, on its own


def test_stop_strings_stop_where_a_per_token_check_would(tokenizer: Any) -> None:
    import random

    from skygym_adapters.engines.hf_stops import StopStrings

    rng = random.Random(0)
    text_ids = tokenizer.encode("The answer is 42.\n\nSo #### 42 </answer> done. Ünïcödé ✓ 東京 ok")
    for stops in (("####",), ("</answer>", "ok"), ("\n\n",), ("✓",), ("京",)):
        matcher = StopStrings(tokenizer, stops, len(tokenizer))
        for _ in range(20):
            ids = [rng.choice(text_ids) for _ in range(30)] if rng.random() < 0.5 else list(text_ids)
            lookback = max(len(s) for s in stops) + 8
            expected = next((j for j in range(len(ids))
                             if any(s in tokenizer.decode(ids[max(0, j + 1 - lookback) : j + 1]) for s in stops)), None)
            assert matcher.first_stop(ids, 0) == expected, (stops, ids)
            if expected is not None:  # a window that starts later finds the same stop, one that ends before it none
                assert matcher.first_stop(ids, expected) == expected and matcher.first_stop(ids, 0, expected) is None
    assert StopStrings(tokenizer, ("####",), len(tokenizer)).candidates is not None  # most tokens are never decoded
    assert len(StopStrings(tokenizer, ("####",), len(tokenizer)).candidates) < len(tokenizer) // 10


async def test_static_and_growing_kv_caches_decode_the_same(tokenizer: Any, tiny_model_dir: Any) -> None:
    """The static cache (the default with transformers 5: no copy of the cache per token; compiled on CUDA) gives what
    the growing one gives, with rows of different lengths that end early and leave the batch."""
    prompts = [prompt(tokenizer, "short"), prompt(tokenizer, "a longer prompt, with more tokens in it"), prompt(tokenizer, "x")]
    engines = {mode: HFEngine(str(tiny_model_dir), device="cpu", decode_mode=mode) for mode in ("static", "dynamic")}
    try:
        free = (await engines["dynamic"].generate(prompts[:1], {**SEEDED, "max_generate_length": 12}))["response_ids"][0]
        params = {"max_generate_length": 12, "temperature": 1.0, "seed": 7, "logprobs": True, "stop_token_ids": [free[3]]}
        greedy = {"max_generate_length": 12, "temperature": 0.0, "logprobs": True}
        outputs = {mode: [await e.generate(prompts, params), await e.generate(prompts, greedy)]
                   for mode, e in engines.items()}
        assert outputs["static"][0]["stop_reasons"][0] == "stop" and len(outputs["static"][0]["response_ids"][0]) <= 4
        for static, dynamic in zip(outputs["static"], outputs["dynamic"]):
            assert static["response_ids"] == dynamic["response_ids"]
            assert static["stop_reasons"] == dynamic["stop_reasons"]
            for a, b in zip(static["response_logprobs"], dynamic["response_logprobs"]):
                assert a == pytest.approx(b, abs=1e-4)
        with pytest.raises(ValueError, match="decode_mode"):
            HFEngine(str(tiny_model_dir), device="cpu", decode_mode="fast")
    finally:
        for engine in engines.values():
            engine.close()


def chat(tokenizer: Any, messages: list) -> list:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)


@pytest.mark.parametrize("decode_mode", ["static", "dynamic"])
async def test_a_groups_prompt_and_the_batchs_common_prefix_are_computed_once(tokenizer: Any, tiny_model_dir: Any,
                                                                            decode_mode: str) -> None:
    """GRPO sends each prompt once per sample, and a batch's prompts often start alike (the system prompt, worked
    examples): the prefill computes each distinct prompt once, the common prefix once, and every row decodes what
    it decodes when each row's prompt goes through the model whole (prompts of different lengths, rows that stop
    early, one prompt that is the start of another)."""
    from skygym_adapters.engines.hf import plan_prefill

    examples = [{"role": "user", "content": "3 * 4"}, {"role": "assistant", "content": "\\boxed{12}"}]
    distinct = [chat(tokenizer, examples + [{"role": "user", "content": q}])
                for q in ("7 * 8", "what is 2 * 9? answer in a box, please", "5 * 5")]
    distinct.append(distinct[1][:-9])  # ends inside the longer question
    batch = [p for p in distinct for _ in range(4)]
    engines = {share: HFEngine(str(tiny_model_dir), device="cpu", decode_mode=decode_mode, share_prefill=share)
               for share in (True, False)}
    try:
        free = (await engines[False].generate(distinct[:1], {**SEEDED, "max_generate_length": 10}))["response_ids"][0]
        runs = ({**SEEDED, "max_generate_length": 10, "logprobs": True, "stop_token_ids": [free[4]]},
                {"max_generate_length": 10, "temperature": 0.0, "logprobs": True})
        before = {share: e.stats["prefill_tokens"] for share, e in engines.items()}
        head_positions: list = []  # the prefix's run keeps only its cache: no logits for its positions
        engines[True].model.get_output_embeddings().register_forward_hook(
            lambda module, args, out: head_positions.append(out.shape[-2]))
        outputs = {share: [] for share in engines}  # (a comprehension in a comprehension may not await on 3.10)
        for share, engine in engines.items():
            outputs[share] = [await engine.generate(batch, params) for params in runs]
        assert max(head_positions) == 1
        for shared, whole in zip(outputs[True], outputs[False]):
            assert shared["response_ids"] == whole["response_ids"] and shared["stop_reasons"] == whole["stop_reasons"]
            for a, b in zip(shared["response_logprobs"], whole["response_logprobs"]):
                assert a == pytest.approx(b, abs=1e-4)
        assert "stop" in outputs[True][0]["stop_reasons"] and len({tuple(i) for i in outputs[True][0]["response_ids"]}) > 1
        plan = plan_prefill(batch)
        assert len(plan.suffixes) == 4 and plan.rows == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
        assert len(plan.prefix) > 30 and batch[0][: len(plan.prefix)] == plan.prefix  # the template and the example
        computed = {share: e.stats["prefill_tokens"] - before[share] for share, e in engines.items()}
        assert computed[True] == 2 * (len(plan.prefix) + 4 * max(len(s) for s in plan.suffixes))
        assert computed[False] == 2 * len(batch) * max(len(p) for p in batch) > 8 * computed[True]
    finally:
        for engine in engines.values():
            engine.close()


@pytest.mark.parametrize("decode_mode", ["static", "dynamic"])
async def test_a_sessions_next_turn_computes_only_what_follows_its_kept_cache(tokenizer: Any, tiny_model_dir: Any,
                                                                            decode_mode: str) -> None:
    """A multi-turn trajectory sends its whole conversation every turn: the engine keeps each session's KV cache when
    its row ends and computes only the new part of the next prompt. Rows decode what they decode from the whole
    conversation, whether their last turn stopped early or ran to its budget, in a batch beside a new session's
    first turn and beside a session whose conversation was re-templated (only the tokens it still shares count)."""
    engines = {keep: HFEngine(str(tiny_model_dir), device="cpu", decode_mode=decode_mode,
                              session_cache_gib=None if keep else 0) for keep in (True, False)}
    first = [chat(tokenizer, [{"role": "user", "content": q}]) for q in ("7 * 8", "what is 2 * 9?", "5 * 5 = ?")]
    observation = tokenizer.encode("<|im_start|>user\nNot quite, try again<|im_end|>\n<|im_start|>assistant\n",
                                   add_special_tokens=False)
    sessions = ["a", "b", "c"]
    try:
        free = (await engines[False].generate(first[:1], {**SEEDED, "max_generate_length": 10}))["response_ids"][0]
        params = {**SEEDED, "max_generate_length": 10, "logprobs": True, "stop_token_ids": [free[3]]}
        outputs: dict = {}
        for keep, engine in engines.items():
            turn1 = await engine.generate(first, params, session_ids=sessions)
            second = [p + ids + observation for p, ids in zip(first, turn1["response_ids"])]
            cut = len(first[2]) + 2  # re-templated from its answer's third token on
            second[2] = second[2][:cut] + [second[2][cut] + 1] + second[2][cut + 1:]
            before = dict(engine.stats)
            turn2 = await engine.generate(second + [chat(tokenizer, [{"role": "user", "content": "3 + 3"}])],
                                          params, session_ids=sessions + ["d"])
            outputs[keep] = (turn1, turn2, {k: engine.stats[k] - before[k] for k in before}, second)
        (kept1, kept2, kept_stats, second), (whole1, whole2, whole_stats, _) = outputs[True], outputs[False]
        assert kept1["response_ids"] == whole1["response_ids"] and "stop" in kept1["stop_reasons"]
        assert "length" in kept1["stop_reasons"]
        assert kept2["response_ids"] == whole2["response_ids"] and kept2["stop_reasons"] == whole2["stop_reasons"]
        for a, b in zip(kept2["response_logprobs"], whole2["response_logprobs"]):
            assert a == pytest.approx(b, abs=1e-4)
        # each kept cache holds the prompt and the answer but its last token (sampled, never run through the model)
        reused = [len(p) + len(ids) - 1 for p, ids in zip(first[:2], kept1["response_ids"])] + [len(first[2]) + 2]
        assert kept_stats["resumed_tokens"] == sum(reused) and whole_stats["resumed_tokens"] == 0
        new_prompt = len(chat(tokenizer, [{"role": "user", "content": "3 + 3"}]))
        rests = [len(p) - n for p, n in zip(second, reused)] + [new_prompt]  # each row's part computed, padded
        assert kept_stats["prefill_tokens"] == 4 * max(rests) < whole_stats["prefill_tokens"]
        assert len(engines[True].sessions) == 4 and len(engines[False].sessions) == 0
    finally:
        for engine in engines.values():
            engine.close()


async def test_kept_caches_go_with_their_session_new_weights_and_the_budget(tokenizer: Any, tiny_model_dir: Any) -> None:
    engine = HFEngine(str(tiny_model_dir), device="cpu")
    prompts = [chat(tokenizer, [{"role": "user", "content": q}]) for q in ("first", "second", "third")]
    params = {"max_generate_length": 6, "temperature": 0.0}

    async def turn(sessions: list) -> list:
        out = await engine.generate(prompts[: len(sessions)], params, session_ids=sessions)
        return out["response_ids"]

    try:
        await turn(["a", "b", "c"])
        assert len(engine.sessions) == 3 and engine.sessions.nbytes > 0
        engine.finish_session("a")  # the trajectory ended
        assert len(engine.sessions) == 2
        await engine.update_weights(dict(engine.model.state_dict()))  # computed with the old weights: all go
        assert len(engine.sessions) == 0
        await turn(["a", "b"])
        engine.weight_version += 1  # a trainer that writes shared weights in place says so this way
        before = engine.stats["resumed_tokens"]
        await turn(["a", "b"])
        assert engine.stats["resumed_tokens"] == before  # the kept caches were not used with other weights
        one = engine.sessions.nbytes // 2
        engine.sessions.budget_bytes = one + one // 2  # room for one session's cache
        await turn(["a", "b"])
        assert len(engine.sessions) == 1 and engine.sessions.nbytes <= engine.sessions.budget_bytes
        await engine.sleep()
        assert len(engine.sessions) == 0
    finally:
        engine.close()


async def test_no_kept_cache_outlives_new_weights_sleep_or_a_cancelled_request(tokenizer: Any,
                                                                                tiny_model_dir: Any) -> None:
    """Found by a review: new weights bumped the version after letting the model lock go (a batch in that gap
    resumed caches of the old weights), a batch running through sleep() put its caches back, and a request whose
    caller gave up kept its cache after its session had finished."""
    engine = HFEngine(str(tiny_model_dir), device="cpu")
    prompt = chat(tokenizer, [{"role": "user", "content": "go on for a while"}])
    long = {"max_generate_length": 400, "temperature": 1.0, "seed": 1, "stop_token_ids": []}
    try:
        locked_at_clear = []
        clear = engine.sessions.clear
        engine.sessions.clear = lambda: (locked_at_clear.append(engine._model_lock.locked()), clear())
        await engine.update_weights(dict(engine.model.state_dict()))
        engine.share_weights(dict(engine.model.named_parameters()))
        assert locked_at_clear == [True, True]  # version and caches change before the next batch can start

        running = asyncio.ensure_future(engine.generate([prompt], long, session_ids=["asleep"]))
        while engine.stats["batches"] == 0:
            await asyncio.sleep(0.01)
        await engine.sleep()
        await running
        assert len(engine.sessions) == 0  # the batch ended after sleep(): nothing kept
        await engine.wake_up()
        await engine.generate([prompt], GREEDY, session_ids=["awake"])
        assert len(engine.sessions) == 1

        batches = engine.stats["batches"]
        cancelled = asyncio.ensure_future(engine.generate([prompt], long, session_ids=["gone"]))
        while engine.stats["batches"] == batches:
            await asyncio.sleep(0.01)
        cancelled.cancel()
        engine.finish_session("gone")  # the rollout loop's finally, while the row still decodes
        await engine.generate([prompt], GREEDY)  # runs once the cancelled row's batch has ended
        assert "gone" not in engine.sessions._entries
    finally:
        engine.close()


def test_a_kept_cache_serves_the_tokens_a_new_prompt_shares_with_it() -> None:
    import torch

    from skygym_adapters.engines.hf_sessions import KeptCache, SessionCaches

    def kept(tokens: list) -> KeptCache:
        return KeptCache(tokens, [(torch.zeros(2, len(tokens), 4), torch.zeros(2, len(tokens), 4))], 0)

    caches = SessionCaches(budget_bytes=10**6)
    caches.put("s", kept([1, 2, 3, 4]))
    assert caches.take("s", [1, 2, 3, 4, 5, 6], 0)[0] == 4 and len(caches) == 0  # taken: the turn keeps a new one
    caches.put("s", kept([1, 2, 3, 4]))
    assert caches.take("s", [1, 2, 3, 4], 0)[0] == 3  # the prompt's last token is computed: its logits start the turn
    caches.put("s", kept([1, 2, 3, 4]))
    assert caches.take("s", [1, 2, 9, 4, 5], 0)[0] == 2
    caches.put("s", kept([1, 2, 3, 4]))
    assert caches.take("s", [9, 2, 3], 0) is None and caches.take("s", [1, 2, 3], 0) is None  # taken, even unused
    caches.put("s", kept([1, 2, 3, 4]))
    assert caches.take("s", [1, 2, 3, 4, 5], weight_version=1) is None
    size = kept([1, 2]).nbytes
    small = SessionCaches(budget_bytes=2 * size)
    small.put("a", kept([1, 2]))
    small.put("b", kept([1, 2]))
    small.put("c", kept([1, 2]))  # the least recently kept goes
    assert small.take("a", [1, 2, 3], 0) is None and small.take("c", [1, 2, 3], 0) is not None
    small.put("huge", kept(list(range(10))))  # larger than the whole budget: not kept, nothing else lost
    assert len(small) == 1 and small.nbytes == size
    with pytest.raises(ValueError, match="budget_bytes"):
        SessionCaches(-1)


def test_the_session_cache_budget_comes_from_the_environment(monkeypatch: Any) -> None:
    from skygym_adapters.engines.hf_sessions import DEFAULT_BUDGET_GIB, default_budget_bytes

    monkeypatch.delenv("SKYRL_GYM_HF_SESSION_CACHE_GIB", raising=False)
    assert default_budget_bytes() == int(DEFAULT_BUDGET_GIB * 2**30)
    monkeypatch.setenv("SKYRL_GYM_HF_SESSION_CACHE_GIB", "0.5")
    assert default_budget_bytes() == 2**29
    monkeypatch.setenv("SKYRL_GYM_HF_SESSION_CACHE_GIB", "lots")
    with pytest.raises(ValueError, match="SKYRL_GYM_HF_SESSION_CACHE_GIB must be a number of GiB"):
        default_budget_bytes()
    with pytest.raises(ValueError, match="session_cache_gib must be >= 0"):
        HFEngine(object(), object(), session_cache_gib=-1)


def test_the_prefill_plan_shares_what_every_row_starts_with() -> None:
    from skygym_adapters.engines.hf import MIN_SHARED_PREFIX, PrefillPlan, plan_prefill

    long = list(range(100, 140))
    assert plan_prefill([long] * 3) == PrefillPlan(long[:-1], [long[-1:]], [0, 0, 0])  # its last position: the logits
    # the common prefix of every distinct prompt, up to the shortest one's last position
    assert plan_prefill([long, long[:20], long]) == PrefillPlan(long[:19], [long[19:], long[19:20]], [0, 1, 0])
    other = long[:MIN_SHARED_PREFIX - 1] + [7] * 30  # too short a prefix to be worth a forward pass of its own
    assert plan_prefill([long, other, long]) == PrefillPlan([], [long, other], [0, 1, 0])
    assert plan_prefill([long, other]) is None  # nothing to share: the batch as it is
    assert plan_prefill([[5], [6]]) is None and plan_prefill([[5], [5]]) == PrefillPlan([], [[5]], [0, 0])


async def test_a_sliding_window_model_runs_every_prompt_whole(tokenizer: Any, tmp_path: Any) -> None:
    """A sliding window counts cache slots, and a shared prefill puts padding between a row's prefix and the rest:
    such a model's rows are computed as the batch has them."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True, sliding_window=16,
                         max_window_layers=0)
    assert "sliding_attention" in config.layer_types
    engine = HFEngine(AutoModelForCausalLM.from_config(config), tokenizer, device="cpu")
    try:
        batch = [prompt(tokenizer, "the same question")] * 3
        await engine.generate(batch, GREEDY)
        assert engine.stats["prefill_tokens"] == 3 * len(batch[0])
    finally:
        engine.close()


def test_static_caches_come_in_few_lengths_with_little_slack() -> None:
    """A compiled decode step compiles once per cache length and reads the whole cache every step."""
    from skygym_adapters.engines.hf import cache_length

    assert [cache_length(n) for n in (1, 128, 129, 592, 1024, 1025, 5000)] == [128, 128, 256, 640, 1024, 1280, 5120]
    lengths = [cache_length(n) for n in range(1, 8193)]
    assert all(n <= length < max(n + 128, n * 1.25) for n, length in zip(range(1, 8193), lengths))
    assert len(set(lengths)) == 20  # compiles, at most, for a context growing to 8,192 positions


def test_compiling_the_decode_step_is_on_for_cuda_unless_the_environment_turns_it_off(
        tiny_model_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from skygym_adapters.engines.hf import compiles_by_default

    monkeypatch.delenv("SKYRL_GYM_HF_COMPILE_DECODE", raising=False)
    assert compiles_by_default("cuda") and compiles_by_default("cuda:1") and not compiles_by_default("cpu")
    engines = [HFEngine(str(tiny_model_dir), device="cpu")]
    monkeypatch.setenv("SKYRL_GYM_HF_COMPILE_DECODE", "0")
    assert not compiles_by_default("cuda")
    engines += [HFEngine(str(tiny_model_dir), device="cpu", compile_decode=True)]  # the argument wins
    try:
        assert [e.compile_decode for e in engines] == [False, True]
    finally:
        for engine in engines:
            engine.close()


@pytest.mark.parametrize("decode_mode", ["static", "dynamic"])
def test_decoding_keeps_its_tensors_on_the_models_device(tokenizer: Any, tiny_model_dir: Any, decode_mode: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU every per-token tensor must live on the GPU: on the emulated device (``tests/device_emulation.py``)
    an op that meets a CPU tensor fails, as on CUDA. With top-k/top-p/min-p, seeds, a stop token and a stop string,
    the tokens, log-probs and stop reasons are the CPU's, and what comes back to the host is stop positions and
    results (bytes per generated token), never a vocabulary-wide tensor."""
    import copy
    from concurrent.futures import Future

    import torch

    from skygym_adapters.engines.hf import _Request
    from tests.device_emulation import TRANSFERS, emulated_device

    # the engine decodes in its worker thread, where the emulation (per-thread modes) does not reach: the batch runs
    # here; and wrapper tensors cannot make views of inference tensors, so no_grad stands in for inference_mode
    monkeypatch.setattr(torch, "inference_mode", torch.no_grad)
    prompts = [prompt(tokenizer, "short"), prompt(tokenizer, "a longer prompt, with more tokens in it"),
               prompt(tokenizer, "x")]
    cpu = HFEngine(str(tiny_model_dir), device="cpu", dtype="float32", decode_mode=decode_mode, sync_interval=4)

    def decode(engine: HFEngine, params: dict) -> list:
        requests = [_Request(p, resolve_sampling(params), Future()) for p in prompts]
        engine._generate_batch(requests)
        return [(r.token_ids, r.logprobs, r.stop_reason) for r in (q.future.result() for q in requests)]

    try:
        filtered = {"max_generate_length": 12, "temperature": 0.8, "seed": 3, "logprobs": True, "top_p": 0.9,
                    "top_k": 40, "min_p": 0.01}
        free = decode(cpu, filtered)  # seeded: the same rows again, until a stop below ends them
        sampled = {**filtered, "stop_token_ids": [free[1][0][6]], "stop": [tokenizer.decode(free[0][0][4:6])]}
        greedy = {"max_generate_length": 12, "temperature": 0.0, "logprobs": True}
        for params in (sampled, greedy):
            expected = decode(cpu, params)
            with emulated_device() as device:
                engine = HFEngine(copy.deepcopy(cpu.model), tokenizer, device=device, decode_mode=decode_mode,
                                  sync_interval=4)
                before = TRANSFERS["to_host"]
                got = decode(engine, params)
                read = TRANSFERS["to_host"] - before
            for (ids, logprobs, reason), (want_ids, want_logprobs, want_reason) in zip(got, expected):
                assert (ids, reason) == (want_ids, want_reason), params
                assert logprobs == pytest.approx(want_logprobs, abs=1e-5)
            assert 0 < read < 64 * len(prompts) * 12  # a vocabulary-wide read would be ~200 KB per row and token
        stopped = [reason for _, _, reason in decode(cpu, sampled)]
        assert stopped[:2] == ["stop", "stop"]  # row 0 by the stop string, row 1 by the stop token
    finally:
        cpu.close()


@pytest.mark.parametrize("failing_call", [1, 2])
async def test_a_compiled_step_that_fails_leaves_eager_decoding_and_no_kept_cache(tokenizer: Any, tiny_model_dir: Any,
                                                                                  failing_call: int) -> None:
    """The compiled step fails on a shape's first call (compiling) or later (CUDA graphs record on the second call):
    the engine decodes eagerly from then on and lets go of the caches it kept for the compiled step. A first-call
    failure costs nothing (that step reruns eagerly, the cache untouched); a later one fails that batch only."""
    prompts = [prompt(tokenizer, "short"), prompt(tokenizer, "x")]
    engine = HFEngine(str(tiny_model_dir), device="cpu", compile_decode=True)
    eager = HFEngine(str(tiny_model_dir), device="cpu", compile_decode=False)
    calls = []

    def compiled_step(**inputs: Any) -> Any:  # a stand-in for torch.compile's function: eager, failing once
        import torch._dynamo

        calls.append(torch._dynamo.config.recompile_limit)  # raised for the call: a shape each, up to 64
        if len(calls) == failing_call:
            raise RuntimeError("capture failed")
        return engine.model.forward(**inputs)

    engine._compiled_forward = compiled_step
    try:
        expected = await eager.generate(prompts, SEEDED)
        if failing_call == 1:
            assert (await engine.generate(prompts, SEEDED))["response_ids"] == expected["response_ids"]
        else:
            with pytest.raises(EngineError, match="capture failed"):
                await engine.generate(prompts, SEEDED)
        assert engine._compiled_forward is False and engine._static_caches == {}
        assert (await engine.generate(prompts, SEEDED))["response_ids"] == expected["response_ids"]
        assert calls == [COMPILED_SHAPES_LIMIT] * failing_call  # never called again
    finally:
        engine.close()
        eager.close()


async def test_sleep_on_an_accelerator_lets_go_of_the_kept_kv_caches(tokenizer: Any, tiny_model_dir: Any) -> None:
    """An engine put to sleep (in its own process, beside a policy on the same GPU) moves its weights to the host
    and drops the KV caches kept for compiled decoding: they would hold the device's memory through training."""
    from tests.device_emulation import emulated_device

    with emulated_device() as device:
        engine = HFEngine(str(tiny_model_dir), device=device, compile_decode=False)
        try:
            engine._static_caches[4] = (256, object())  # what a compiled batch of 4 rows keeps
            await engine.sleep()
            assert engine._static_caches == {} and next(engine.model.parameters()).device.type == "cpu"
            await engine.wake_up()
            assert next(engine.model.parameters()).device == device
        finally:
            engine.close()


def _cpp_compiler() -> bool:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return bool(get_cpp_compiler())
    except Exception:  # none found (torch raises), or a torch without the helper
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _cpp_compiler(), reason="torch.compile on the CPU needs a C++ compiler (install g++, or set "
                    "CXX to one)")
async def test_the_compiled_decode_step_gives_what_eager_decoding_gives(tokenizer: Any, tiny_model_dir: Any) -> None:
    """``compile_decode=True`` on the CPU runs the path a GPU takes (inductor's kernels, without CUDA graphs): the
    static cache kept between batches, rows that end early decoding on unread, a batch padded to a power of two, a
    shorter budget reusing the longer cache. Its tokens and log-probs are eager decoding's."""
    prompts = [prompt(tokenizer, "short"), prompt(tokenizer, "a longer prompt, with more tokens in it"),
               prompt(tokenizer, "x")]
    compiled = HFEngine(str(tiny_model_dir), device="cpu", compile_decode=True)
    eager = HFEngine(str(tiny_model_dir), device="cpu", compile_decode=False)
    try:
        free = (await eager.generate(prompts[:1], {**SEEDED, "max_generate_length": 12}))["response_ids"][0]
        seeded = {"max_generate_length": 12, "temperature": 1.0, "seed": 7, "logprobs": True,
                  "stop_token_ids": [free[3]]}  # row 0 ends early, the others decode on past it
        greedy = {"max_generate_length": 12, "temperature": 0.0, "logprobs": True}
        longer = {**greedy, "max_generate_length": 300}  # a cache of 384 positions, where the others had 128
        four = prompts + [prompt(tokenizer, "four rows")]
        for batch, params in ((prompts, seeded), (prompts, greedy), (four, seeded), (prompts, longer), (four, greedy)):
            ours, theirs = await compiled.generate(batch, params), await eager.generate(batch, params)
            assert ours["response_ids"] == theirs["response_ids"], params
            assert ours["stop_reasons"] == theirs["stop_reasons"], params
            for a, b in zip(ours["response_logprobs"], theirs["response_logprobs"]):
                assert a == pytest.approx(b, abs=1e-4)
            if params is seeded:
                assert ours["stop_reasons"][0] == "stop" and len(ours["response_ids"][0]) <= 4
                assert {len(ids) for ids in ours["response_ids"][1:]} == {12}  # the others decode on past it
        assert compiled._compiled_forward not in (None, False)  # compiled, no fall-back to eager
        # three rows decode padded to four, beside the four-row batches: one batch size, one cache, grown once to the
        # longest budget and reused by the shorter batch after it; two shapes compiled
        assert {batch: length for batch, (length, _) in compiled._static_caches.items()} == {4: 384}
        assert compiled._compiled_shapes == {(4, 128), (4, 384)}
        assert compiled.stats["sequences"] == 3 * 3 + 2 * 4  # padding rows are not sequences anyone asked for
        memory = compiled.device_memory_bytes()
        assert memory["kv_cache"] > 0 and memory["weights"] == sum(
            p.numel() * p.element_size() for p in compiled.model.parameters())
        assert eager._static_caches == {} and eager.device_memory_bytes()["kv_cache"] == 0
        await _lent_writes_reach_the_compiled_step(compiled, eager, four, greedy)
    finally:
        compiled.close()
        eager.close()


async def _lent_writes_reach_the_compiled_step(compiled: HFEngine, eager: HFEngine, prompts: list,
                                                params: dict) -> None:
    """A trainer borrowing ``compiled``'s weights writes new ones into the loan, in place: the compiled step (its
    CUDA graphs, on CUDA) decodes with them at once, with no new compile, as ``eager`` does after
    ``update_weights`` with the same values."""
    import torch

    before = (await compiled.generate(prompts, params))["response_ids"]
    shapes = set(compiled._compiled_shapes)
    noise = torch.Generator().manual_seed(3)
    moved = {id(p): (p.detach().float().cpu() + 0.5 * p.detach().float().cpu().std()
                     * torch.randn(p.shape, generator=noise)).to(p.dtype) for p in compiled.model.parameters()}
    new = {name: moved[id(p)] for name, p in compiled.model.named_parameters(remove_duplicate=False)}  # tied: one
    loan = compiled.lend_weights()
    try:
        with torch.no_grad():
            for name, tensor in loan.items():
                tensor.copy_(new[name])
        compiled.weights_changed()
        await eager.update_weights(new)
        after = (await compiled.generate(prompts, params))["response_ids"]
        assert after == (await eager.generate(prompts, params))["response_ids"]
        assert after != before  # the control: the new weights decode differently
        assert compiled._compiled_shapes == shapes and compiled._compiled_forward not in (None, False)
    finally:
        compiled.recall_weights()


def test_an_engine_thread_gets_the_cuda_graph_state_a_compiled_step_needs() -> None:
    """Each engine decodes in a thread of its own; torch before 2.13 gave the CUDA-graph trees' thread-local state
    only to the thread that imported them, so a compiled step in any other thread failed an assertion."""
    import threading

    import torch
    from torch._inductor import cudagraph_trees

    from skygym_adapters.engines.hf import _ready_cudagraph_thread_state

    seen = {}

    def in_a_new_thread() -> None:
        seen["before"] = torch._C._is_key_in_tls("tree_manager_containers")
        _ready_cudagraph_thread_state()
        seen["after"] = torch._C._is_key_in_tls("tree_manager_containers")
        seen["containers"] = cudagraph_trees.get_obj(cudagraph_trees.local, "tree_manager_containers")
        _ready_cudagraph_thread_state()  # a second call keeps what the first set up
        seen["kept"] = cudagraph_trees.get_obj(cudagraph_trees.local, "tree_manager_containers") is seen["containers"]

    thread = threading.Thread(target=in_a_new_thread)
    thread.start()
    thread.join()
    assert seen == {"before": False, "after": True, "containers": {}, "kept": True}


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU (this machine has none): it runs the engine's "
                    "compiled static-cache decode step; the CPU tests above cover the same code uncompiled")
async def test_on_cuda_sampling_stays_reproducible_and_the_compiled_step_matches_eager(tokenizer: Any,
                                                                                         tiny_model_dir: Any) -> None:
    prompts = [prompt(tokenizer, "short"), prompt(tokenizer, "a longer prompt, with more tokens in it")]
    params = {"max_generate_length": 24, "temperature": 1.0, "seed": 5, "logprobs": True, "top_p": 0.9}
    greedy = {"max_generate_length": 24, "temperature": 0.0}
    compiled = HFEngine(str(tiny_model_dir), device="cuda", dtype="float32", compile_decode=True)
    eager = HFEngine(str(tiny_model_dir), device="cuda", dtype="float32", compile_decode=False)
    try:
        first, second = await compiled.generate(prompts, params), await compiled.generate(prompts, params)
        assert first["response_ids"] == second["response_ids"]
        assert (await compiled.generate(prompts, greedy))["response_ids"] == (
            await eager.generate(prompts, greedy))["response_ids"]
        assert compiled._compiled_forward not in (None, False)  # the compiled step ran (it did not fall back)
        await _lent_writes_reach_the_compiled_step(compiled, eager, prompts, greedy)
    finally:
        compiled.close()
        eager.close()


async def test_close_stops_a_batch_under_way(tokenizer: Any, tiny_model_dir: Any) -> None:
    # Ctrl-C in `agent eval --local-model` closes the engine while it decodes: close() used to wait (30 s at most)
    # for the whole batch, and the process then exited with the thread still in torch ("terminate called ...")
    engine = HFEngine(str(tiny_model_dir), device="cpu")
    request = asyncio.ensure_future(engine.generate([prompt(tokenizer, "a long one")] * 2,
                                                    {"max_generate_length": 100_000, "temperature": 0.0}))
    while engine.stats["batches"] == 0:  # the batch has started decoding
        await asyncio.sleep(0.01)
    await asyncio.to_thread(engine.close)
    assert not engine._worker.is_alive()  # stopped within a decode step, not after 100,000 of them
    with pytest.raises(EngineError, match="closed during generation"):
        await request


async def test_close_stops_the_chunks_of_a_batch_that_have_not_begun(tokenizer: Any, tiny_model_dir: Any) -> None:
    """A batch larger than max_batch_size runs as chunks: after close(), the chunks not yet begun fail at once; each
    used to run its prefill first (on a GPU, a compiled step's first call for a shape takes far longer)."""
    engine = HFEngine(str(tiny_model_dir), device="cpu", max_batch_size=1)
    request = asyncio.ensure_future(engine.generate([prompt(tokenizer, f"long one {i}") for i in range(3)],
                                                    {"max_generate_length": 100_000, "temperature": 0.0}))
    while engine.stats["batches"] == 0:  # the first chunk has started decoding
        await asyncio.sleep(0.01)
    await asyncio.to_thread(engine.close)
    with pytest.raises(EngineError, match="closed during generation"):
        await request
    assert engine.stats["batches"] == 1 and not engine._worker.is_alive()
