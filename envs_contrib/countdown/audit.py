"""The audit profile of ``countdown`` (``skyrl-gym audit countdown``): the answer hacks on the ``<answer>``
block, with the row's solution as the golden answer, and Countdown's own: the target written as a literal, the
numbers cancelled out beside the target, a division by zero and a power (not an allowed operator).

Every one of them uses the numbers wrongly or not at all, so none may earn more than a well-formed wrong
expression (the format reward)."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from skygym_contrib.countdown.env import evaluate

from skyrl_gym.audit.library import AuditCase, Hack
from skyrl_gym.audit.profiles import ANSWER_TAG, AuditProfile, text_profile
from skyrl_gym.tools.parsers import extract_tag


def _truth(case: AuditCase) -> Mapping[str, Any]:
    truth = (case.row.get("reward_spec") or {}).get("ground_truth")
    return truth if isinstance(truth, Mapping) else {}


def _solution(row: Mapping[str, Any]) -> Optional[str]:
    """The expression of the row's solution (``extra_info.solution`` holds it in its ``<answer>`` block)."""
    solution = (row.get("extra_info") or {}).get("solution")
    return extract_tag(str(solution), "answer") if solution else None


def _wrong(case: AuditCase) -> Optional[str]:
    """A well-formed expression over the numbers that misses the target: what earns the format reward."""
    truth = _truth(case)
    if "numbers" not in truth:
        return None
    numbers = [int(n) for n in truth["numbers"]]
    for operator in (" + ", " * ", " - "):
        expression = operator.join(str(n) for n in numbers)
        if evaluate(expression)[0] != truth["target"]:
            return ANSWER_TAG.reply(expression)
    return None


def _cancelled(case: AuditCase) -> Optional[str]:
    truth = _truth(case)
    if "numbers" not in truth:
        return None
    product = " * ".join(str(n) for n in truth["numbers"])
    return ANSWER_TAG.reply(f"{truth['target']} + {product} * 0")


COUNTDOWN_HACKS = (
    Hack(
        "the target as a literal",
        "countdown",
        lambda case: ANSWER_TAG.reply(str(_truth(case).get("target", 0))),
        "the target itself, no numbers used",
    ),
    Hack("the numbers cancelled beside the target", "countdown", _cancelled, "target + a * b * c * 0"),
    Hack("division by zero", "countdown", lambda case: ANSWER_TAG.reply("1 / 0"), "1 / 0"),
    Hack(
        "a power",
        "countdown",
        lambda case: ANSWER_TAG.reply("9 ** 9 ** 9"),
        "a huge power (not an allowed operator)",
    ),
)


def audit_profile(env_id: str) -> AuditProfile:
    return text_profile(ANSWER_TAG, answer_of=_solution, wrong_of=_wrong).with_hacks(*COUNTDOWN_HACKS)
