"""The ``skyrl-train`` backend: the bundled trainer's engines, token in and token out; ``run`` returns the
trainer's ``GeneratorOutput`` recorded by the rollout loop (ids, loss masks, per-token rewards, metrics)."""

from __future__ import annotations

import asyncio

import pytest

from skygym_adapters.agents import AgentRunner
from skygym_adapters.rollout import generate_rollouts
from skygym_adapters.rollout.config import RolloutConfig
from skygym_adapters.scripted import ScriptedEngine
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows


def env_config(**generator):
    return {
        "task": "env",
        "env_class": "gsm8k",
        "generator": {
            "infer_backend": "skyrl-train",
            "sampling_params": {"max_tokens": 64, "temperature": 1.0},
            "max_iterations": 1,
            **generator,
        },
        "dispatcher": {"max_parallel_agents": 3},
    }


@pytest.fixture
def rows(gsm8k_test_file):
    return list(gsm8k_rows(gsm8k_test_file, limit=4))


def scripts_for(rows):
    """Right answers for rows 0 and 2, wrong ones for rows 1 and 3 (keyed by each row's question)."""
    scripts = {}
    for index, row in enumerate(rows):
        truth = row["reward_spec"]["ground_truth"]
        scripts[row["prompt"][0]["content"]] = [f"So it is #### {truth if index % 2 == 0 else 'x'}"]
    return scripts


def test_training_output_is_the_rollout_loops_generator_output(rows, tokenizer):
    engine = ScriptedEngine(tokenizer, scripts_for(rows))
    out = asyncio.run(AgentRunner(env_config(), infer_engine=engine, tokenizer=tokenizer).run(rows))
    assert out["trajectory_rewards"] == [1.0, 0.0, 1.0, 0.0]
    assert [r[-1] for r in out["rewards"]] == [1.0, 0.0, 1.0, 0.0]  # the reward sits on the last token
    assert all(
        len(ids) == len(mask) == len(rw)
        for ids, mask, rw in zip(out["response_ids"], out["loss_masks"], out["rewards"])
    )
    assert out["stop_reasons"] == ["stop"] * 4
    metrics = out["rollout_metrics"]
    assert metrics["agent/finish_reason/FINISH"] == 1.0 and metrics["generate/avg_reward"] == 0.5
    # the same tokens the rollout loop records for these rows by itself
    engine.reset()
    plain = asyncio.run(
        generate_rollouts(
            engine,
            tokenizer,
            rows,
            config=RolloutConfig(sampling_params={"max_tokens": 64, "temperature": 1.0}),
        )
    )
    assert (
        out["prompt_token_ids"] == plain["prompt_token_ids"] and out["response_ids"] == plain["response_ids"]
    )
    assert out["loss_masks"] == plain["loss_masks"]


def test_generate_is_the_trainers_generator_interface(rows, tokenizer):
    engine = ScriptedEngine(tokenizer, {k: v * 2 for k, v in scripts_for(rows[:2]).items()})
    batch = {
        "prompts": [r["prompt"] for r in rows[:2] for _ in range(2)],
        "env_classes": ["gsm8k"] * 4,
        "env_extras": [
            {k: v for k, v in r.items() if k not in ("prompt", "env_class")}
            for r in rows[:2]
            for _ in range(2)
        ],
        "trajectory_ids": [{"instance_id": f"q{i}", "repetition_id": j} for i in range(2) for j in range(2)],
    }
    out = asyncio.run(AgentRunner(env_config(), infer_engine=engine, tokenizer=tokenizer).generate(batch))
    assert out["trajectory_ids"] == batch["trajectory_ids"]
    assert out["trajectory_rewards"] == [1.0, 1.0, 0.0, 0.0]


