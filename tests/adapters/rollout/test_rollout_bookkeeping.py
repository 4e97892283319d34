"""Token bookkeeping of the rollout loop on the real SmolLM2 chat template.

Exact positions are asserted with a scripted engine (it answers fixed texts); the same paths then run with a
real (tiny, random) model whose logprobs are checked against a full forward pass.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List


import pytest

from skygym_adapters.rollout import RolloutConfig, RolloutGenerator, Trajectory
from tests.adapters.conftest import assert_no_template_drift
from tests.adapters.support import CountdownTurnsEnv, ScriptedEngine, user




def make_generator(engine: Any, tokenizer: Any, **config: Any) -> RolloutGenerator:
    config.setdefault("check_drift", True)
    config.setdefault("max_env_workers", 4)
    return RolloutGenerator(engine, tokenizer, RolloutConfig(**config))


async def run_one(generator: RolloutGenerator, extras: Dict[str, Any], env: str = "test_countdown_turns",
                  prompt: str = "start") -> Trajectory:
    trajectories = await generator.run([user(prompt)], [env], [extras])
    assert_no_template_drift(trajectories, generator.chat)
    return trajectories[0]


def segments(tokenizer: Any, ids: List[int], mask: List[int]) -> List[str]:
    """Consecutive runs of equal mask value, decoded (readable assertions)."""
    runs, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            runs.append(f"{mask[start]}:{tokenizer.decode(ids[start:i])}")
            start = i
    return runs


async def test_multi_turn_masks_and_per_turn_rewards(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["first", "second", "third"])
    generator = make_generator(engine, tokenizer, max_turns=5, sampling_params={"max_generate_length": 16, "logprobs": True})
    t = await run_one(generator, {"turns": 3})

    response, mask = t.response_ids(), t.response_loss_mask()
    assert segments(tokenizer, response, mask) == [
        "1:first<|im_end|>",
        "0:\n<|im_start|>user\nobs 1<|im_end|>\n<|im_start|>assistant\n",
        "1:second<|im_end|>",
        "0:\n<|im_start|>user\nobs 2<|im_end|>\n<|im_start|>assistant\n",
        "1:third<|im_end|>",
    ]
    # The recorded ids are exactly what the chat template writes for the final conversation.
    full = t.prompt_ids + response
    assert generator.chat.template_ids(t.conversation, add_generation_prompt=False)[: len(full)] == full
    # Each turn's reward sits on the last token of that turn (its <|im_end|>).
    rewards = t.per_token_rewards()
    eos_positions = [i for i, tok in enumerate(response) if tok == tokenizer.eos_token_id and mask[i] == 1]
    assert [rewards[i] for i in eos_positions] == [1.0, 2.0, 3.0]
    assert sum(rewards) == t.total_reward == 6.0
    # Logprobs: the engine's for model tokens, 0.0 elsewhere.
    logprobs = t.response_logprobs()
    assert [lp for lp, m in zip(logprobs, mask) if m] == [-0.5] * sum(mask)
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
    # Each turn's prompt to the engine is the previous context plus the new ids: nothing re-tokenized.
    assert engine.prompts[1] == full[: len(engine.prompts[1])]
    assert engine.prompts[2] == full[: len(engine.prompts[2])]
    assert t.stop_reason == "stop" and t.num_turns == 3 and t.env_metrics == {"turns_taken": 3}


async def test_generator_output_follows_skyrl_field_names(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["a", "b"])
    generator = make_generator(engine, tokenizer, max_turns=3, sampling_params={"max_generate_length": 8})
    output = await generator.generate({
        "prompts": [user("p0"), user("p1")],
        "env_classes": ["test_countdown_turns"] * 2,
        "env_extras": [{"turns": 2}, {"turns": 1}],
        "trajectory_ids": [{"instance_id": "q0", "repetition_id": 0}, {"instance_id": "q1", "repetition_id": 0}],
    })
    for key in ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "rollout_metrics",
                "trajectory_ids", "env_metrics", "trajectory_rewards", "num_turns", "errors", "trajectory_time_splits"):
        assert key in output, key
    assert output["rollout_logprobs"] is None  # not requested
    assert output["trajectory_rewards"] == [3.0, 1.0]
    assert output["num_turns"] == [2, 1]
    assert [len(r) for r in output["rewards"]] == [len(r) for r in output["response_ids"]]
    assert [len(m) for m in output["loss_masks"]] == [len(r) for r in output["response_ids"]]
    assert output["rollout_metrics"]["drift/num_drifted"] == 0
    assert output["rollout_metrics"]["generate/avg_reward"] == 2.0
    split = output["trajectory_time_splits"]
    assert all(total >= llm + env for llm, env, total in zip(split["llm"], split["env"], split["total"]))
    assert output["trajectory_generation_times"] == split["total"]


async def test_stop_string_ends_turn_and_eos_is_appended_masked(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["look up <search>cats</search> and more text"])
    generator = make_generator(
        engine, tokenizer, max_turns=2,
        sampling_params={"max_generate_length": 32, "stop": ["</search>"], "logprobs": True},
    )
    t = await run_one(generator, {"turns": 2})
    turn = t.turns[0]
    assert turn.text == "look up <search>cats</search>"  # what the env received
    assert turn.added_eos
    output_ids = t.ids[turn.start : turn.output_end]
    assert output_ids[-1] == tokenizer.eos_token_id
    assert t.loss_mask[turn.output_end - 1] == 0  # the appended EOS was not generated: not trained on
    assert t.logprobs[turn.output_end - 1] == 0.0
    assert tokenizer.decode(output_ids[:-1]) == "look up <search>cats</search>"


async def test_turn_cut_by_max_generate_length_is_closed_before_the_observation(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["one two three four five six seven", "ok"])
    generator = make_generator(engine, tokenizer, max_turns=2, sampling_params={"max_generate_length": 3})
    t = await run_one(generator, {"turns": 2})
    first = t.turns[0]
    assert first.stop_reason == "length" and first.added_eos
    assert first.output_end - first.start == 4  # 3 generated + the closing end-of-turn (mask 0)
    assert t.loss_mask[first.start : first.output_end] == [1, 1, 1, 0]
    assert t.stop_reason == "stop"  # the trajectory's stop reason is its last turn's


async def test_total_length_cap_stops_with_length(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["a fairly long answer with many words in it"])
    prompt_len = len(RolloutGenerator(engine, tokenizer).chat.prompt_ids(user("start")))
    generator = make_generator(
        engine, tokenizer, max_turns=5, max_input_length=prompt_len + 5,
        sampling_params={"max_generate_length": 32},
    )
    t = await run_one(generator, {"turns": 5})
    assert t.stop_reason == "length"
    assert t.num_turns == 1  # the second turn would start from a context longer than the cap
    assert t.response_ids()[-1] == tokenizer.eos_token_id


async def test_zero_reward_and_overlong_filtering_on_non_stop(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["a fairly long answer with many words in it"])
    prompt_len = len(RolloutGenerator(engine, tokenizer).chat.prompt_ids(user("start")))
    generator = make_generator(
        engine, tokenizer, max_turns=5, max_input_length=prompt_len + 5, zero_reward_on_non_stop=True,
        apply_overlong_filtering=True, sampling_params={"max_generate_length": 32},
    )
    output = await generator.generate(
        {"prompts": [user("start")], "env_classes": ["test_countdown_turns"], "env_extras": [{"turns": 5}]}
    )
    assert output["stop_reasons"] == ["length"]
    assert sum(output["rewards"][0]) == 0.0 and output["trajectory_rewards"] == [0.0]
    assert not any(output["loss_masks"][0])


async def test_step_wise_trajectories(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["first", "second", "third"])
    generator = make_generator(engine, tokenizer, max_turns=5, step_wise_trajectories=True,
                               sampling_params={"max_generate_length": 8, "logprobs": True})
    output = await generator.generate({
        "prompts": [user("start")], "env_classes": ["test_countdown_turns"], "env_extras": [{"turns": 3}],
        "trajectory_ids": [{"instance_id": "q", "repetition_id": 0}],
    })
    assert output["is_last_step"] == [False, False, True]
    prompts, responses = output["prompt_token_ids"], output["response_ids"]
    for k in range(2):  # token-in/token-out: step k+1's prompt is step k's prompt + response
        assert prompts[k + 1] == prompts[k] + responses[k]
    for k, reply in enumerate(["first", "second", "third"]):
        model_part = [tok for tok, m in zip(responses[k], output["loss_masks"][k]) if m]
        assert tokenizer.decode(model_part) == reply + "<|im_end|>"
        rewards = output["rewards"][k]
        assert sum(rewards) == k + 1 and rewards[len(model_part) - 1] == k + 1
        assert len(output["rollout_logprobs"][k]) == len(responses[k])
    assert output["trajectory_ids"] == [{"instance_id": "q", "repetition_id": 0}] * 3


async def test_single_assistant_message_mode_appends_raw_observations(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["<search>a</search>", "<answer>b</answer>"], add_eos=False)
    generator = make_generator(engine, tokenizer, max_turns=3, use_conversation_multi_turn=False,
                               sampling_params={"max_generate_length": 16, "stop": ["</search>", "</answer>"]})
    t = await run_one(generator, {"turns": 2})
    assert segments(tokenizer, t.response_ids(), t.response_loss_mask()) == [
        "1:<search>a</search>", "0:obs 1", "1:<answer>b</answer><|im_end|>",
    ]
    assert t.final_eos_appended
    assert [m["role"] for m in t.conversation] == ["user", "assistant"]
    assert t.conversation[-1]["content"] == "<search>a</search>obs 1<answer>b</answer>"
    assert t.per_token_rewards()[-1] == 2.0 and t.total_reward == 3.0
    assert t.drift.ok, t.drift


async def test_batched_single_turn_mode(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["The answer is #### 7", "#### 8"])
    generator = make_generator(engine, tokenizer, batched=True, sampling_params={"max_generate_length": 16})
    rows = [{"prompt": user("3+4?"), "env_class": "gsm8k", "reward_spec": {"method": "rule", "ground_truth": "7"}}] * 2
    trajectories = await generator.run_rows(rows, n_samples_per_prompt=1)
    assert [t.total_reward for t in trajectories] == [1.0, 0.0]
    assert [t.trajectory_id["instance_id"] for t in trajectories] == ["0", "1"]
    assert all(t.drift.ok for t in trajectories)
    output = generator.to_generator_output(trajectories)
    assert [sum(r) for r in output["rewards"]] == [1.0, 0.0]


async def test_an_env_that_raises_ends_only_its_own_trajectory(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer, ["x"])
    generator = make_generator(engine, tokenizer, max_turns=4, sampling_params={"max_generate_length": 4})
    trajectories = await generator.run(
        [user("a"), user("b"), user("c")],
        ["test_countdown_turns", "test_failing", "gsm8k"],
        [{"turns": 2}, {"fail_at": 2}, {}],  # gsm8k without reward_spec: make() fails
    )
    good, failing, unbuildable = trajectories
    assert good.error is None and good.total_reward == 3.0
    assert failing.stop_reason == "error" and "tool crashed at turn 2" in failing.error
    assert failing.num_turns == 1 and failing.total_reward == 0.0 and not any(failing.response_loss_mask())
    assert unbuildable.stop_reason == "error" and unbuildable.error.startswith("make:")
    output = generator.to_generator_output(trajectories)
    assert output["errors"][0] is None and output["errors"][1] and output["errors"][2]
    assert output["loss_masks"][2] == [0] and output["rollout_metrics"]["generate/num_errors"] == 2


async def test_malformed_env_output_is_an_error_of_that_trajectory(tokenizer: Any) -> None:
    generator = make_generator(ScriptedEngine(tokenizer, ["x"]), tokenizer, sampling_params={"max_generate_length": 4})
    bad_reward, bad_init, good = await generator.run(
        [user("a"), user("b"), user("c")], ["test_malformed", "test_malformed", "test_countdown_turns"],
        [{"mode": "bad_reward"}, {"mode": "bad_init"}, {"turns": 1}],
    )
    assert bad_reward.stop_reason == "error" and bad_reward.error.startswith("step:")
    assert bad_init.stop_reason == "error" and "init() must return a list of chat messages" in bad_init.error
    assert good.error is None and good.total_reward == 1.0


async def test_hundreds_of_trajectories_share_one_loop_and_a_bounded_env_pool(tokenizer: Any) -> None:
    in_step, peak, lock = [0], [0], threading.Lock()
    original_step = CountdownTurnsEnv.step

    def tracking_step(self: CountdownTurnsEnv, action: str) -> Any:
        with lock:
            in_step[0] += 1
            peak[0] = max(peak[0], in_step[0])
        try:
            time.sleep(0.01)  # blocking work: must not block the event loop
            return original_step(self, action)
        finally:
            with lock:
                in_step[0] -= 1

    engine = ScriptedEngine(tokenizer, ["ok"])
    generator = make_generator(engine, tokenizer, max_turns=2, max_env_workers=8, check_drift=False,
                               sampling_params={"max_generate_length": 4})
    CountdownTurnsEnv.step = tracking_step  # type: ignore[method-assign]
    try:
        trajectories = await generator.run([user(f"p{i}") for i in range(300)], ["test_countdown_turns"] * 300,
                                           [{"turns": 2}] * 300)
    finally:
        CountdownTurnsEnv.step = original_step  # type: ignore[method-assign]
    assert len(trajectories) == 300 and all(t.total_reward == 3.0 for t in trajectories)
    assert 1 < peak[0] <= 8  # env steps overlapped, never more than the pool allows
    assert_no_template_drift(trajectories, generator.chat)


async def test_real_tiny_model_logprobs_match_a_full_forward_pass(tokenizer: Any, tiny_engine: Any) -> None:
    import torch

    generator = make_generator(tiny_engine, tokenizer, max_turns=3,
                               sampling_params={"max_generate_length": 6, "logprobs": True, "temperature": 1.0})
    trajectories = await generator.run([user("hello"), user("hi there")], ["test_countdown_turns"] * 2,
                                       [{"turns": 3}, {"turns": 2}])
    assert_no_template_drift(trajectories, generator.chat)
    model = tiny_engine.model
    for t in trajectories:
        response, mask, logprobs = t.response_ids(), t.response_loss_mask(), t.response_logprobs()
        assert len(response) == len(mask) == len(logprobs) == len(t.per_token_rewards())
        full = torch.tensor([t.prompt_ids + response])
        with torch.no_grad():
            logits = model(full).logits[0].float()
        recomputed = torch.log_softmax(logits[:-1], dim=-1).gather(-1, full[0, 1:, None]).squeeze(-1)
        offset = len(t.prompt_ids) - 1
        for i, (m, lp) in enumerate(zip(mask, logprobs)):
            if m:
                assert abs(recomputed[offset + i].item() - lp) < 1e-3, (i, lp, recomputed[offset + i].item())


async def test_each_turn_of_a_step_decodes_as_one_batch(tokenizer: Any, tiny_model_dir: Any) -> None:
    """The generator tells the engine how many trajectories are coming: envs that answer at different times (and one
    that fails) do not split a turn's requests, even with no time window to collect them in."""
    from skygym_adapters.engines.hf import HFEngine

    engine = HFEngine(str(tiny_model_dir), device="cpu", batch_wait_s=0.0, max_batch_wait_s=0.0, max_expect_wait_s=600)
    try:
        generator = make_generator(engine, tokenizer, max_turns=3, sampling_params={"max_generate_length": 4})
        trajectories = await generator.run(
            [user(f"p{i}") for i in range(4)], ["test_countdown_turns"] * 3 + ["test_failing"],
            [{"turns": 3, "sleep_s": 0.0}, {"turns": 3, "sleep_s": 0.2}, {"turns": 3, "sleep_s": 0.4}, {"fail_at": 2}],
        )
        assert [t.num_turns for t in trajectories] == [3, 3, 3, 1] and trajectories[3].stop_reason == "error"
        assert engine.stats["batches"] == 3 and engine.stats["sequences"] == 4 + 4 + 3  # one batch per turn
        assert engine._open_sessions == 0  # every announced session was closed
    finally:
        engine.close()


