"""Real rollouts with the embedded SmolLM2-135M-Instruct on CPU, for every built-in env.

Short generations keep this quick; the assertions are about the bookkeeping on real model output (ids, masks,
rewards, drift), not about the model solving the tasks.
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from skygym_adapters.rollout import RolloutConfig, RolloutGenerator
from tests.adapters.conftest import assert_no_template_drift

pytestmark = pytest.mark.slow


def row(env_class: str, question: str, answer: str) -> Dict[str, Any]:
    return {
        "data_source": "tests",
        "prompt": [{"role": "user", "content": question}],
        "env_class": env_class,
        "reward_spec": {"method": "rule", "ground_truth": answer},
        "extra_info": {},
    }


BUILT_IN_ROWS: List[Dict[str, Any]] = [
    row("gsm8k", "Tom has 3 apples and buys 4 more. How many apples? End with '#### N'.", "7"),
    row("gsm8k_multi_turn", "What is 5 + 6? End with '#### N'.", "11"),
    row("multiply", "Compute 3 * 4. Put the answer in \\boxed{}.", "12"),
    row("math", "What is $2+2$? Put the answer in \\boxed{}.", "4"),
    row("aime", "What is 10 * 10? Put the answer in \\boxed{}.", "100"),
]


@pytest.fixture(scope="module")
def smollm2_engine(embedded_model: Any) -> Any:
    from skygym_adapters.engines.hf import HFEngine

    engine = HFEngine("smollm2-135m", device="cpu")
    yield engine
    engine.close()


async def test_every_built_in_env_rolls_out_with_smollm2(tokenizer: Any, smollm2_engine: Any) -> None:
    from skyrl_gym.envs import registration  # noqa: F401  (built-in envs registered)
    import skyrl_gym

    built_in = {"gsm8k", "gsm8k_multi_turn", "multiply", "math", "aime"}
    assert built_in <= set(skyrl_gym.registry), "a built-in env is missing from the registry"
    config = RolloutConfig(max_turns=2, check_drift=True,
                           sampling_params={"max_generate_length": 24, "temperature": 0.0, "logprobs": True})
    generator = RolloutGenerator(smollm2_engine, tokenizer, config)
    trajectories = await generator.run_rows(BUILT_IN_ROWS, n_samples_per_prompt=1)
    generator.close()
    assert_no_template_drift(trajectories, generator.chat)
    by_env = {t.env_class: t for t in trajectories}
    assert set(by_env) == built_in
    for t in trajectories:
        assert t.error is None, t.error
        response, mask = t.response_ids(), t.response_loss_mask()
        assert len(response) == len(mask) == len(t.response_logprobs()) == len(t.per_token_rewards())
        assert sum(mask) > 0 and all(lp <= 0.0 for lp in t.response_logprobs())
        assert t.drift.ok, f"{t.env_class}: {t.drift}"  # real, mostly canonical output: exact reproduction
        assert 1 <= t.num_turns <= 2
        # the env saw the model's own text
        assert t.turns[0].text == tokenizer.decode(t.ids[t.turns[0].start : t.turns[0].output_end], skip_special_tokens=True)
    # multi-turn envs continue after a wrong or unfinished answer: their second turn starts from the exact
    # recorded context plus the env's retry message.
    multi = by_env["gsm8k_multi_turn"]
    if multi.num_turns == 2:
        context = tokenizer.decode((multi.prompt_ids + multi.ids)[: multi.turns[1].context_length])
        assert "#### ANSWER" in context and context.endswith("<|im_start|>assistant\n")
    output = generator.to_generator_output(trajectories)
    assert output["rollout_metrics"]["drift/num_drifted"] == 0
    assert output["rollout_metrics"]["generate/num_trajectories"] == 5


async def test_smollm2_answers_simple_multiplication_in_batched_mode(tokenizer: Any, smollm2_engine: Any) -> None:
    rows = [row("multiply", f"What is {a} * {b}? Answer with \\boxed{{}} only.", str(a * b)) for a, b in [(2, 3), (4, 5)]]
    config = RolloutConfig(batched=True, check_drift=True,
                           sampling_params={"max_generate_length": 24, "temperature": 0.0})
    generator = RolloutGenerator(smollm2_engine, tokenizer, config)
    trajectories = await generator.run_rows(rows)
    generator.close()
    assert_no_template_drift(trajectories, generator.chat)
    for t in trajectories:
        assert t.stop_reason in ("stop", "length") and t.num_turns == 1
        boxed = "\\boxed{" in t.turns[0].text
        # The env's reward follows from the text: 1.0 only for the right boxed product.
        if t.total_reward == 1.0:
            assert boxed and t.env_class == "multiply"


async def test_tool_search_and_code_envs_roll_out_with_smollm2(tokenizer: Any, smollm2_engine: Any) -> None:
    """The other built-in envs (SQL on real SQLite, search against the real BM25 server, sandboxed code,
    countdown), one row each, through the same loop: the model's text reaches the env, tool observations
    come back as masked tokens, and the bookkeeping holds on whatever the model writes."""
    from skygym_adapters.conformance.cases import retrieval_server
    from tests.skyrl_gym.builtin_rows import BUILTIN_ROWS, builtin_env_ids

    env_ids = sorted(set(BUILTIN_ROWS) - {r["env_class"] for r in BUILT_IN_ROWS})
    assert {"text2sql", "search", "searchcode", "lcb", "humaneval", "code_interpreter"} <= set(env_ids)
    builtin = set(builtin_env_ids())  # the reasoning_gym/ and games/ families roll out in tests/envs_contrib
    missing = builtin - set(BUILTIN_ROWS) - {r["env_class"] for r in BUILT_IN_ROWS}
    assert not missing, f"built-in envs without a rollout row: {sorted(missing)}"
    rows = [BUILTIN_ROWS[env_id][0] for env_id in env_ids]
    with retrieval_server() as url:
        search_config = {"search_url": url, "retry_attempts": 1}
        config = RolloutConfig(
            max_turns=2, check_drift=True,
            env_configs={"search": search_config, "searchcode": search_config},
            sampling_params={"max_generate_length": 24, "temperature": 0.0, "logprobs": True},
        )
        generator = RolloutGenerator(smollm2_engine, tokenizer, config)
        trajectories = await generator.run_rows(rows, n_samples_per_prompt=1)
        generator.close()
    assert sorted(t.env_class for t in trajectories) == env_ids
    assert_no_template_drift(trajectories, generator.chat)
    for t in trajectories:
        assert t.error is None, f"{t.env_class}: {t.error}"
        response, mask = t.response_ids(), t.response_loss_mask()
        assert len(response) == len(mask) == len(t.per_token_rewards())
        assert sum(mask) > 0 and 1 <= t.num_turns <= 2
        if t.num_turns == 2:  # the env answered: its observation tokens are in the response, masked out
            assert 0 in mask
