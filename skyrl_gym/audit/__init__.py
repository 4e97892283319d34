"""``skyrl_gym.audit``: play an env's verifier against golden positives and a library of reward hacks.

>>> report = audit_env("gsm8k")
>>> report.ok, print(report.table())

For each row the audit plays, on fresh envs through the episode driver:

* **known-wrong** replies (the env's answer format around wrong answers): each must earn less than the full
  reward, else a *false positive* (a verifier that pays wrong answers); the most they earn is the bar;
* the row's **golden** reply (its reference answer): it must earn the full reward, else a *false negative*;
* every **hack** of the env's profile (:mod:`skyrl_gym.audit.library`): each must earn no more than the
  known-wrong replies, else a *false positive*.

A reply is played every turn until the env ends the episode (a script plays its replies in order, then its
last one again); the episode's reward is the sum of its steps' rewards. An env that raises or hangs on a reply
is an error. Where the profiles come from, and how an env adds its own hacks: :mod:`skyrl_gym.audit.profiles`.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from skygym_sandboxes.types import SandboxUnavailable

from skyrl_gym.checker import STEP_TIMEOUT_S
from skyrl_gym.audit.library import AnswerFormat, AuditCase, Hack, Script, wrong_answer
from skyrl_gym.audit.profiles import (
    FALLBACK_SOURCE,
    FALLBACK_WARNING,
    AuditProfile,
    ProfileError,
    profile_for,
    text_profile,
)

# Holes the audit finds in shipped verifiers whose fixes are under way elsewhere: env id (or "judge", for every
# judged row) -> {hack name: where the fix is}. The audit still fails on them (a hole is a hole); the reason names
# the fix, and the CI test (tests/skyrl_gym/test_audit_envs.py) expects exactly these. Remove an entry when its fix
# lands. Empty: the SWE answer left on disk (issue 26) and the forgeable judge verdict (issue 29) are closed.
OPEN_HOLES: Dict[str, Dict[str, str]] = {}

OK = "ok"
FALSE_POSITIVE = "FALSE POSITIVE"
FALSE_NEGATIVE = "FALSE NEGATIVE"
ERROR = "ERROR"
NOT_RUN = "not run"
TOLERANCE = 1e-9
OUT_OF_BUDGET = "out of the time budget"  # the reason of a case --budget-s left unplayed
CANNOT_RUN = "this machine cannot run the env: "  # a sandbox or image it lacks: the row is skipped, not an error
UNUSABLE_ROW = ("make raised", "init raised", "make hung", "init hung", CANNOT_RUN)  # failed before its first step
DEFAULT_WORKERS = 4  # cases played at once: most of a sandboxed case is waiting on its sandbox
REPLY_SHOWN = 300  # characters of a case's reply kept in its result (2 MB hacks are cut, with their length)


def _shown(script: Optional[Script]) -> str:
    """The first reply of ``script`` as a case's result keeps it: whole when short, else its start and length."""
    if script is None:
        return ""
    first = script if isinstance(script, str) else (script[0] if script else "")
    turns = "" if isinstance(script, str) or len(script) < 2 else f" (then {len(script) - 1} more turn(s))"
    if len(first) <= REPLY_SHOWN:
        return first + turns
    return f"{first[:REPLY_SHOWN]}... ({len(first):,} characters){turns}"


@dataclasses.dataclass
class CaseResult:
    """One reply played on one row: what it had to earn, what it earned, the verdict and why."""

    row_index: int
    kind: str  # known-wrong, golden, hack
    name: str
    family: str
    expected: str
    got: Optional[float]
    verdict: str
    reason: str = ""
    reply: str = ""  # what was played: the first reply, cut to REPLY_SHOWN characters (``--json`` has it)

    @property
    def failed(self) -> bool:
        return self.verdict in (FALSE_POSITIVE, FALSE_NEGATIVE, ERROR)

    def to_dict(self) -> Dict[str, Any]:
        from skyrl_gym.data import row_number

        # "row" counts from 1, as the table and every message do; "row_index" is the list index
        return {"row": row_number(self.row_index), **dataclasses.asdict(self)}