def test_a_react_task_reward_lands_on_the_last_token_and_tool_output_is_masked(tokenizer):
    row = {
        "data_source": "math",
        "prompt": [{"role": "user", "content": "What is 6 times 7?"}],
        "reward_spec": {"ground_truth": "42"},
    }
    engine = ScriptedEngine(
        tokenizer,
        {
            "6 times 7": [
                '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(6*7)"}}</tool_call>',
                r"<finish>\boxed{42}</finish>",
            ]
        },
    )
    config = {
        "task": "general_react",
        "tools": ["finish", "code_interpreter"],
        "generator": {
            "infer_backend": "skyrl-train",
            "max_iterations": 4,
            "sampling_params": {"max_tokens": 64},
        },
    }
    runner = AgentRunner(config, infer_engine=engine, tokenizer=tokenizer)
    out = asyncio.run(runner.run([row]))
    assert (
        out["trajectory_rewards"] == [1.0] and out["rewards"][0][-1] == 1.0 and sum(out["rewards"][0]) == 1.0
    )
    assert out["num_turns"] == [2] and out["rollout_metrics"]["agent/finish_reason/FINISH_TOOL"] == 1.0
    mask, ids = out["loss_masks"][0], out["response_ids"][0]
    observation = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
    assert "42" in observation  # the sandbox's output came back as an observation, masked out of the loss
    assert "print(6*7)" in tokenizer.decode([t for t, m in zip(ids, mask) if m == 1])
    evaluated = asyncio.run(
        AgentRunner(
            config,
            infer_engine=ScriptedEngine(tokenizer, {"6 times 7": [r"<finish>\boxed{42}</finish>"]}),
            tokenizer=tokenizer,
        ).run([row], val_mode=True)
    )
    assert evaluated["rewards"] == [1.0] and evaluated["results"][0]["messages"][0]["role"] == "system"


def test_an_engine_failure_fails_its_trajectory_with_a_masked_row(rows, tokenizer):
    scripts = scripts_for(rows)
    del scripts[rows[1]["prompt"][0]["content"]]  # the engine cannot answer row 1
    engine = ScriptedEngine(tokenizer, scripts)
    runner = AgentRunner(env_config(), infer_engine=engine, tokenizer=tokenizer)
    out = asyncio.run(runner.run(rows))
    assert out["trajectory_rewards"] == [1.0, 0.0, 1.0, 0.0]
    assert set(out["loss_masks"][1]) == {0} and "ScriptError" in out["errors"][1]
    assert out["rollout_metrics"]["agent/finish_reason/error_backend"] == 0.25


def test_trajectories_cut_by_the_iteration_cap_are_not_trained_on(tokenizer):
    row = {
        "data_source": "math",
        "prompt": [{"role": "user", "content": "What is 6 times 7?"}],
        "reward_spec": {"ground_truth": "42"},
    }
    engine = ScriptedEngine(tokenizer, {"6 times 7": ["Hmm.", "Hmm again."]})
    config = {
        "task": "general_react",
        "tools": ["finish"],
        "generator": {
            "infer_backend": "skyrl-train",
            "max_iterations": 2,
            "sampling_params": {"max_tokens": 32},
        },
    }
    out = asyncio.run(AgentRunner(config, infer_engine=engine, tokenizer=tokenizer).run([row]))
    assert out["rollout_metrics"]["agent/finish_reason/max_iterations_reached"] == 1.0
    assert out["num_turns"] == [2] and set(out["loss_masks"][0]) == {0}


def test_a_real_model_behind_the_engine_interface(rows, tiny_engine, tokenizer):
    runner = AgentRunner(
        env_config(sampling_params={"max_tokens": 8, "temperature": 1.0, "logprobs": True}),
        infer_engine=tiny_engine,
        tokenizer=tokenizer,
    )
    out = asyncio.run(runner.run(rows[:2]))
    assert len(out["response_ids"]) == 2 and out["rollout_logprobs"] is not None
    assert all(sum(mask) >= 1 for mask in out["loss_masks"])  # the model's own tokens are trained on
    assert out["trajectory_rewards"] == [0.0, 0.0]  # a random model does not solve GSM8K


