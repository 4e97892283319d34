"""Replies that skip a task yet earn reasoning-gym's reward, and what the env pays for them instead.

An attacker's pass over every family (3 rows each, about 60 hedges) found scorers whose own rules pay a reply that
does not do the task far more than a wrong answer (reasoning-gym 0.1.25):

* ``game_of_life_halting`` tests ``bool(answer) == bool(entry["answer"])``; the entry's answer is the text "True"
  or "False", both truthy, so any non-empty text earned 1.0. Only the right word is paid here.
* ``game_of_life`` pays the share of cells right; most cells of the final board are dead, so an all-dead board of
  the right shape earned about 0.97. Only the exact board is paid.
* ``prime_factorization`` pays 0.5 for factors whose product is the number: the number itself, or ``1 × n``.
  Only the factorization is paid.
* ``propositional_logic`` pays 1.0 for any valid conclusion that is not a tautology, and every premise is one: a
  premise copied from the question earned 1.0. A restated premise is not paid.

A second pass (session 42) found five more:

* a ``NaN`` in the answer compares as no number does: ``complex_arithmetic`` paid 1.0 for ``nan`` (``min(1.0, nan)``
  is 1.0) and ``number_sorting`` for a list of ``NaN`` (no difference from the truth is ever over the tolerance).
  An answer that names NaN where the truth does not is not paid.
* ``coin_flip``'s partial credit is the share of the shorter number's digits that the two numbers share from the
  start, so any prefix of the truth earned 1.0: ``0`` for 0.98046875. A wrong probability is paid the share of the
  longer one's (``0`` earns 0.1 there).
* ``gsm_symbolic`` reads the first number of the answer without its sign: ``-642`` and ``642/7`` earned 1.0 for
  642. Only an answer that is the number is paid.
* ``knights_knaves`` pays 0.3 + 0.7 x (the share of people whose role is right) to an answer that names as many
  roles as there are people, so naming one person both roles (``Mason is a sage, Mason is a fool``) earned 0.65 on
  any two-person puzzle. An answer that gives someone two roles is not paid.

A third pass (session 44) found that ``knights_knaves``' partial credit alone is a shortcut: it pays 0.3 + 0.7 x
the share of roles right to any answer with one role right, so naming everyone the truthful role (read from the
question) earned 0.65 on average over 40 rows. Only an answer with every role right is paid.

The other families' partial credit is their own and is kept (each family's ``score_answer`` in reasoning-gym
says how it pays; the README beside this module lists what the attacker's pass found paid and left).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Mapping, Optional, Tuple

_NAN = re.compile(r"(?i)\bnan\b")
_NUMBER = re.compile(r"\s*[-+]?\d+(\.\d+)?\s*")


def shortcut(dataset: str, answer: str, entry: Mapping[str, Any], reward: float) -> Optional[Tuple[float, str]]:
    """``(reward paid, why)`` where reasoning-gym's ``reward`` for ``answer`` pays a reply that skips the task of
    ``dataset``; None where its reward stands."""
    truth = str(entry.get("answer"))
    if reward > 0 and _NAN.search(answer) and not _NAN.search(truth):
        return 0.0, "the answer names NaN, which compares as no number does (reasoning-gym's scorer paid it): not paid"
    if dataset == "coin_flip" and reward > 0:
        return _coin_flip(answer, truth, reward)
    if dataset == "gsm_symbolic" and reward >= 1.0 and not _is_the_number(answer, truth):
        return 0.0, (f"{answer[:100]!r} is not the number {truth!r} (reasoning-gym's scorer reads the first number in "
                     "it, without its sign): only the number is paid")
    if dataset == "knights_knaves" and reward > 0 and _someone_has_two_roles(answer):
        return 0.0, "the answer gives someone two roles (that pays a share of the credit whatever the truth): not paid"
    if dataset == "knights_knaves" and 0 < reward < 1:
        return 0.0, (f"reasoning-gym scored {reward:g}: 0.3 + 0.7 x the share of roles right; not paid (everyone named "
                     "the truthful role, read from the question alone, earned 0.65 on average): only every role right is")
    if dataset == "game_of_life_halting":
        truth = truth.strip().lower()
        if reward > 0 and answer.strip().lower() != truth:
            return 0.0, (f"{answer[:100]!r} is not {truth.capitalize()!r}: reasoning-gym's scorer pays any non-empty "
                         "answer here (the truth of the text), so only the right word is paid")
    elif dataset == "game_of_life" and 0 < reward < 1:
        return 0.0, (f"reasoning-gym scored {reward:g} for the share of cells right; not paid (an all-dead board of "
                     "the right shape earned about 0.97): only the exact board is")
    elif dataset == "prime_factorization" and 0 < reward < 1 and reward != 0.01:
        return 0.0, ("the factors' product is the number but they are not its prime factorization (the number itself "
                     "earned reasoning-gym's 0.5 for that): not paid")
    elif dataset == "propositional_logic" and reward > 0 and _restates_a_premise(answer, entry):
        return 0.0, "the answer restates a premise of the question (every premise is a valid conclusion): not paid"
    return None


def _coin_flip(answer: str, truth: str, reward: float) -> Optional[Tuple[float, str]]:
    """``coin_flip``'s reward kept where the answer is the probability (within its scorer's 1e-4), else the share of
    the longer number's digits the two share from the start."""
    try:
        said, right = (float(Fraction(text.replace(",", ""))) for text in (answer, truth))
    except (ValueError, ZeroDivisionError):
        return None
    if abs(said - right) <= 1e-4:
        return None
    said_text, right_text = f"{said:.10g}", f"{right:.10g}"
    shared = next((i for i, (a, b) in enumerate(zip(said_text, right_text)) if a != b),
                  min(len(said_text), len(right_text)))
    credit = shared / max(len(said_text), len(right_text))
    if credit >= reward:
        return None
    return credit, (f"{answer[:100]!r} is not {truth!r}; reasoning-gym's {reward:g} for the digits it shares with it "
                    f"counted the shorter number's (any prefix earned 1.0): paid {credit:g}, the longer one's")


def _is_the_number(answer: str, truth: str) -> bool:
    try:
        return bool(_NUMBER.fullmatch(answer)) and float(answer) == float(truth)
    except ValueError:
        return False


def _someone_has_two_roles(answer: str) -> bool:
    from reasoning_gym.logic.knights_knaves import KnightsKnavesDataset

    names = [name for name, _ in KnightsKnavesDataset._normalize_answer(answer)]
    return len(names) != len(set(names))


def _restates_a_premise(answer: str, entry: Mapping[str, Any]) -> bool:
    from reasoning_gym.logic.propositional_logic import Expression

    premises = (entry.get("metadata") or {}).get("premises") or []
    try:
        said = str(Expression.from_string(answer))
        return any(said == str(Expression.from_string(premise)) for premise in premises)
    except (ValueError, KeyError, AttributeError, IndexError, TypeError):
        return False
