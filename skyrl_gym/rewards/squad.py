"""SQuAD-style answer normalisation and exact match (as used by Search-R1 and SkyRL-gym's search env)."""

from __future__ import annotations

import re
import string
from typing import Iterable, Union

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = str(text).lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, targets: Union[str, Iterable[str]]) -> bool:
    """Whether the normalised prediction equals any normalised target."""
    if isinstance(targets, str):
        targets = [targets]
    normalized = normalize_answer(prediction)
    return any(normalized == normalize_answer(target) for target in targets)