def test_max_prompt_length_stops_a_token_trajectory_before_the_context_overflows(rows, tokenizer):
    engine = ScriptedEngine(tokenizer, scripts_for(rows))
    runner = AgentRunner(env_config(max_prompt_length=10), infer_engine=engine, tokenizer=tokenizer)
    out = asyncio.run(runner.run(rows[:1]))
    assert out["rollout_metrics"]["agent/finish_reason/CONTEXT_WINDOW_EXCEEDED"] == 1.0
    assert out["num_turns"] == [0] and set(out["loss_masks"][0]) == {0}


class _SlowFor(ScriptedEngine):
    """A scripted engine whose answers to prompts holding ``slow_key`` come ``delay_s`` late."""

    def __init__(self, tokenizer, scripts, slow_key: str, delay_s: float):
        super().__init__(tokenizer, scripts)
        self.slow_key, self.delay_s = slow_key, delay_s

    async def generate(self, prompt_token_ids, sampling_params=None, **kwargs):
        if any(self.slow_key in self.tokenizer.decode(list(p)) for p in prompt_token_ids):
            await asyncio.sleep(self.delay_s)
        return await super().generate(prompt_token_ids, sampling_params, **kwargs)


def test_two_batches_on_one_runner_at_once_each_get_their_own_trajectories(rows, tokenizer):
    """The trainer's training batch and its evaluation run at once on one runner (async training with
    ``eval_interval``): each batch gets back its own trajectories and rewards, whichever ends first. (The runner once
    kept the batch in one attribute: the first to end returned the other's finished rows under its own ids.)"""
    scripts = scripts_for(rows)
    engine = _SlowFor(tokenizer, scripts, slow_key=rows[1]["prompt"][0]["content"], delay_s=0.5)
    runner = AgentRunner(env_config(), infer_engine=engine, tokenizer=tokenizer)

    def batch(picked, tag):
        return {
            "prompts": [rows[i]["prompt"] for i in picked],
            "env_classes": ["gsm8k"] * len(picked),
            "env_extras": [{"reward_spec": rows[i]["reward_spec"]} for i in picked],
            "trajectory_ids": [{"instance_id": f"{tag}{i}", "repetition_id": 0} for i in picked],
        }

    slow_batch, fast_batch = batch([1, 3], "eval"), batch([0, 2], "train")  # rows 0, 2 are right; 1, 3 wrong

    async def both():
        slow = asyncio.ensure_future(runner.generate(slow_batch))
        await asyncio.sleep(0)  # the slow batch starts first and ends last
        return await asyncio.gather(slow, runner.generate(fast_batch))

    slow_out, fast_out = asyncio.run(both())
    for out, asked, rewards in ((slow_out, slow_batch, [0.0, 0.0]), (fast_out, fast_batch, [1.0, 1.0])):
        assert out["trajectory_ids"] == asked["trajectory_ids"]
        assert out["trajectory_rewards"] == rewards and out["errors"] == [None, None]
        assert all(sum(mask) > 0 for mask in out["loss_masks"])  # none failed as "never ran"
        questions = [tokenizer.decode(ids) for ids in out["prompt_token_ids"]]
        assert all(p[0]["content"] in q for p, q in zip(asked["prompts"], questions))
    assert runner.trajectories == {}  # nothing of either run is left behind


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1.0", None])
def test_a_task_reward_that_is_not_a_finite_number_masks_its_row(rows, tokenizer, monkeypatch, bad):
    """A task's ``evaluate_result`` answering NaN would turn its GRPO group's advantages into NaN: the row is
    masked out with an ``eval_error`` naming the value, as an env's step reward of NaN is."""
    from skygym_adapters.agents import tasks

    class OddTask(tasks.EnvTask):
        async def evaluate_result(self, result, instance, data_source, instance_id, trajectory_id):
            return bad if instance_id == 0 else 1.0

    monkeypatch.setitem(tasks.TASK_REGISTRY, "odd_reward", OddTask)
    engine = ScriptedEngine(tokenizer, scripts_for(rows[:2]))
    runner = AgentRunner({**env_config(), "task": "odd_reward"}, infer_engine=engine, tokenizer=tokenizer)
    out = asyncio.run(runner.run(rows[:2]))
    assert out["trajectory_rewards"] == [0.0, 1.0]
    assert sum(out["loss_masks"][0]) == 0 and sum(out["loss_masks"][1]) > 0
    assert out["rollout_metrics"]["agent/num_eval_errors"] == 1
    engine.reset()
    evaluated = asyncio.run(runner.run(rows[:2], val_mode=True))
    assert "reward must be a finite number" in evaluated["results"][0]["eval_error"]
    assert evaluated["rewards"] == [0.0, 1.0]


