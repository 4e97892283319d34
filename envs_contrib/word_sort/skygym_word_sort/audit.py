"""The audit profile of the 'word_sort' env: how ``skyrl-gym audit word_sort`` reads its answers.

The answer of a row is its words in order, comma-separated (the golden reply, and what the answer hacks hide
among wrong ones); word_sort's own hacks give the right words in the wrong order or the wrong number."""

from skyrl_gym.audit import AuditProfile, Hack
from skyrl_gym.audit.profiles import ANSWER_TAG, text_profile


def _words(case):
    return list((case.row.get("reward_spec") or {}).get("ground_truth") or [])


def _as_given(case):
    words = _words(case)
    return ANSWER_TAG.reply(", ".join(words)) if words and words != sorted(words) else None


OWN_HACKS = (
    Hack("the words as given", "word_sort", _as_given, "the right words, not sorted"),
    Hack("the words in reverse order", "word_sort",
         lambda case: ANSWER_TAG.reply(", ".join(sorted(_words(case), reverse=True))) if len(_words(case)) > 1
         else None, "the right words, sorted backwards"),
    Hack("every word twice", "word_sort",
         lambda case: ANSWER_TAG.reply(", ".join(w for w in sorted(_words(case)) for _ in range(2))),
         "each word repeated, in order"),
)


def audit_profile(env_id: str) -> AuditProfile:
    answer_of = lambda row: ", ".join(sorted(row["reward_spec"]["ground_truth"]))  # noqa: E731
    return text_profile(ANSWER_TAG, answer_of=answer_of).with_hacks(*OWN_HACKS)
