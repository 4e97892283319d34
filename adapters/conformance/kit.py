"""The conformance kit's core: cases, the reference play, the checks, the report and its table.

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

Adapters are small classes with ``name``, ``available()`` and ``run(cases, context)``; pass your own to
:func:`skygym_adapters.conformance.runner.run_conformance` to check an adapter of your trainer the same way.
This module depends on no other module of the kit: ``adapters`` and ``cases`` build on it, and ``runner``
puts the three together.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from skyrl_gym.data import row_extras, validate_row
from skyrl_gym.episode import EpisodeEnd, ScriptedPolicy, make_env_factory, run_episode, run_sync

CHECKS = ("ran", "rewards", "turns", "masks")
OK, FAIL, NA, SKIPPED = "ok", "FAIL", "n/a", "skipped"


@dataclass
class Case:
    """One episode to replay: a dataset row and the assistant texts to send, turn by turn."""

    row: Dict[str, Any]
    actions: List[str]
    env_config: Any = None

    @property
    def key(self) -> str:
        """The text that identifies this episode's prompt (its last user message)."""
        users = [m["content"] for m in self.row["prompt"] if m.get("role") == "user"]
        return users[-1] if users else self.row["prompt"][-1]["content"]


@dataclass
class Reference:
    """What the env itself does with a case's actions."""

    rewards: List[float]
    observations: List[List[str]]  # the env's message contents after each turn
    max_turns: int
    ended_by: str  # "done" | "max_turns"

    @property
    def turns(self) -> int:
        return len(self.rewards)

    @property
    def total(self) -> float:
        return float(sum(self.rewards))


@dataclass
class Run:
    """What one adapter made of one case."""

    turn_rewards: Optional[List[float]]  # None when the adapter only reports the episode total
    total_reward: float
    turns: int
    token_ids: Optional[List[int]] = None  # response tokens (model turns and observations)
    mask: Optional[List[int]] = None  # 1 = model token, 0 = env/template token
    error: Optional[str] = None
    notes: List[str] = field(default_factory=list)


@dataclass
class Context:
    """What adapters need besides the cases: a tokenizer and the model folder it comes from."""

    model_dir: Optional[Path] = None
    tokenizer: Any = None
    workdir: Optional[Path] = None
    cache: Dict[Any, Any] = field(default_factory=dict)  # adapters keep costly set-up here (veRL's config)

    def require_tokenizer(self) -> Any:
        if self.tokenizer is None:
            from transformers import AutoTokenizer

            from skygym_adapters.models import resolve_model

            if self.model_dir is None:
                self.model_dir = resolve_model(None).path
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        return self.tokenizer


class ConformanceAdapter(Protocol):
    name: str
    produces_tokens: bool

    def available(self) -> Tuple[bool, str]: ...

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]: ...


# ----------------------------------------------------------------------------------------------
# The reference: the env played directly
# ----------------------------------------------------------------------------------------------
def play_reference(case: Case) -> Reference:
    """Play the case's actions on the env through the episode driver until it is done (or its turn limit)."""
    row = validate_row(case.row, require_env_class=True)
    extras = row_extras(copy.deepcopy(row))
    episode = run_sync(run_episode(
        make_env_factory(row["env_class"], copy.deepcopy(case.env_config), extras), copy.deepcopy(row["prompt"]),
        ScriptedPolicy(list(case.actions), repeat_last=False), env_class=row["env_class"],
        row_max_turns=extras.get("max_turns"),
    ))
    if episode.end is EpisodeEnd.ERROR:
        raise episode.exception or RuntimeError(episode.error)
    if episode.end is EpisodeEnd.ABORTED:
        raise ValueError(
            f"case for env {row['env_class']!r} ran out of actions after {episode.num_turns} turns before the episode "
            "ended; give actions until the env is done or its max_turns is reached"
        )
    observations = [[str(m.get("content", "")) for m in step.observations] for step in episode.steps]
    end = "done" if episode.end is EpisodeEnd.ENV_DONE else "max_turns"
    return Reference(episode.rewards, observations, episode.max_turns or episode.num_turns, end)


# ----------------------------------------------------------------------------------------------
# Checks and the report
# ----------------------------------------------------------------------------------------------
def _mask_problems(run: Run, case: Case, ref: Reference, tokenizer: Any) -> List[str]:
    ids, mask = run.token_ids or [], run.mask or []
    if len(ids) != len(mask):
        return [f"{len(ids)} tokens but {len(mask)} mask values"]
    if set(mask) - {0, 1}:
        return [f"mask values other than 0/1: {sorted(set(mask) - {0, 1})}"]
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    problems = []
    model_runs = [(s, e) for v, s, e in runs if v == 1]
    if len(model_runs) != ref.turns:
        problems.append(f"{len(model_runs)} runs of mask 1, expected one per turn ({ref.turns})")
    for turn, (s, e) in enumerate(model_runs[: ref.turns]):
        text = tokenizer.decode(ids[s:e], skip_special_tokens=True).strip()
        if text != case.actions[turn].strip():
            problems.append(f"turn {turn + 1}: mask-1 tokens decode to {text[:60]!r}, the model said {case.actions[turn][:60]!r}")
    env_text = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
    for turn, contents in enumerate(ref.observations[: ref.turns - 1]):
        for content in contents:
            if content and content not in env_text:
                problems.append(f"the env's message after turn {turn + 1} ({content[:40]!r}) is not among the mask-0 tokens")
    return problems