def test_a_task_that_returns_a_verdict_pays_one_or_zero(rows, tokenizer, monkeypatch):
    from skygym_adapters.agents import tasks

    class Verdict(tasks.EnvTask):
        async def evaluate_result(self, result, instance, data_source, instance_id, trajectory_id):
            return instance_id == 0

    monkeypatch.setitem(tasks.TASK_REGISTRY, "verdict", Verdict)
    runner = AgentRunner({**env_config(), "task": "verdict"}, infer_engine=ScriptedEngine(tokenizer, scripts_for(rows[:2])),
                         tokenizer=tokenizer)
    out = asyncio.run(runner.run(rows[:2]))
    assert out["trajectory_rewards"] == [1.0, 0.0] and all(sum(mask) > 0 for mask in out["loss_masks"])


def test_a_run_that_starts_while_the_last_one_closes_keeps_its_runtimes(rows, tokenizer, monkeypatch):
    """The last run to end closes what runs share: the task's leftover runtimes (a SWE task's containers) and the
    backend's HTTP session. The close awaited the backend first; a run that started in that await lost the
    runtimes it had just made to the task's close_all_runtimes. The runtimes are closed before any await now."""
    from skygym_adapters.agents import backends, tasks

    class Tracked(tasks.EnvTask):
        live: set = set()

        async def initialize_runtime(self, instance, cfg):
            runtime = await super().initialize_runtime(instance, cfg)
            Tracked.live.add(runtime)
            return runtime

        async def complete_runtime(self, runtime, run):
            if runtime not in Tracked.live:
                raise RuntimeError("this trajectory's runtime was closed by another run's clean-up")
            Tracked.live.discard(runtime)
            return await super().complete_runtime(runtime, run)

        def close_all_runtimes(self):
            Tracked.live.clear()

    closing = []

    class SlowToClose(backends.TokenBackend):
        async def aclose(self):  # as an HTTP session's close awaits its connections
            closing.append(True)
            await asyncio.sleep(0.3)

    monkeypatch.setitem(tasks.TASK_REGISTRY, "tracked", Tracked)
    monkeypatch.setitem(backends.BACKEND_REGISTRY, "slow_to_close",
                        lambda cfg, engine, tok, **kw: SlowToClose(engine, tok, kw.get("chat_template_kwargs")))
    config = env_config(infer_backend="slow_to_close")
    # the second run's first reply comes after the first run's close has awaited the backend (0.3 s)
    engine = _SlowFor(tokenizer, scripts_for(rows), slow_key=rows[2]["prompt"][0]["content"], delay_s=0.6)
    runner = AgentRunner({**config, "task": "tracked"}, infer_engine=engine, tokenizer=tokenizer)

    async def second_run_during_the_close():
        while not closing:
            await asyncio.sleep(0.001)
        return await runner.run(rows[2:])

    async def both():
        return await asyncio.gather(runner.run(rows[:2]), second_run_during_the_close())

    first, second = asyncio.run(both())
    assert first["trajectory_rewards"] == [1.0, 0.0] and second["trajectory_rewards"] == [1.0, 0.0]
    assert second["rollout_metrics"]["agent/num_eval_errors"] == 0