async def test_multi_turn_rollouts_are_the_same_with_kept_kv_caches_and_let_them_go(tokenizer: Any,
                                                                                   tiny_model_dir: Any) -> None:
    """The engine keeps each trajectory's KV cache between its turns: the trajectories (ids, masks, logprobs) are
    those of an engine that computes every turn's whole conversation, and once they end nothing is kept."""
    from skygym_adapters.engines.hf import HFEngine

    runs = {}
    for keep in (True, False):
        engine = HFEngine(str(tiny_model_dir), device="cpu", session_cache_gib=None if keep else 0)
        kept_turns: list = []
        put = engine.sessions.put
        engine.sessions.put = lambda session, cache: (kept_turns.append(session), put(session, cache))
        try:
            generator = make_generator(engine, tokenizer, max_turns=3, sampling_params={
                "max_generate_length": 6, "temperature": 1.0, "seed": 11, "logprobs": True})
            trajectories = await generator.run([user(f"p{i}") for i in range(4)], ["test_countdown_turns"] * 4,
                                               [{"turns": 3}] * 4)
            runs[keep] = (trajectories, dict(engine.stats), len(engine.sessions), len(kept_turns))
            single = make_generator(engine, tokenizer, max_turns=1, sampling_params={"max_generate_length": 4})
            await single.run([user("one turn")], ["test_countdown_turns"], [{"turns": 3}])
            assert len(kept_turns) == runs[keep][3]  # a trajectory's last turn keeps nothing: none comes after it
        finally:
            engine.close()
    (kept, kept_stats, left, kept_count), (whole, whole_stats, _, _) = runs[True], runs[False]
    assert [t.num_turns for t in kept] == [3] * 4 and left == 0  # every trajectory finished its session
    assert kept_count == 4 * 2  # the first two turns of each
    for a, b in zip(kept, whole):
        assert a.ids == b.ids and a.loss_mask == b.loss_mask
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert kept_stats["resumed_tokens"] > kept_stats["prefill_tokens"] and whole_stats["resumed_tokens"] == 0