@dataclass
class AdapterReport:
    adapter: str
    status: Dict[str, str]  # check -> ok / FAIL / n/a / skipped
    problems: List[str] = field(default_factory=list)
    skipped_reason: str = ""

    @property
    def ok(self) -> bool:
        return all(value in (OK, NA) for value in self.status.values())


@dataclass
class ConformanceReport:
    env_id: str
    cases: int
    adapters: List[AdapterReport]

    @property
    def ok(self) -> bool:
        """Every adapter that ran passed every check (skipped adapters do not fail the report)."""
        return all(a.ok for a in self.adapters if not a.skipped_reason)

    def status(self, adapter: str, check: str) -> str:
        return next(a.status[check] for a in self.adapters if a.adapter == adapter)

    def ran(self) -> List[str]:
        return [a.adapter for a in self.adapters if not a.skipped_reason]


def check_runs(adapter: Any, runs: Sequence[Run], cases: Sequence[Case], refs: Sequence[Reference], context: Context) -> AdapterReport:
    status = {check: OK for check in CHECKS}
    problems: List[str] = []

    def fail(check: str, index: int, message: str) -> None:
        status[check] = FAIL
        problems.append(f"case {index}: {message}")

    if len(runs) != len(cases):
        for check in CHECKS:
            status[check] = FAIL
        return AdapterReport(adapter.name, status, [f"{len(runs)} results for {len(cases)} cases"])
    if not adapter.produces_tokens:
        status["masks"] = NA
    for index, (run, case, ref) in enumerate(zip(runs, cases, refs)):
        if run.error:
            fail("ran", index, f"error: {run.error}")
        for note in run.notes:
            fail("rewards", index, note)
        if run.turn_rewards is not None:
            if len(run.turn_rewards) != ref.turns or not all(
                math.isclose(a, b, abs_tol=1e-9) for a, b in zip(run.turn_rewards, ref.rewards)
            ):
                fail("rewards", index, f"turn rewards {run.turn_rewards}, the env gave {ref.rewards}")
        if not math.isclose(run.total_reward, ref.total, abs_tol=1e-9):
            fail("rewards", index, f"episode reward {run.total_reward}, the env gave {ref.total}")
        if run.turns != ref.turns:
            fail("turns", index, f"{run.turns} turns, the env took {ref.turns}")
        if adapter.produces_tokens:
            for problem in _mask_problems(run, case, ref, context.require_tokenizer()):
                fail("masks", index, problem)
    return AdapterReport(adapter.name, status, problems)


def format_table(report: ConformanceReport) -> str:
    """The adapter x check table, then the problems found (plain text)."""
    header = ["adapter", *CHECKS]
    rows = [[a.adapter, *(a.status[c] for c in CHECKS)] for a in report.adapters]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"conformance of {report.env_id!r} over {report.cases} case(s)"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    lines.append("  ".join("-" * w for w in widths))
    for a, row in zip(report.adapters, rows):
        line = "  ".join(str(v).ljust(w) for v, w in zip(row, widths))
        lines.append(line + (f"  ({a.skipped_reason})" if a.skipped_reason else ""))
    for a in report.adapters:
        for problem in a.problems:
            lines.append(f"{a.adapter}: {problem}")
    ran = report.ran()
    skipped = len(report.adapters) - len(ran)
    if not report.ok:
        result = "MISMATCH"
    elif not ran:
        result = "nothing checked: every adapter was skipped (install what they name)"
    else:
        result = (f"the adapters that ran conform ({', '.join(ran)}); {skipped} skipped, not checked" if skipped
                  else "all adapters conform")
    lines.append("result: " + result)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------
def cases_from_rows(rows: Sequence[Mapping[str, Any]], actions: Sequence[Sequence[str]], env_config: Any = None) -> List[Case]:
    """Cases from dataset rows and one list of assistant texts per row."""
    if len(rows) != len(actions):
        raise ValueError(f"got {len(rows)} rows but {len(actions)} action lists")
    cases = []
    for index, (row, texts) in enumerate(zip(rows, actions)):
        if isinstance(texts, str):
            texts = [texts]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"actions for row {index} must be a non-empty list of strings")
        cases.append(Case(dict(validate_row(dict(row), index)), list(texts), env_config))
    return cases


__all__ = [
    "CHECKS",
    "AdapterReport",
    "Case",
    "ConformanceAdapter",
    "ConformanceReport",
    "Context",
    "Reference",
    "Run",
    "check_runs",
    "cases_from_rows",
    "format_table",
    "play_reference",
]
