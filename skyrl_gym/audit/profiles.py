"""Audit profiles: for each env, how it reads an answer, which hacks fit it, and where its golden positives
come from.

:func:`profile_for` finds an env's profile, first match wins:

1. an entry point in the ``skyrl_gym.audits`` group named after the env id (or its family, ``games/``), whose
   value is an :class:`AuditProfile` or a callable ``(env_id) -> AuditProfile``;
2. a module ``audit`` beside the env's entry point module (``my_pkg/audit.py`` for ``my_pkg.env:MyEnv``) with
   a function ``audit_profile(env_id) -> AuditProfile``;
3. the profiles of the built-in text envs below;
4. a plain-text profile (the reply is the answer) with the generic hacks.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from skyrl_gym.audit.library import (
    ANSWER_HACKS,
    LATEX_HACKS,
    NORMALISER_HACKS,
    SIZE_HACKS,
    TOOL_HACKS,
    AnswerFormat,
    AuditCase,
    Hack,
    Script,
    wrong_answer,
)

ENTRY_POINT_GROUP = "skyrl_gym.audits"
AUDIT_MODULE = "audit"


def ground_truth_text(row: Mapping[str, Any]) -> Optional[str]:
    """The row's answer as text: ``reward_spec.ground_truth`` (or ``reward_model``'s) when it is a string or a
    number, the first ``target`` of a ``{"target": [...]}`` ground truth; else None."""
    for field in ("reward_spec", "reward_model"):
        spec = row.get(field)
        truth = spec.get("ground_truth") if isinstance(spec, Mapping) else None
        if isinstance(truth, Mapping) and isinstance(truth.get("target"), list) and truth["target"]:
            truth = truth["target"][0]
        if isinstance(truth, bool):
            continue
        if isinstance(truth, (str, int, float)) and str(truth).strip():
            return str(truth)
    return None


def reference_action(row: Mapping[str, Any]) -> Optional[str]:
    """The row's own reference reply, as the checker reads it (``reference_action``, ``extra_info.answer`` or
    ``extra_info.solution``)."""
    from skyrl_gym.checker import reference_action as checker_reference_action

    return checker_reference_action(row)


@dataclasses.dataclass
class AuditProfile:
    """What the audit needs to know about one env.

    ``format``: how the env reads an answer. ``hacks``: the hacks to play. ``answer_of(row)``: the right
    answer as text (None: the env's answer is not a short text). ``golden_of(case)``: a reply or script that
    must earn ``full_reward`` (None: the row has no reference). ``wrong_of(case)``: a known-wrong reply or
    script (default: :meth:`wrong`); every hack must earn no more than the known-wrong replies do.
    ``wrong_answers_of(row, count)``: up to ``count`` wrong answers of the env's own kind (a game's legal moves
    that do not win), played as known-wrong replies and hidden among by the hedges (default: the answer with its
    digits or letters moved on, and numbers around it).
    ``rows(size, seed)``: rows to audit when none are given (default: the checker's
    :func:`~skyrl_gym.checker.default_rows`). ``env_config()``: the env_config to build envs with.
    ``unavailable()``: a reason the audit cannot run on this machine (no Docker engine), or None.
    """

    format: AnswerFormat
    hacks: Sequence[Hack]
    answer_of: Callable[[Mapping[str, Any]], Optional[str]] = ground_truth_text
    golden_of: Optional[Callable[[AuditCase], Optional[Script]]] = None
    wrong_of: Optional[Callable[[AuditCase], Optional[Script]]] = None
    wrong_answers_of: Optional[Callable[[Mapping[str, Any], int], List[str]]] = None
    rows: Optional[Callable[[int, int], List[Dict[str, Any]]]] = None
    env_config: Callable[[], Any] = dict
    unavailable: Callable[[], Optional[str]] = lambda: None
    full_reward: float = 1.0
    max_turns: int = 8  # an episode the env does not end is cut after this many turns
    source: str = ""  # where the profile came from (set by profile_for; the report prints it)

    def golden(self, case: AuditCase) -> Optional[Script]:
        if self.golden_of is not None:
            return self.golden_of(case)
        own = reference_action(case.row)
        if own is not None:
            return own
        return case.reply(case.answer) if case.answer is not None else None

    def wrong(self, case: AuditCase) -> List[Script]:
        """The known-wrong replies: the profile's own, else the answer format around a wrong answer, the wrong
        candidates the hacks hide the right answer among, and 0 (``?`` when the row has no answer). The bar is
        the most any of them earns, so a hedge must earn no more than its best wrong part alone."""
        if self.wrong_of is not None:
            own = self.wrong_of(case)
            return [] if own is None else [own]
        if case.wrong is None:  # the row has no answer to change: a reply that answers nothing of substance
            return [case.reply("?")]
        from skyrl_gym.audit.library import distractors

        answers = [case.wrong] + [
            d for d in distractors(case, 2) + ["0"] if d not in (case.wrong, case.answer)
        ]
        return [case.reply(answer) for answer in dict.fromkeys(answers)]

    def with_hacks(self, *hacks: Hack) -> "AuditProfile":
        """This profile with more hacks (an env's own, after the library's)."""
        return dataclasses.replace(self, hacks=tuple(self.hacks) + tuple(hacks))


def text_profile(fmt: AnswerFormat, *, latex: bool = False, normaliser_hacks: bool = False,
                 **fields: Any) -> AuditProfile:
    """A profile for an env that reads a short text answer: the answer, size (and LaTeX, tool) hacks;
    ``normaliser_hacks``: also LaTeX that Minerva's normaliser turns into the right answer's text but that names
    another value (not for an env whose reader is that normaliser)."""
    hacks: List[Hack] = (list(ANSWER_HACKS) + (list(LATEX_HACKS) if latex else [])
                         + (list(NORMALISER_HACKS) if normaliser_hacks else []) + list(SIZE_HACKS))
    if fmt.tool_call is not None:
        hacks += list(TOOL_HACKS)
    return AuditProfile(format=fmt, hacks=tuple(hacks), **fields)


HASHES = AnswerFormat("#### N", lambda a: f"Step by step, the result follows.\n#### {a}", "#### ")
BOXED = AnswerFormat("\\boxed{}", lambda a: f"So the answer is \\boxed{{{a}}}.", "\\boxed{}")
ANSWER_LINE = AnswerFormat("Answer: line", lambda a: f"Working omitted.\nAnswer: {a}", "Answer:")
ANSWER_TAG = AnswerFormat("<answer>", lambda a: f"<answer>{a}</answer>", "<answer></answer>")
PLAIN = AnswerFormat("plain text", lambda a: a, "")

# The built-in text envs (the code, SQL and SWE envs have an audit.py beside them).
BUILTIN: Dict[str, Callable[[], AuditProfile]] = {
    "gsm8k": lambda: text_profile(HASHES),
    "gsm8k_multi_turn": lambda: text_profile(HASHES),
    "math": lambda: text_profile(BOXED, latex=True, normaliser_hacks=True),
    "multiply": lambda: text_profile(BOXED, latex=True, normaliser_hacks=True),
    "aime": lambda: text_profile(ANSWER_LINE, latex=True),
    "code_interpreter": lambda: text_profile(
        dataclasses.replace(BOXED, tool_call="<tool><python>print(1)</python></tool>\n"), latex=True,
        normaliser_hacks=True),
    # the tool hacks reach no retrieval server: one short attempt each (the reward never needs one)
    "search": lambda: text_profile(
        dataclasses.replace(ANSWER_TAG, tool_call="<search>the answer</search>\n"),
        env_config=lambda: {"retry_attempts": 1, "timeout": 2.0},
    ),
    "searchcode": lambda: text_profile(
        AnswerFormat(
            "<solution>#### N</solution>",
            lambda a: f"<solution>#### {a}</solution>",
            "<solution></solution>",
            tool_call="<tool><python>print(1)</python></tool>\n",
        )
    ),
}


def _from_entry_points(env_id: str) -> Optional[AuditProfile]:
    from importlib.metadata import entry_points

    family = env_id.split("/", 1)[0] + "/" if "/" in env_id else None
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name in (env_id, family):
        if name and name in found:
            return _as_profile(found[name].load(), env_id, f"entry point {found[name].value}")
    return None


def _beside_env(env_id: str) -> Optional[AuditProfile]:
    from skyrl_gym.registration import spec

    entry_point = spec(env_id).entry_point
    module = (
        entry_point.partition(":")[0]
        if isinstance(entry_point, str)
        else getattr(entry_point, "__module__", None)
    )
    if not module or "." not in module:
        return None
    name = module.rpartition(".")[0] + "." + AUDIT_MODULE
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    if found is None:
        return None
    found_module = importlib.import_module(name)
    if not callable(getattr(found_module, "audit_profile", None)):
        raise ProfileError(
            f"{name} ({found_module.__file__}) is where the audit looks for the profile of {env_id!r}, and it "
            "defines no function audit_profile(env_id): add one (docs/audit.md), or rename the module if it is "
            "not an audit profile"
        )
    return _as_profile(found_module.audit_profile, env_id, f"audit_profile in {name}")


class ProfileError(ValueError):
    """An env's audit profile cannot be read: the message names the module or entry point and what is wrong."""


