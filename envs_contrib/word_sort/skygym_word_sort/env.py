"""The 'word_sort' env: put a few words in alphabetical order; the answer goes in <answer>...</answer>."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from skyrl_gym import BaseTextEnv, StepOutput
from skyrl_gym.errors import DataError
from skyrl_gym.tools.parsers import extract_tag


def parse_words(text: str) -> List[str]:
    """The words of an answer, split on commas or whitespace, lower-cased."""
    return [word.lower() for word in re.split(r"[,\s]+", text.strip()) if word]


class WordSortEnv(BaseTextEnv):
    """Sort words alphabetically in up to two tries: 1.0 for the words in order in <answer>...</answer>,
    0.0 otherwise with the reason (missing or extra words, or the first pair out of order)."""

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        words = ((extras or {}).get("reward_spec") or {}).get("ground_truth")
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w for w in words):
            raise DataError(
                "env 'word_sort': reward_spec.ground_truth must be the list of words to sort; "
                "build rows with skyrl_gym.datasets.build_rows('word_sort', size=N)"
            )
        self.words = [word.lower() for word in words]
        self.max_turns = 2

    def judge(self, answer: Optional[str]) -> Optional[str]:
        """Why ``answer`` is wrong, or None when it is right."""
        if answer is None:
            return "no complete <answer>...</answer> block"
        given = parse_words(answer)
        if sorted(given) != sorted(self.words):
            missing = sorted(set(self.words) - set(given))
            extra = sorted(set(given) - set(self.words))
            parts = [f"missing {', '.join(missing)}"] if missing else []
            parts += [f"not in the list: {', '.join(extra)[:100]}"] if extra else []
            return "; ".join(parts) or "each word must appear as often as in the list"
        for first, second in zip(given, given[1:]):
            if first > second:
                return f"{first!r} comes after {second!r} alphabetically"
        return None

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        answer = extract_tag(action if isinstance(action, str) else "", "answer")
        reason = self.judge(answer)
        metadata: Dict[str, Any] = {"answer": answer}
        if reason:
            metadata["reason"] = reason
        correct = reason is None
        done = correct or self.turns >= self.max_turns
        hint = f"Not quite: {reason}. Try again, in <answer>...</answer>."
        retry = [] if done else [{"role": "user", "content": hint}]
        return StepOutput(observations=retry, reward=float(correct), done=done, metadata=metadata)
