"""Reward functions: pure, fast, and safe on adversarial text.

* :mod:`.gsm8k` — GSM8K strict (``#### N``) and flexible (last number) scoring;
* :mod:`.boxed` — ``\\boxed{...}`` extraction with nested braces;
* :mod:`.normalize` — Minerva-style normalisation of final answers;
* :mod:`.math` — mathematical equivalence with ``math-verify``, bounded in time;
* :mod:`.squad` — SQuAD-style answer normalisation and exact match.
"""

from skyrl_gym.rewards.boxed import last_boxed_content, last_boxed_only_string, remove_boxed
from skyrl_gym.rewards.gsm8k import compute_score as gsm8k_score
from skyrl_gym.rewards.gsm8k import extract_solution as gsm8k_extract
from skyrl_gym.rewards.normalize import normalize_final_answer
from skyrl_gym.rewards.squad import exact_match, normalize_answer

__all__ = [
    "gsm8k_score",
    "gsm8k_extract",
    "last_boxed_content",
    "last_boxed_only_string",
    "remove_boxed",
    "normalize_final_answer",
    "exact_match",
    "normalize_answer",
]