def _as_profile(value: Any, env_id: str, where: str) -> AuditProfile:
    profile = value if isinstance(value, AuditProfile) else value(env_id)
    if not isinstance(profile, AuditProfile):
        raise ProfileError(
            f"the audit profile of {env_id!r} from {where} is a {type(profile).__name__}, "
            "not a skyrl_gym.audit.AuditProfile (its audit_profile(env_id) must return one)"
        )
    return dataclasses.replace(profile, source=profile.source or where)


def profile_for(env_id: str) -> AuditProfile:
    """The audit profile of a registered env (see the module's docstring for where it comes from)."""
    from skyrl_gym.registration import spec

    env_id = spec(env_id).id
    for find in (_from_entry_points, _beside_env):
        profile = find(env_id)
        if profile is not None:
            return profile
    if env_id in BUILTIN:
        return dataclasses.replace(BUILTIN[env_id](), source="built in (skyrl_gym.audit.profiles)")
    return text_profile(PLAIN, source=FALLBACK_SOURCE)


FALLBACK_SOURCE = "plain text: the env has no audit profile"
FALLBACK_WARNING = (
    "the env has no audit profile (no skyrl_gym.audits entry point, no audit.py beside its env module), so every "
    "reply was plain text: if the env reads its answer from a format (tags, a box, a tool call), the wrong answers "
    "and hacks never reached its scoring, and this audit says little; add a profile (docs/audit.md)"
)


