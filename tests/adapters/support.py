"""Test envs and a scripted engine for the rollout tests.

``ScriptedEngine`` is a unit-test double: it answers with fixed texts, so bookkeeping tests can assert exact
token positions. Every behaviour it stands in for is also tested with real models (tiny random ones and the
embedded SmolLM2) in the same test modules.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from skygym_adapters.engines.base import BaseInferenceEngine, assemble_output, resolve_sampling, SequenceResult
from skyrl_gym import registration
from skyrl_gym.core import StepOutput
from skyrl_gym.envs.base_text_env import BaseTextEnv


class CountdownTurnsEnv(BaseTextEnv):
    """Runs ``extras["turns"]`` turns (default 3); turn k earns reward k; observation "obs k"."""

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.total = int(self.extras.get("turns", 3))
        self.sleep_s = float(self.extras.get("sleep_s", 0.0))
        self.actions: List[str] = []

    def step(self, action: str) -> StepOutput:
        if self.sleep_s:
            time.sleep(self.sleep_s)  # a blocking env (a tool call, a sandbox)
        self.turns += 1
        self.actions.append(action)
        done = self.turns >= self.total
        observations = [] if done else [{"role": "user", "content": f"obs {self.turns}"}]
        return StepOutput(observations=observations, reward=float(self.turns), done=done, metadata={})

    def get_metrics(self) -> Dict[str, Any]:
        return {"turns_taken": self.turns}


class FailingEnv(BaseTextEnv):
    """Raises in step number ``extras["fail_at"]`` (1-based)."""

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.fail_at = int(self.extras.get("fail_at", 1))

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        if self.turns >= self.fail_at:
            raise RuntimeError(f"tool crashed at turn {self.turns}")
        return StepOutput(observations=[{"role": "user", "content": "go on"}], reward=0.5, done=False, metadata={})


class MalformedEnv(BaseTextEnv):
    """Misbehaves without raising: ``extras["mode"]`` "bad_reward" returns reward None, "bad_init" a string prompt."""

    def init(self, prompt: Any = None) -> Any:
        if self.extras.get("mode") == "bad_init":
            return "not a conversation", {}
        return super().init(prompt)

    def step(self, action: str) -> StepOutput:
        return {"observations": [], "reward": None, "done": True, "metadata": {}}  # type: ignore[typeddict-item]


TEST_ENVS = {"test_countdown_turns": CountdownTurnsEnv, "test_failing": FailingEnv, "test_malformed": MalformedEnv}


def register_test_envs() -> None:
    for env_id, cls in TEST_ENVS.items():
        if not dict.__contains__(registration.registry, env_id):
            registration.register(env_id, entry_point=cls)


Reply = Union[str, Callable[[List[int]], str]]


class ScriptedEngine(BaseInferenceEngine):
    """Answers each prompt with the next scripted text (cycling), tokenized, plus EOS unless a stop string or the
    length limit ends it first. Honors ``max_generate_length`` and ``stop`` like vLLM with
    ``include_stop_str_in_output``. Logprobs are a constant -0.5."""

    def __init__(self, tokenizer: Any, replies: Sequence[Reply], add_eos: bool = True) -> None:
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.add_eos = add_eos
        self.calls = 0
        self.prompts: List[List[int]] = []

    async def generate(self, prompt_token_ids: List[List[int]], sampling_params: Optional[Dict[str, Any]] = None,
                       *, messages: Any = None, session_ids: Any = None):
        sampling = resolve_sampling(sampling_params)
        results = []
        for prompt in prompt_token_ids:
            reply = self.replies[self.calls % len(self.replies)]
            self.calls += 1
            self.prompts.append(list(prompt))
            text = reply(prompt) if callable(reply) else reply
            reason = "stop"
            cut = [text.index(s) + len(s) for s in sampling.stop if s in text]
            ids = self.tokenizer.encode(text[: min(cut)] if cut else text, add_special_tokens=False)
            if not cut and self.add_eos:
                ids = ids + [self.tokenizer.eos_token_id]
            if len(ids) > sampling.max_tokens:
                ids, reason = ids[: sampling.max_tokens], "length"
            results.append(
                SequenceResult(
                    token_ids=ids,
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    stop_reason=reason,
                    logprobs=[-0.5] * len(ids),
                )
            )
        return assemble_output(results, sampling.logprobs)

    async def update_weights(self, named_tensors: Any) -> None:
        """Scripts have no weights."""


def user(text: str) -> List[Dict[str, str]]:
    return [{"role": "user", "content": text}]
