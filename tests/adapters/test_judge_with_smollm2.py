"""The LLM judge with a real model: SmolLM2-135M-Instruct served over the OpenAI chat API by a process of its own.

A 135M model is a poor judge, so this checks the path, not the verdicts: whatever the model answers becomes a
reward in [0, 1] with the verdict in metadata, or reward 0 with a reason that says the answer could not be read;
the same episode scores the same twice (asked once: greedy answers are cached, readable or not).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import skyrl_gym

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_judge(embedded_model):  # skips, with the reason, where the embedded model is missing
    process = subprocess.Popen(
        [sys.executable, str(HERE / "smollm2_judge_server.py")],
        cwd=HERE.parents[1],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = process.stdout.readline().strip()
    assert port.isdigit(), f"the SmolLM2 judge server did not start (printed {port!r})"
    yield f"http://127.0.0.1:{port}/v1"
    process.terminate()
    process.wait(timeout=30)
    process.stdout.close()


def test_a_real_models_answers_become_rewards_or_readable_errors(smollm2_judge):
    config = {
        "judge": {"base_url": smollm2_judge, "model": "smollm2-135m", "max_tokens": 12, "cache_size": 77}
    }
    row = {
        "reward_spec": {
            "method": "judge",
            "ground_truth": "72",
            "rubric": "Answer with one line 'SCORE: 1' if the response says 72, else 'SCORE: 0'.",
        }
    }
    prompt = [
        {
            "role": "user",
            "content": "Natalia sold 48 clips in April and half as many in May. How many in all?",
        }
    ]
    outputs = []
    for _ in range(2):
        with skyrl_gym.make("gsm8k", env_config=config, extras=row) as env:
            env.init(prompt)
            outputs.append(env.step("She sold 48 + 24 = 72 clips.\n#### 72"))
    first, second = outputs
    verdict = first["metadata"]["judge"]
    assert 0.0 <= first["reward"] <= 1.0 and first["done"] is True
    assert verdict["text"].strip(), "the model answered nothing"
    if "judge_error" in first["metadata"]:  # the model's text had no readable score: said, not raised
        assert first["reward"] == 0.0
        assert any(
            reason in first["metadata"]["judge_error"]
            for reason in ("could not read a score", "outside [0, 1]")
        )
    else:
        assert first["reward"] == verdict["score"]
    assert second["metadata"]["judge"]["cached"] is True  # the same request is asked once
    assert second["reward"] == first["reward"] and second["metadata"].get("judge_error") == first[
        "metadata"
    ].get("judge_error")