__all__ = [
    "AuditProfile",
    "profile_for",
    "text_profile",
    "ground_truth_text",
    "reference_action",
    "wrong_answer",
    "HASHES",
    "BOXED",
    "ANSWER_LINE",
    "ANSWER_TAG",
    "PLAIN",
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "ProfileError",
]


CODE_BLOCK = AnswerFormat(
    "fenced python code block", lambda code: f"```python\n{code}\n```", "```python\n```"
)


def code_profile(**fields: Any) -> AuditProfile:
    """A profile for an env that runs the reply's code against hidden tests: the code hacks, the empty and
    huge replies. A row's golden reply is its ``reference_action``; the known-wrong reply defines the function
    under test (``extra_info.entry_point`` or ``func_name``) to return None and prints nothing useful."""
    from skyrl_gym.audit.library import CODE_HACKS, fenced, function_under_test

    def wrong(case: AuditCase) -> Script:
        entry = function_under_test(case)
        return fenced("print(0)\n" + (f"def {entry}(*args, **kwargs):\n    return None\n" if entry else ""))

    generic = [
        hack
        for hack in ANSWER_HACKS
        if hack.name in ("empty reply", "whitespace only", "format without content")
    ]
    huge = Hack("huge output (2 MB of code)", "size", lambda case: fenced("x = 1\n" * 333_334))
    fields.setdefault("wrong_of", wrong)
    fields.setdefault("golden_of", lambda case: reference_action(case.row))
    fields.setdefault("answer_of", lambda row: None)
    return AuditProfile(format=CODE_BLOCK, hacks=tuple(generic) + (huge,) + tuple(CODE_HACKS), **fields)