async def test_two_batches_on_one_engine_at_once_each_get_their_own_rollouts(tokenizer: Any,
                                                                            tiny_model_dir: Any) -> None:
    """A trainer with asynchronous training evaluates while its producer generates: two multi-turn batches share one
    engine, its batches and its kept KV caches, and their trajectory ids collide (both number their rows from 0).
    Each trajectory is still the one its batch would get alone: same tokens, masks and logprobs, in input order."""
    from skygym_adapters.engines.hf import HFEngine

    sampling = {"max_generate_length": 6, "temperature": 1.0, "seed": 5, "logprobs": True}
    batches = {name: [user(f"{name} question {i}") for i in range(3)] for name in ("train", "eval")}
    engine = HFEngine(str(tiny_model_dir), device="cpu")
    try:
        async def run(name: str) -> List[Trajectory]:
            generator = make_generator(engine, tokenizer, max_turns=3, sampling_params=sampling)
            try:
                return await generator.run(batches[name], ["test_countdown_turns"] * 3, [{"turns": 3}] * 3)
            finally:
                generator.close()

        alone = {name: await run(name) for name in batches}
        before = dict(engine.stats)
        together = dict(zip(batches, await asyncio.gather(*(run(name) for name in batches))))
        shared = {k: engine.stats[k] - before[k] for k in before}
    finally:
        engine.close()
    # they did share: both batches' first turns decoded as one batch, and turns resumed kept caches
    assert shared["sequences"] == 2 * 3 * 3 and shared["batches"] < 2 * 3
    assert shared["resumed_tokens"] > 0
    for name in batches:
        for a, b, row in zip(together[name], alone[name], batches[name]):
            assert tokenizer.decode(a.prompt_ids).count(row[0]["content"]) == 1
            assert a.ids == b.ids and a.loss_mask == b.loss_mask and a.num_turns == b.num_turns == 3
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert [t.ids for t in together["train"]] != [t.ids for t in together["eval"]]