@dataclasses.dataclass
class AuditReport:
    """What :func:`audit_env` found; ``ok`` is true when no case is a false positive, a false negative or an
    error."""

    env_id: str
    cases: List[CaseResult] = dataclasses.field(default_factory=list)
    rows: int = 0
    rows_source: str = ""
    skipped: Optional[str] = None  # why the audit could not run at all (no Docker engine)
    rows_skipped: List[str] = dataclasses.field(default_factory=list)  # rows this machine cannot run, and why
    seconds: float = 0.0
    fingerprint: Optional[str] = None
    profile: str = ""  # where the audit profile came from, and the answer format it plays
    warnings: List[str] = dataclasses.field(default_factory=list)  # what makes an OK weaker than it reads

    @property
    def failures(self) -> List[CaseResult]:
        return [case for case in self.cases if case.failed]

    @property
    def false_positives(self) -> List[CaseResult]:
        return [case for case in self.cases if case.verdict == FALSE_POSITIVE]

    @property
    def false_negatives(self) -> List[CaseResult]:
        return [case for case in self.cases if case.verdict == FALSE_NEGATIVE]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def incomplete(self) -> bool:
        """Cases were left unplayed (``budget_s`` ran out): no failure among those played is not a clean audit."""
        return any(case.verdict == NOT_RUN for case in self.cases)

    def __bool__(self) -> bool:
        return self.ok

    def summary(self) -> str:
        if self.skipped:
            return f"audit {self.env_id}: SKIPPED - {self.skipped}"
        counts = {
            verdict: sum(c.verdict == verdict for c in self.cases)
            for verdict in (OK, FALSE_POSITIVE, FALSE_NEGATIVE, ERROR, NOT_RUN)
        }
        shown = ", ".join(f"{n} {verdict.lower()}" for verdict, n in counts.items() if n)
        verdict = 'FAILED' if not self.ok else 'INCOMPLETE' if self.incomplete else 'OK'
        if verdict == "OK" and FALLBACK_WARNING in self.warnings:  # an OK that says little reads as one
            verdict = "OK, with no audit profile (plain-text replies only: WARNING below)"
        return (
            f"audit {self.env_id}: {verdict} - "
            f"{self.rows} row(s), {len(self.cases)} "
            f"case(s): {shown or 'none'} ({self.seconds:.1f} s)"
        )

    def table(self) -> str:
        """One line per case: row, case, expected, got, verdict, reason."""
        if self.skipped:
            return self.summary()
        from skyrl_gym.data import row_number

        header = ("row", "case", "expected", "got", "verdict", "reason")
        lines = [header] + [
            (
                str(row_number(c.row_index)),
                f"{c.kind}: {c.name}",
                c.expected,
                "-" if c.got is None else f"{c.got:g}",
                c.verdict,
                c.reason,
            )
            for c in self.cases
        ]
        widths = [min(60 if i == 1 else 48, max(len(line[i]) for line in lines)) for i in range(5)]
        out = [self.summary()] + [f"  profile: {self.profile}"] * bool(self.profile)
        out += [f"  WARNING: {warning}" for warning in self.warnings]
        for number, line in enumerate(lines):
            cells = [(cell if len(cell) <= w else cell[: w - 1] + "…").ljust(w) for cell, w in zip(line[:5], widths)]
            out.append("  " + "  ".join(cells) + "  " + line[5][:160])
            case = self.cases[number - 1] if number else None
            if case is not None and case.failed and case.reply:  # what was played, to see why it failed
                out.append(f"       reply: {case.reply[:160]!r}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> Dict[str, Any]:
        return {
            "env_id": self.env_id,
            "ok": self.ok,
            "skipped": self.skipped,
            "rows": self.rows,
            "rows_source": self.rows_source,
            "seconds": round(self.seconds, 3),
            "fingerprint": self.fingerprint,
            "profile": self.profile,
            "warnings": self.warnings,
            "cases": [case.to_dict() for case in self.cases],
        }


@dataclasses.dataclass
class _Player:
    """Plays replies on fresh envs of one id through the episode driver, each episode on a thread of its own
    with a timeout per env call (the checker's machinery)."""

    env_id: str
    env_config: Any
    max_turns: int
    step_timeout_s: Optional[float]

    def play(self, row: Mapping[str, Any], script: Script) -> Tuple[Optional[float], str]:
        """``(total reward, reason)``; the reward is None when the env raised or hung (the reason says
        where)."""
        from skyrl_gym.checker import _EpisodeThread, _EpisodeThreadCaller, _Timeout
        from skyrl_gym.data import row_extras
        from skyrl_gym.episode import ScriptedPolicy, run_episode, run_sync
        from skyrl_gym.registration import make

        extras = row_extras(row)
        prompt = row.get("prompt") if isinstance(row.get("prompt"), list) else []
        worker = _EpisodeThread(self.step_timeout_s)

        def make_env() -> Any:
            return make(self.env_id, env_config=copy.deepcopy(self.env_config), extras=copy.deepcopy(extras))

        try:
            episode = run_sync(
                run_episode(
                    make_env,
                    copy.deepcopy(prompt),
                    ScriptedPolicy(script),
                    env_class=self.env_id,
                    max_turns_cap=self.max_turns,
                    row_max_turns=row.get("max_turns"),
                    caller=_EpisodeThreadCaller(worker),
                )
            )
        finally:
            worker.stop()
        if episode.error is not None:
            method, exc = episode.error_method, episode.exception
            if method in ("make", "init") and isinstance(exc, SandboxUnavailable):
                return None, f"{CANNOT_RUN}{exc}"  # whole: it says what to build or start
            if isinstance(exc, _Timeout):  # the checker's worker gave up waiting: a hang, not a raise
                return None, f"{method} hung: {exc}"[:300]
            raised = f"{type(exc).__name__}: {exc}" if exc is not None else episode.error
            return None, f"{method} raised {raised}"[:300]
        reason = ""
        for step in reversed(episode.steps):
            metadata = step.metadata if isinstance(step.metadata, Mapping) else {}
            why = metadata.get("reason") or metadata.get("judge_error")
            if why:
                reason = str(why)
                break
        return episode.total_reward, reason.replace("\n", " ")[:300]


def _read_rows(rows: Union[str, Path, Iterable[Mapping[str, Any]]]) -> List[Tuple[Optional[str], Dict[str, Any]]]:
    """``(place, row)``: a file's rows named with the file and line (:func:`skyrl_gym.data.row_place`)."""
    from skyrl_gym.data import placed_rows

    if isinstance(rows, (str, Path)):
        return list(placed_rows(rows))
    return [(None, dict(row)) for row in rows]


def audit_env(
    env_id: str,
    rows: Union[str, Path, Iterable[Mapping[str, Any]], None] = None,
    *,
    env_config: Any = None,
    profile: Optional[AuditProfile] = None,
    max_rows: int = 2,
    seed: int = 0,
    budget_s: Optional[float] = None,
    step_timeout_s: Optional[float] = STEP_TIMEOUT_S,
    hacks: Optional[Iterable[str]] = None,
    workers: int = DEFAULT_WORKERS,
    progress: bool = False,
) -> AuditReport:
    """Audit the verifier of ``env_id`` and return an :class:`AuditReport`.

    Args:
        rows: dataset rows (a list or a JSONL/JSON/Parquet path); default: the profile's rows, else the env's
            dataset builder's, else the golden cases it ships (:func:`skyrl_gym.checker.default_rows`).
        env_config: passed to every env built, over the profile's own settings.
        profile: how to audit the env (default: :func:`~skyrl_gym.audit.profiles.profile_for`).
        max_rows: audit at most this many rows.
        budget_s: start no case after this many seconds; the rest are reported as not run.
        step_timeout_s: an env call slower than this is an error.
        hacks: play only the hacks with these names.
        workers: play this many cases at once, each on a fresh env (as a trainer steps many envs at once); the
            report lists them in the same order whatever order they finish in.
        progress: show a progress bar of the cases played (on stderr).

    Every row is checked before any case is played: a malformed row stops the audit before it starts.
    """
    from skyrl_gym.checker import default_rows
    from skyrl_gym.data import validate_row
    from skyrl_gym.registration import resolved_id, spec

    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    started = time.monotonic()
    env_id = spec(env_id).id
    profile = profile or profile_for(env_id)
    report = AuditReport(env_id=env_id, profile=f"{profile.source or 'given'}; answers as {profile.format.name}")
    if profile.source == FALLBACK_SOURCE:
        report.warnings.append(FALLBACK_WARNING)
    report.skipped = profile.unavailable()
    if report.skipped:
        return report
    if rows is None:
        if profile.rows is not None:
            raw: List[Tuple[Optional[str], Any]] = [(None, row) for row in profile.rows(max_rows, seed)]
            report.rows_source = f"{len(raw)} row(s) from the env's audit profile"
        else:
            built, report.rows_source, _ = default_rows(env_id, size=max_rows, seed=seed, command="audit")
            raw = [(None, row) for row in built]
    else:
        raw = _read_rows(rows)
        report.rows_source = f"{len(raw)} row(s) given" + (
            f", the first {max_rows} audited (max_rows)" if len(raw) > max_rows else "")
        others = sorted({str(row.get("env_class")) for _, row in raw[:max_rows] if isinstance(row, Mapping)
                         and row.get("env_class") and resolved_id(row.get("env_class")) != env_id})
        if others:  # `check` warns the same: these rows are another env's
            report.warnings.append(f"the rows name env_class {', '.join(repr(o) for o in others)}, not "
                                   f"{env_id!r}: they were audited with {env_id!r}")
    defaults = profile.env_config()
    if isinstance(env_config, Mapping) and isinstance(defaults, Mapping):
        env_config = {**defaults, **env_config}  # the profile's settings (short timeouts), then the caller's
    config = defaults if env_config is None else env_config
    player = _Player(env_id, config, profile.max_turns, step_timeout_s)
    chosen = None if hacks is None else _known_hacks(env_id, profile, set(hacks))
    deadline = None if budget_s is None else started + budget_s
    checked = [validate_row(row, index, place=place) for index, (place, row) in enumerate(raw[:max_rows])]
    from tqdm.auto import tqdm

    # a bar of rows, whose count is known, with the cases played beside it (a row's cases are known only as it
    # is played: a bar of cases would jump back at each row)
    bar = tqdm(total=len(checked), desc=f"audit {env_id}", unit="row", disable=not progress, leave=False,
               dynamic_ncols=True)
    played = _Played(bar)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="skyrl-gym-audit")
    try:
        for index, row in enumerate(checked):
            report.rows += 1
            _audit_row(report, _RowPlayer(player, row, deadline, pool, played), profile, index, row, chosen)
            bar.update()
    finally:  # on Ctrl-C: start nothing more (the cases under way end with their episodes)
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()
    report.seconds = time.monotonic() - started
    if report.rows_skipped and not report.cases:  # as `check` says it: nothing was audited (exit 3)
        report.skipped = report.rows_skipped[0].split(": ", 1)[1]
    elif report.rows_skipped:
        report.warnings += [f"skipped {skipped}" for skipped in report.rows_skipped]
    report.warnings += _unreached_scoring(report)
    return report


