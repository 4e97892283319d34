"""veRL's own agent-loop worker rolls out skyrl_gym envs through our registered loop.

The rows go the way they go in a veRL run: converted to veRL Parquet, read by veRL's ``RLHFDataset``,
collated, and handed to ``AgentLoopWorker.generate_sequences``, which picks the loop by each row's
``agent_name`` and pads the results. Generation is served by ``EngineServerManager`` (veRL's
server-manager interface) over a scripted engine or a tiny transformers model; no Ray, no vLLM.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import List

import pytest

pytest.importorskip("verl", reason="needs the 'verl' extra, in a venv of its own: nox -s verl")
pytestmark = pytest.mark.verl

import skyrl_gym  # noqa: E402
from skygym_adapters.scripted import ScriptedEngine  # noqa: E402
from skygym_adapters.verl.local import compose_config, generate_sequences, load_batch  # noqa: E402
from skygym_adapters.verl.rows import rows_to_verl  # noqa: E402
from skygym_adapters.verl.server import EngineServerManager  # noqa: E402
from skyrl_gym.data import write_parquet  # noqa: E402
from skyrl_gym.envs.gsm8k.dataset import gsm8k_rows  # noqa: E402
from skyrl_gym.envs.gsm8k.multi_turn_env import LAST_TURN_MESSAGE, RETRY_MESSAGE  # noqa: E402

PROMPT_LENGTH = 384
AGENT_LOOP_YAML = Path(__file__).resolve().parents[3] / "examples" / "verl" / "agent_loop.yaml"


def _config(model_dir, response_length: int, extra=()):
    return compose_config(
        model_dir,
        [
            f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={response_length}",
            "actor_rollout_ref.rollout.name=vllm",
            *extra,
        ],
    )


def _segments(mask: List[int]) -> List[tuple]:
    """Runs of equal mask values: [(value, start, end), ...]."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def _sample(output, i, tokenizer):
    """Response ids, mask and logprobs of sample ``i`` without padding."""
    length = int(output.batch["attention_mask"][i, PROMPT_LENGTH:].sum())
    ids = output.batch["responses"][i, :length].tolist()
    mask = output.batch["response_mask"][i, :length].tolist()
    return ids, mask, length


def test_multi_turn_env_episode_with_scripted_actions(tmp_path, gsm8k_test_file, tiny_model_dir, tokenizer):
    rows = list(gsm8k_rows(gsm8k_test_file, limit=3, env_class="gsm8k_multi_turn"))
    for row in rows:
        row["max_turns"] = 3
    truth = [row["reward_spec"]["ground_truth"] for row in rows]
    scripts = {
        rows[0]["extra_info"]["question"]: ["I think #### 1", "maybe #### 2", f"#### {truth[0]}"],
        rows[1]["extra_info"]["question"]: [f"easy: #### {truth[1]}"],
        rows[2]["extra_info"]["question"]: ["veRL's own single-turn loop answers this one"],
    }
    verl_rows = rows_to_verl(rows)
    verl_rows[2]["agent_name"] = "single_turn_agent"  # per-row choice of the loop
    path = write_parquet(verl_rows, tmp_path / "train.parquet")
    config = _config(tiny_model_dir, response_length=256)
    batch = load_batch(path, config, tokenizer)
    engine = ScriptedEngine(tokenizer, scripts)

    output = asyncio.run(generate_sequences(config, EngineServerManager(engine), batch))
    extra = output.non_tensor_batch

    # Row 0: two formatted wrong answers (0.2 / 3 each), then the right one; the episode reward is their sum.
    assert list(extra["turn_scores"][0]) == pytest.approx([0.2 / 3, 0.2 / 3, 1.0])
    assert extra["assistant_turns"][0] == 3
    assert extra["__num_turns__"][0] == 1 + 3 + 2  # prompt, 3 assistant turns, 2 env messages
    assert extra["skyrl_gym_reward"][0] == pytest.approx(1.0 + 0.4 / 3)
    ids, mask, length = _sample(output, 0, tokenizer)

    # Mask 1 exactly on the model's tokens (the scripted actions and their end-of-turn token), 0 on the env's.
    runs = _segments(mask)
    model_runs = [(s, e) for v, s, e in runs if v == 1]
    env_runs = [(s, e) for v, s, e in runs if v == 0]
    assert [tokenizer.decode(ids[s:e], skip_special_tokens=True) for s, e in model_runs] == scripts[
        rows[0]["extra_info"]["question"]
    ]
    env_texts = [tokenizer.decode(ids[s:e]) for s, e in env_runs]
    assert len(env_texts) == 2 and RETRY_MESSAGE in env_texts[0] and LAST_TURN_MESSAGE in env_texts[1]
    # Each turn's reward sits on the last token of that turn.
    assert list(extra["turn_reward_positions"][0]) == [e - 1 for s, e in model_runs]
    # Logprobs were asked for (veRL's calculate_log_probs); scripted tokens are certain (log p = 0).
    assert output.batch["rollout_log_probs"].shape == output.batch["responses"].shape

    # Row 1: right at once, one turn, all tokens trained on.
    assert list(extra["turn_scores"][1]) == [1.0] and extra["assistant_turns"][1] == 1
    assert set(_sample(output, 1, tokenizer)[1]) == {1}

    # Row 2 went through veRL's own loop: no env reward yet (veRL's reward workers score it later), so
    # veRL leaves rm_scores for the reward stage.
    assert extra["skyrl_gym_reward"][2] is None
    assert extra["__num_turns__"][2] == 2
    assert "rm_scores" not in output.batch.keys()
    assert engine.turns == {key: len(actions) for key, actions in scripts.items()}


