"""An inference engine that answers with scripted texts: the same actions through every adapter.

The conformance kit uses it to push one fixed sequence of actions through the bundled rollout, veRL's
agent-loop worker and the other adapters, and compare what each makes of it. It is a real
token-in/token-out engine: it tokenizes each scripted text with the model's tokenizer and ends it with
the end-of-turn token, exactly as a model's sampled ids would arrive.

Each script is keyed by a string that occurs in its episode's prompt (usually the first user message);
the engine finds the script whose key the decoded prompt contains and answers with its next action.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from skygym_adapters.engines.base import BaseInferenceEngine
from skygym_adapters.types import InferenceEngineOutput, SamplingParams


def end_of_turn_token_id(tokenizer: Any) -> int:
    """The token that closes an assistant turn in the tokenizer's chat template (``<|im_end|>`` for ChatML),
    which is not always ``eos_token_id`` (tokenizers converted from GGUF may name ``<|im_start|>`` as EOS)."""
    from skygym_adapters.rollout.chat import ChatTokenizer

    return ChatTokenizer(tokenizer).turn_end_token_id


class ScriptError(LookupError):
    """The engine got a prompt that matches no script, or a script ran out of actions."""


class ScriptedEngine(BaseInferenceEngine):
    def __init__(self, tokenizer: Any, scripts: Mapping[str, Sequence[str]], end_token_id: Optional[int] = None):
        self.tokenizer = tokenizer
        self.scripts: Dict[str, List[str]] = {key: list(actions) for key, actions in scripts.items()}
        if not self.scripts:
            raise ValueError("ScriptedEngine needs at least one script")
        self.end_token_id = end_token_id if end_token_id is not None else end_of_turn_token_id(tokenizer)
        self.turns: Dict[str, int] = {key: 0 for key in self.scripts}
        # Longest key first, so a key that contains another one wins.
        self._keys = sorted(self.scripts, key=len, reverse=True)

    def reset(self) -> None:
        """Start every script again from its first action (before the next adapter runs)."""
        self.turns = {key: 0 for key in self.scripts}

    def _script_for(self, prompt_ids: Sequence[int]) -> str:
        text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        for key in self._keys:
            if key in text:
                return key
        raise ScriptError(f"no script matches the prompt ending in {text[-120:]!r}")

    def next_text(self, prompt_ids: Sequence[int]) -> str:
        key = self._script_for(prompt_ids)
        turn = self.turns[key]
        actions = self.scripts[key]
        if turn >= len(actions):
            raise ScriptError(f"script {key[:40]!r} has {len(actions)} actions; turn {turn + 1} was asked for")
        self.turns[key] = turn + 1
        return actions[turn]

    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[SamplingParams] = None,
        *,
        messages: Optional[List[List[Dict[str, Any]]]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput:
        params = sampling_params or {}
        max_len = params.get("max_generate_length")
        response_ids: List[List[int]] = []
        responses: List[str] = []
        stop_reasons: List[str] = []
        for prompt in prompt_token_ids:
            text = self.next_text(prompt)
            ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [self.end_token_id]
            reason = "stop"
            if max_len is not None and len(ids) > max_len:
                ids, reason = ids[:max_len], "length"
            response_ids.append(ids)
            responses.append(self.tokenizer.decode(ids, skip_special_tokens=True))
            stop_reasons.append(reason)
        output: InferenceEngineOutput = {"response_ids": response_ids, "responses": responses, "stop_reasons": stop_reasons}
        # A scripted token is certain: log-probability 0.
        output["response_logprobs"] = [[0.0] * len(ids) for ids in response_ids] if params.get("logprobs") else None
        return output

    async def update_weights(self, named_tensors: Any) -> None:
        """Scripts have no weights."""


__all__ = ["ScriptedEngine", "ScriptError", "end_of_turn_token_id"]