def _unreached_scoring(report: AuditReport) -> List[str]:
    """A warning when every known-wrong reply and hack played earned nothing for one and the same reason (``no
    complete <answer> block``): the replies may never have reached the env's scoring."""
    played = [case for case in report.cases if case.kind != "golden" and case.got is not None]
    reasons = {case.reason for case in played}
    if len(played) < 3 or len(reasons) != 1 or not next(iter(reasons)) or any(case.got for case in played):
        return []
    return [f"every wrong answer and hack earned 0 for one reason ({next(iter(reasons))[:120]}): they may never "
            "have reached the env's scoring; is the profile's answer format the env's?"]


class _Played:
    """The count of episodes played (a case may play several), shown beside the bar of rows; the pool's workers
    finish episodes at once."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.count = 0
        self.lock = threading.Lock()

    def one_more(self) -> None:
        with self.lock:
            self.count += 1
            self.bar.set_postfix_str(f"{self.count} episodes played")


@dataclasses.dataclass
class _RowPlayer:
    """Plays replies on one row on a pool's workers: ``start`` returns at once with a future of ``(total reward,
    reason)``, or of None for a case the time budget left unplayed."""

    player: _Player
    row: Mapping[str, Any]
    deadline: Optional[float]
    pool: concurrent.futures.Executor
    played: _Played

    def play(self, script: Script, timed: bool = True) -> Optional[Tuple[Optional[float], str]]:
        if timed and self.deadline is not None and time.monotonic() > self.deadline:
            return None
        result = self.player.play(self.row, script)
        self.played.one_more()
        return result

    def start(self, script: Script, timed: bool = True) -> "concurrent.futures.Future":
        return self.pool.submit(self.play, script, timed)


def _audit_row(
    report: AuditReport,
    player: _RowPlayer,
    profile: AuditProfile,
    index: int,
    row: Mapping[str, Any],
    chosen: Optional[set],
) -> None:
    """Play one row's known-wrong replies (the bar), its golden reply, then every hack that fits it. The first
    known-wrong reply plays alone (a row whose env cannot start stops there); the rest play at once, and the
    verdicts are read in that order."""
    calling = "answer_of(row)"
    try:
        answer = profile.answer_of(row)
        calling = "wrong_answers_of(row, count)"  # a game's legal moves that do not win
        own = [] if profile.wrong_answers_of is None or answer is None else \
            [str(wrong) for wrong in profile.wrong_answers_of(row, 3) if str(wrong) != answer]
    except Exception as exc:  # the env's own audit.py: an error in it is a row's error, not the audit's crash
        from skyrl_gym.checker import _describe_exception

        report.cases.append(CaseResult(index, "known-wrong", "a wrong answer in the env's format", "bar", "-", None,
                                       ERROR, f"the audit profile's {calling} raised {_describe_exception(exc)}"))
        return
    case = AuditCase(env_id=report.env_id, row=row, answer=answer, wrong=own[0] if own else wrong_answer(answer),
                     format=profile.format, others=tuple(own[1:]))

    def add(kind: str, name: str, family: str, expected: str, got: Optional[float], verdict: str,
            reason: str = "", script: Optional[Script] = None) -> None:
        report.cases.append(CaseResult(index, kind, name, family, expected, got, verdict, reason, _shown(script)))

    wrongs = list(profile.wrong(case))
    first = player.start(wrongs[0], timed=False).result() if wrongs else None
    if first is not None and first[0] is None and first[1].startswith(CANNOT_RUN):
        report.rows_skipped.append(f"row {index + 1}: {first[1]}")
        return
    if first is not None and first[0] is None and first[1].startswith(UNUSABLE_ROW):
        add("known-wrong", "a wrong answer in the env's format", "bar", "-", None, ERROR, first[1], wrongs[0])
        return  # the env cannot be built or started for this row: every other case would say the same
    others = [player.start(wrong, timed=False) for wrong in wrongs[1:]]
    golden = profile.golden(case)
    golden_play = None if golden is None else player.start(golden)
    # The hacks are built on answer_of(row): played in the profile's format, it must earn what the row's own
    # reference earns, or the hacks hide a wrong answer and test little (a scaffold's audit.py left unchanged)
    own = None  # (not for an env with no profile: its plain-text answer is known to say little, and a warning says so)
    if profile.golden_of is None and case.answer is not None and golden is not None \
            and profile.source != FALLBACK_SOURCE:
        own = case.reply(case.answer)
        own = None if own == golden else own
    own_play = None if own is None else player.start(own)
    fitting = [(hack, script) for hack in _hacks_for(profile, row, chosen)
               if (script := hack.build(case)) is not None]  # None: the hack does not apply to this row
    parts = [_parts_of(hack, case) for hack, _ in fitting]
    part_plays = {part: player.start(case.reply(part)) for part in dict.fromkeys(sum(parts, []))}
    hack_plays = [player.start(script) for _, script in fitting]

    earned: List[float] = []
    for number, (got, reason) in enumerate([first] + [play.result() for play in others] if wrongs else []):
        name = "a wrong answer in the env's format" if number == 0 else f"another wrong answer ({number})"
        verdict = ERROR if got is None else OK
        if got is not None and got >= profile.full_reward - TOLERANCE:  # else it would be the bar: nothing fails
            verdict = FALSE_POSITIVE
            reason = (f"a wrong answer earned {got:g}, at least the full reward ({profile.full_reward:g}): the "
                      "verifier pays wrong answers") + (f"; {reason}" if reason else "")
        add("known-wrong", name, "bar", f"< {profile.full_reward:g}", got, verdict, reason, wrongs[number])
        earned += [] if got is None else [got]
    bar = max(earned) if earned else 0.0

    expected_full = f"= {profile.full_reward:g}"
    played = None if golden_play is None else golden_play.result()
    if played is None:
        why = "the row has no reference answer" if golden is None else OUT_OF_BUDGET
        add("golden", "reference answer", "golden", expected_full, None, NOT_RUN, why, golden)
    else:
        got, reason = played
        full = got is not None and got >= profile.full_reward - TOLERANCE
        verdict = ERROR if got is None else (OK if full else FALSE_NEGATIVE)
        add("golden", "reference answer", "golden", expected_full, got, verdict, reason, golden)
        above = f"the reference answer earned {got:g}, more than the audit profile's full_reward" if full and \
            got > profile.full_reward + TOLERANCE else None
        if above and not any(w.startswith(above) for w in report.warnings):  # once a report: a 0-100 scale
            report.warnings.append(f"{above} ({profile.full_reward:g}): the bars are set for rewards up to "
                                   f"{profile.full_reward:g}; set full_reward in the env's audit profile, or keep "
                                   "the env's rewards in 0..1 as the trainers expect")
        own_played = None if own_play is None else own_play.result()
        if full and own_play is not None and own_played is None:  # the budget ran out: an unplayed case, said
            add("golden", "the audit profile's answer, in its format", "golden", expected_full, None, NOT_RUN,
                OUT_OF_BUDGET, own)
        elif full and own_played is not None:
            got, reason = own_played
            verdict = OK if got is not None and got >= profile.full_reward - TOLERANCE else ERROR
            if verdict == ERROR:
                reason = (f"the audit profile's answer_of(row) gives {case.answer!r}, which earns "
                          f"{'nothing' if got is None else f'{got:g}'} in the profile's answer format, while the "
                          "row's reference answer earns the full reward: answer_of (or the format) in the env's "
                          "audit profile does not match the env, and the hacks built on it test little"
                          + (f"; {reason}" if reason else ""))
            add("golden", "the audit profile's answer, in its format", "golden", expected_full, got, verdict,
                reason, own)

    for (hack, script), hedged, hack_play in zip(fitting, parts, hack_plays):
        of_parts = [part_plays[part].result() for part in hedged]
        played = hack_play.result()
        if played is None or None in of_parts:  # a hedge is judged against its parts: all of them or nothing
            add("hack", hack.name, hack.family, f"<= {bar:g}", None, NOT_RUN, OUT_OF_BUDGET, script)
            continue
        hack_bar = max([bar] + [got for got, _ in of_parts if got is not None])
        got, reason = played
        verdict = OK
        if got is None:
            verdict = ERROR
        elif got > hack_bar + TOLERANCE:
            verdict = FALSE_POSITIVE
            reason = f"earned {got:g}, more than a wrong answer ({hack_bar:g})" + (
                f"; {reason}" if reason else "") + (f"; fix: {hack.fix}" if hack.fix else "")
            known = open_hole(report.env_id, hack)
            reason = f"known open hole ({known}); {reason}" if known else reason
        add("hack", hack.name, hack.family, f"<= {hack_bar:g}", got, verdict, reason, script)


class UnknownHack(ValueError):
    """``hacks`` names a hack the env's profile (and the judge's library) does not have."""


def _known_hacks(env_id: str, profile: AuditProfile, chosen: set) -> set:
    """``chosen``, when every name is a hack this audit can play: else :class:`UnknownHack` with the names it
    has (a misspelt name played no hack and reported OK)."""
    import difflib

    from skyrl_gym.audit.library import JUDGE_HACKS

    names = sorted({hack.name for hack in list(profile.hacks) + list(JUDGE_HACKS)})
    for name in sorted(chosen - set(names)):
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UnknownHack(f"audit {env_id}: no hack named {name!r}; {hint}its hacks: "
                          + ", ".join(repr(known) for known in names))
    return chosen


def _hacks_for(profile: AuditProfile, row: Mapping[str, Any], chosen: Optional[set]) -> List[Hack]:
    """The profile's hacks, and the judge's on a judged row (any env); only the ``chosen`` names if given."""
    from skyrl_gym.audit.library import JUDGE_HACKS
    from skyrl_gym.rewards.judged_env import wants_judge

    hacks = list(profile.hacks) + (list(JUDGE_HACKS) if wants_judge(row) else [])
    return [hack for hack in hacks if chosen is None or hack.name in chosen]


def _parts_of(hack: Hack, case: AuditCase) -> List[str]:
    """The wrong answers a hedge is made of (each is played alone once per row: the hedge must earn no more
    than the best of them)."""
    if hack.parts is None or case.answer is None:
        return []
    return [part for part in hack.parts(case) if part != case.answer]


def open_hole(env_id: str, hack: Hack) -> Optional[str]:
    """Where the fix of a known hole is, when ``hack`` on ``env_id`` is one (:data:`OPEN_HOLES`)."""
    return OPEN_HOLES.get(env_id, {}).get(hack.name) or (
        OPEN_HOLES.get("judge", {}).get(hack.name) if hack.family == "judge" else None
    )


def write_json(reports: List[AuditReport], path: Union[str, Path]) -> None:
    Path(path).write_text(
        json.dumps([r.to_dict() for r in reports], indent=1, default=str) + "\n", encoding="utf-8"
    )


__all__ = [
    "UnknownHack",
    "ProfileError",
    "audit_env",
    "AuditReport",
    "CaseResult",
    "AuditProfile",
    "AuditCase",
    "AnswerFormat",
    "Hack",
    "profile_for",
    "text_profile",
    "write_json",
    "OPEN_HOLES",
    "open_hole",
    "OUT_OF_BUDGET",
    "OK",
    "FALSE_POSITIVE",
    "FALSE_NEGATIVE",
    "ERROR",
    "NOT_RUN",
]