def test_tiny_model_rollout_registered_from_the_example_agent_loop_file(
    tmp_path, gsm8k_test_file, tiny_model_dir, tokenizer
):
    """A real transformers model generates; the loop is found through examples/verl/agent_loop.yaml."""
    from skygym_adapters.engines.hf import HFEngine

    rows = list(gsm8k_rows(gsm8k_test_file, limit=2, env_class="gsm8k_multi_turn"))
    for row in rows:
        row["max_turns"] = 2
    path = write_parquet(rows_to_verl(rows), tmp_path / "train.parquet")
    loop_file = tmp_path / "agent_loop.yaml"
    loop_file.write_text(AGENT_LOOP_YAML.read_text().replace("max_tokens_per_turn: null", "max_tokens_per_turn: 12"))
    config = _config(
        tiny_model_dir, response_length=160, extra=[f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_file}"]
    )
    batch = load_batch(path, config, tokenizer)
    engine = HFEngine(str(tiny_model_dir))
    server = EngineServerManager(engine)

    output = asyncio.run(generate_sequences(config, server, batch))

    extra = output.non_tensor_batch
    assert server.calls == 4  # two turns for each of the two rows
    for i in range(2):
        ids, mask, _ = _sample(output, i, tokenizer)
        assert extra["assistant_turns"][i] == 2 and extra["skyrl_gym_error"][i] is None
        assert len(extra["turn_scores"][i]) == 2
        values = [v for v, _, _ in _segments(mask)]
        assert values == [1, 0, 1], values  # model turn, env message, model turn
        env_start, env_end = [(s, e) for v, s, e in _segments(mask) if v == 0][0]
        assert LAST_TURN_MESSAGE in tokenizer.decode(ids[env_start:env_end])
        # Each model turn is at most 12 tokens; logprobs are real (negative) on model tokens, 0 on env tokens.
        assert all(e - s <= 12 + 1 for v, s, e in _segments(mask) if v == 1)
        logprobs = output.batch["rollout_log_probs"][i, : len(mask)].tolist()
        assert all(lp < 0 for lp, m in zip(logprobs, mask) if m == 1)
        assert all(lp == 0 for lp, m in zip(logprobs, mask) if m == 0)
        # Every row ran in an env, so veRL placed each episode reward on the last response token.
        rm_scores = output.batch["rm_scores"][i]
        assert float(rm_scores[len(mask) - 1]) == pytest.approx(sum(extra["turn_scores"][i]))
        assert int((rm_scores != 0).sum()) <= 1


class _StepRaises(skyrl_gym.BaseTextEnv):
    def step(self, action):
        raise RuntimeError("the database went away")


def test_an_env_that_raises_ends_its_own_episode_not_the_batch(tmp_path, tiny_model_dir, tokenizer):
    skyrl_gym.register(id="test_verl_step_raises", entry_point=_StepRaises)
    try:
        rows = [
            {"data_source": "t", "prompt": [{"role": "user", "content": "broken env row"}], "env_class": "test_verl_step_raises",
             "reward_spec": {"method": "rule", "ground_truth": "1"}},
            {"data_source": "t", "prompt": [{"role": "user", "content": "good env row"}], "env_class": "gsm8k",
             "reward_spec": {"method": "rule", "ground_truth": "4"}},
            {"data_source": "t", "prompt": [{"role": "user", "content": "row without ground truth"}], "env_class": "gsm8k"},
            {"data_source": "t", "prompt": [{"role": "user", "content": "row of an unknown env"}], "env_class": "gsm9k",
             "reward_spec": {"method": "rule", "ground_truth": "4"}},
        ]
        path = write_parquet(rows_to_verl(rows), tmp_path / "rows.parquet")
        config = _config(tiny_model_dir, response_length=64)
        batch = load_batch(path, config, tokenizer)
        engine = ScriptedEngine(tokenizer, {"broken env row": ["#### 1"], "good env row": ["#### 4"]})
        output = asyncio.run(generate_sequences(config, EngineServerManager(engine), batch))
    finally:
        skyrl_gym.deregister("test_verl_step_raises")
    extra = output.non_tensor_batch
    assert "RuntimeError: the database went away" in extra["skyrl_gym_error"][0]
    assert extra["skyrl_gym_reward"][0] == 0.0 and extra["stop"][0] == "error"
    assert extra["skyrl_gym_error"][1] is None and extra["skyrl_gym_reward"][1] == 1.0
    # Rows the env cannot start from: no model call, reward 0, the reason recorded.
    assert "ground_truth" in extra["skyrl_gym_error"][2] and extra["assistant_turns"][2] == 0
    assert "gsm9k" in extra["skyrl_gym_error"][3] and extra["skyrl_gym_reward"][3] == 0.0
    assert engine.turns == {"broken env row": 1, "good env row": 1}
