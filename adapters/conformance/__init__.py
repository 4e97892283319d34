"""Adapter conformance kit: the same scripted actions through every adapter, the same results expected.

For an env and a few rows, each with a script of assistant texts, the kit plays every episode

* directly against the env (the reference: per-turn rewards, turns, observations),
* through the bundled rollout loop (:mod:`skygym_adapters.rollout`) with a scripted engine,
* through veRL's own ``AgentLoopWorker`` and our ``skyrl_gym_agent`` loop (when ``verl`` is installed),
* through the TRL adapter's rollout and reward functions (when ``trl`` is installed),
* through the Gymnasium bridge (when ``gymnasium`` is installed),
* through the OpenAI-chat adapter (``<tool_call>`` actions travel as native tool calls),

and checks that each adapter ran, gave the same rewards turn by turn, took the same number of turns,
and (for adapters that produce tokens) built a well-formed mask: one run of 1s per assistant turn that
decodes to exactly the scripted text, 0s on everything the env said. :func:`format_table` prints the
adapter x check table; ``skyrl-gym conform ENV`` does it from the command line.

* :mod:`skygym_adapters.conformance.kit`: cases, reference play, checks, report (imports no other module here);
* :mod:`skygym_adapters.conformance.adapters`: the adapters driven;
* :mod:`skygym_adapters.conformance.cases`: built-in cases for every built-in env, with their resources;
* :mod:`skygym_adapters.conformance.runner`: ``run_conformance`` and ``builtin_cases``, which use all three.

Adapters are small classes with ``name``, ``produces_tokens``, ``available()`` and
``run(cases, context, references)``; pass your own to :func:`run_conformance` to check another trainer.
"""

from skygym_adapters.conformance.kit import (
    CHECKS,
    AdapterReport,
    Case,
    ConformanceAdapter,
    ConformanceReport,
    Context,
    Reference,
    Run,
    cases_from_rows,
    format_table,
    play_reference,
)
from skygym_adapters.conformance.adapters import (
    GymnasiumAdapter,
    OpenAIAdapter,
    RolloutAdapter,
    TrlAdapter,
    VerlAdapter,
    default_adapters,
)
from skygym_adapters.conformance.cases import builtin_case_set, has_builtin_cases, reference_cases
from skygym_adapters.conformance.runner import BadCases, builtin_cases, check_cases, run_conformance

__all__ = [
    "CHECKS",
    "AdapterReport",
    "BadCases",
    "Case",
    "ConformanceAdapter",
    "ConformanceReport",
    "Context",
    "GymnasiumAdapter",
    "OpenAIAdapter",
    "Reference",
    "RolloutAdapter",
    "Run",
    "TrlAdapter",
    "VerlAdapter",
    "builtin_case_set",
    "builtin_cases",
    "check_cases",
    "reference_cases",
    "cases_from_rows",
    "default_adapters",
    "format_table",
    "has_builtin_cases",
    "play_reference",
    "run_conformance",
]
