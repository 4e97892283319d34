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

The other families' partial credit is their own and is kept (each family's ``score_answer`` in reasoning-gym
says how it pays; the README beside this module lists what the attacker's pass found paid and left).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple


def shortcut(dataset: str, answer: str, entry: Mapping[str, Any], reward: float) -> Optional[Tuple[float, str]]:
    """``(reward paid, why)`` where reasoning-gym's ``reward`` for ``answer`` pays a reply that skips the task of
    ``dataset``; None where its reward stands."""
    if dataset == "game_of_life_halting":
        truth = str(entry.get("answer")).strip().lower()
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


def _restates_a_premise(answer: str, entry: Mapping[str, Any]) -> bool:
    from reasoning_gym.logic.propositional_logic import Expression

    premises = (entry.get("metadata") or {}).get("premises") or []
    try:
        said = str(Expression.from_string(answer))
        return any(said == str(Expression.from_string(premise)) for premise in premises)
    except (ValueError, KeyError, AttributeError, IndexError, TypeError):
        return False
