"""The env checker: drive an env through dataset rows and adversarial actions, report contract breaches.

>>> report = skyrl_gym.check_env("gsm8k", "rows.jsonl")
>>> report.ok, print(report)

For every row the checker builds a fresh env (``make(id, env_config=..., extras=row)``), calls
``init(prompt)`` and plays one episode per action: the row's reference answer when it has one, an
empty string, ~10 MB of text, a unicode soup, unclosed tool/answer tags and well-formed tags with
junk inside. Each action is played twice on fresh envs to compare rewards. Every breach of the
contract becomes a :class:`Finding` in plain words; nothing the env raises escapes the checker.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import queue
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from skygym_sandboxes.types import SandboxUnavailable
from skyrl_gym.core import Env
from skyrl_gym.data import placed_rows, row_extras, row_number, row_place, validate_row
from skyrl_gym.episode import EnvCaller, EpisodeEnd, ScriptedPolicy, run_episode, run_sync
from skyrl_gym.episode import Episode as EpisodeRecord
from skyrl_gym.errors import DataError, UnregisteredEnv
from skyrl_gym.registration import EnvSpec, make, registry, resolved_id, spec

ERROR = "error"
WARNING = "warning"
SKIPPED = "skipped"  # the machine cannot run the env (no Docker engine, an image not built): not a breach

HUGE_ACTION_CHARS = 10_000_000

# Adversarial actions: (label, text). The huge one is built lazily (10 MB) and shared between rows.
ADVERSARIAL_ACTIONS: Tuple[Tuple[str, str], ...] = (
    ("empty string", ""),
    (
        "unicode",
        "Ünïcödé ∑∫√ 中文 العربية עברית 🙂🚀👩‍👩‍👧 \u200b\u200d\u202e reversed \ufeff combining e\u0301 \x00 nul",
    ),
    (
        "unclosed tags",
        "<think>let me see <answer>42 <tool><python>print(1) <sql>SELECT * FROM <search>query "
        '<tool_call>{"name": "f", "arguments": {"x": \\boxed{12 #### ',
    ),
    (  # what a parser finds but the env cannot use: an answer that is no number, code that is no Python
        "junk in well-formed tags",
        "<answer>abc</answer> <solution>abc</solution> \\boxed{abc} #### abc <think></think> "
        "<tool><python>)(</python></tool> <sql>abc</sql> <search></search> "
        '<tool_call>{"name": "abc", "arguments": "abc"}</tool_call> <tool_call>abc</tool_call>',
    ),
)


@dataclasses.dataclass
class Finding:
    """One breach of the contract (``error``), a doubtful behaviour (``warning``), or a row this machine
    cannot play (``skipped``: what it lacks and how to get it)."""

    severity: str
    kind: str  # row, builder, split, make, init, step, types, reward, done, determinism, close, metrics
    message: str
    env_id: str
    row_index: Optional[int] = None
    action: Optional[str] = None

    def __str__(self) -> str:
        place = row_place(self.row_index) if self.row_index is not None else None
        where = [place] if place and not self.message.startswith(place) else []  # said once, not "[row 1]: row 1 .."
        if self.action is not None:
            where.append(f"action {self.action!r}")
        location = f" [{', '.join(where)}]" if where else ""
        return f"{self.severity.upper():7s} {self.kind}{location}: {self.message}"


@dataclasses.dataclass
class CheckReport:
    """What :func:`check_env` found. ``ok`` is true when there is no error-level finding."""

    env_id: str
    findings: List[Finding] = dataclasses.field(default_factory=list)
    rows_checked: int = 0
    episodes: int = 0
    rows_without_reference: int = 0
    """Rows with no reference answer of their own: no correct answer was played on them."""
    rows_from: str = ""
    """Where the rows came from when none were given (as ``skyrl-gym check ID`` finds them)."""

    @property
    def errors(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def skipped(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == SKIPPED]

    @property
    def ok(self) -> bool:
        return not self.errors

    def kinds(self) -> List[str]:
        return sorted({f.kind for f in self.findings})

    def __bool__(self) -> bool:
        return self.ok

    @property
    def all_skipped(self) -> bool:
        """Every row was skipped (this machine cannot run the env): nothing was checked."""
        return len(self.skipped) >= self.rows_checked > 0

    def __str__(self) -> str:
        verdict = "FAILED" if not self.ok else "SKIPPED" if self.all_skipped else "OK"
        head = (
            f"check {self.env_id}: {verdict} - {self.rows_checked} row(s), {self.episodes} episode(s), "
            f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)"
            + (f", {len(self.skipped)} row(s) skipped" if self.skipped else "")
        )
        note = []
        if self.rows_without_reference and not self.all_skipped:
            note = [f"  note: {self.rows_without_reference} row(s) have no reference answer (reference_action, or "
                    "extra_info's answer or solution): what a correct answer earns was not checked on them "
                    "(`skyrl-gym audit` plays golden answers)"]
        source = [f"  rows: {self.rows_from}"] if self.rows_from else []
        return "\n".join([head] + source + [f"  {line}" for line in _collapsed(self.findings)] + note)


def _collapsed(findings: Sequence[Finding]) -> List[str]:
    """A finding per line, each message once: the same breach on every row and action is one line and a count."""
    alike: Dict[Tuple[str, str, str], List[Finding]] = {}
    for finding in findings:
        alike.setdefault((finding.severity, finding.kind, finding.message), []).append(finding)
    lines = []
    for group in alike.values():
        others = sorted({f.row_index for f in group[1:] if f.row_index is not None} - {group[0].row_index})
        rows = "" if not others else ", also on row " + ", ".join(str(row_number(i)) for i in others[:5]) + (
            f" and {len(others) - 5} more" if len(others) > 5 else "")  # a bad row 7 hid behind row 5's line
        lines.append(str(group[0]) + (f" (and {len(group) - 1} more like it{rows})" if len(group) > 1 else ""))
    return lines


# How long one make/init/step/close may take before `check` and `audit` call it hanging: a code env's
# step grades a whole test suite, and an env's init may start a container.
STEP_TIMEOUT_S = 120.0


class _Timeout(Exception):
    pass


class _EpisodeThread:
    """Runs every call of one episode (make, init, steps, close) on one thread of its own, waiting at most
    ``timeout_s`` for each. One thread per episode because envs may hold thread-bound resources (an
    SQLite connection, an event loop); a hung call is abandoned with its daemon thread (Python cannot
    kill a thread), so the checker can report it and move on."""

    def __init__(self, timeout_s: Optional[float]):
        self.timeout_s = timeout_s
        self.calls: "queue.Queue[Optional[Tuple[Callable[[], Any], queue.Queue]]]" = queue.Queue()
        self.hung = False
        self.thread = threading.Thread(target=self._serve, daemon=True, name="skyrl-gym-check")
        self.thread.start()

    def _serve(self) -> None:
        while True:
            item = self.calls.get()
            if item is None:
                return
            fn, answer = item
            try:
                answer.put((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                answer.put((False, exc))

    def call(self, fn: Callable[[], Any]) -> Any:
        if self.hung:
            raise _Timeout("an earlier call of this episode is still running")
        answer: queue.Queue = queue.Queue(maxsize=1)
        self.calls.put((fn, answer))
        try:
            ok, value = answer.get(timeout=self.timeout_s)
        except queue.Empty:
            self.hung = True
            raise _Timeout(f"did not return within {self.timeout_s:g} s") from None
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        if not self.hung:
            self.calls.put(None)
            self.thread.join()


def _same_rewards(first: Sequence[float], second: Sequence[float]) -> bool:
    """Equal rewards, a NaN equal to a NaN (its own finding says it is not finite)."""
    return len(first) == len(second) and all(
        a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
        for a, b in zip(first, second))


def _describe_exception(exc: BaseException) -> str:
    """``Type: message`` plus where it was raised (the last frames), short enough for a report."""
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(frames))
    message = str(exc)
    if len(message) > 300:
        message = message[:300] + "..."
    return f"{type(exc).__name__}: {message}" + (f" (at {where})" if where else "") + _missing_base_init(exc)


def _missing_base_init(exc: BaseException) -> str:
    """Where an env lacks an attribute ``BaseTextEnv.__init__`` sets: its ``__init__`` did not call the base's."""
    env = getattr(exc, "obj", None)
    if not (isinstance(exc, AttributeError) and isinstance(env, Env)
            and exc.name in getattr(type(env), "INIT_ATTRIBUTES", ())):
        return ""
    return (f"; BaseTextEnv.__init__ sets {exc.name}: {type(env).__name__}.__init__ must call "
            f"super().__init__(env_config, extras)")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class _EnvFactory:
    """Builds fresh envs for the checker from an id, a spec, a class/callable or an env instance."""

    def __init__(self, env_or_id: Any, env_config: Any, make_kwargs: Mapping[str, Any]):
        self.env_config = env_config if env_config is not None else {}
        self.make_kwargs = dict(make_kwargs)
        self.creator: Callable[..., Any]
        self.registered = not callable(env_or_id) or isinstance(env_or_id, EnvSpec)  # an id the CLI can name
        if isinstance(env_or_id, str):
            env_spec = spec(env_or_id)
            self.env_id = env_spec.id
            self.creator = lambda **kw: make(env_spec, **kw)
        elif isinstance(env_or_id, EnvSpec):
            self.env_id = env_or_id.id
            self.creator = lambda **kw: make(env_or_id, **kw)
        elif isinstance(env_or_id, Env):
            # An instance cannot be re-used for other rows: rebuild it from its spec or its class.
            if env_or_id.spec is not None:
                env_spec = env_or_id.spec
                self.env_id = env_spec.id
                self.creator = lambda **kw: make(env_spec, **kw)
                self.registered = True
            else:
                self.env_id = type(env_or_id).__name__
                self.creator = type(env_or_id)
                self.registered = False
        elif callable(env_or_id):
            self.env_id = getattr(env_or_id, "__name__", repr(env_or_id))
            self.creator = env_or_id
        else:
            raise TypeError(f"check_env expects an env id, EnvSpec, Env class or Env, got {type(env_or_id).__name__}")

    def build(self, extras: Dict[str, Any]) -> Any:
        return self.creator(env_config=copy.deepcopy(self.env_config), extras=copy.deepcopy(extras), **self.make_kwargs)


def reference_action(row: Mapping[str, Any]) -> Optional[str]:
    """The row's own reference answer: ``reference_action`` (row or extra_info), else ``extra_info``'s
    ``answer`` / ``solution`` when it is text (GSM8K rows keep the worked solution there)."""
    extra_info = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    for value in (row.get("reference_action"), extra_info.get("reference_action"), extra_info.get("answer"), extra_info.get("solution")):
        if isinstance(value, str) and value:
            return value
    return None


@dataclasses.dataclass
class _Episode:
    rewards: List[float]
    done: bool
    steps: int
    max_turns: Optional[int]


class _NotAnEnv(TypeError):
    """The entry point built something that is not a ``skyrl_gym.Env``."""


class _AlreadyReported(ValueError):
    """A step output so malformed that the episode cannot go on; its findings are already in the report."""


class _EpisodeThreadCaller(EnvCaller):
    """The episode driver's env calls, each on the episode's own thread with the checker's timeout. Envs are
    stepped through ``step`` (the synchronous contract is what is checked), never ``astep``."""

    def __init__(self, worker: _EpisodeThread) -> None:
        super().__init__()
        self.worker = worker

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.worker.call(lambda: fn(*args))

    async def step(self, env: Env, action: str) -> Any:
        return await self.call("step", env.step, action)


class _CheckPolicy(ScriptedPolicy):
    """Plays the same action every turn and checks the first observation on the way."""

    def __init__(self, checker: "_Checker", action: str, row_index: Optional[int], label: str, add: Callable) -> None:
        super().__init__(action)
        self.checker, self.row_index, self.label, self.add = checker, row_index, label, add

    async def start(self, episode: EpisodeRecord) -> Optional[EpisodeEnd]:
        self.checker._check_messages(episode.prompt, "init() observation", self.row_index, self.label, self.add)
        if not isinstance(episode.info, dict):
            self.add(ERROR, "init", f"init() info must be a dict, got {type(episode.info).__name__}", self.row_index,
                     self.label)
        return None


class _Checker:
    def __init__(
        self,
        factory: _EnvFactory,
        report: CheckReport,
        max_turns_slack: int,
        step_timeout_s: Optional[float],
        check_determinism: bool,
        max_observation_chars: int = 100_000,
    ):
        self.max_observation_chars = max_observation_chars
        self.own_rows = False  # the rows came from the env's own builder or golden cases: their faults are errors
        self.stand_in = False  # no rows at all: one user message with no extras, which an env may rightly refuse
        self.factory = factory
        self.report = report
        self.max_turns_slack = max_turns_slack
        self.step_timeout_s = step_timeout_s
        self.check_determinism = check_determinism
        self.row_unusable = False

    def add(self, severity: str, kind: str, message: str, row_index: Optional[int], action: Optional[str] = None) -> None:
        self.report.findings.append(Finding(severity, kind, message, self.factory.env_id, row_index, action))

    # ----- one episode --------------------------------------------------------------------------
    def episode(self, row_index: Optional[int], prompt: Any, extras: Dict[str, Any], label: str, action: str,
                report: bool = True) -> Optional[_Episode]:
        """Play ``action`` every turn until done, through the episode driver; return the rewards, or None when the
        episode broke. The env must end the episode by itself: the driver stops only ``max_turns_slack`` turns
        past the env's ``max_turns``."""
        add = self.add if report else (lambda *a, **k: None)
        worker = _EpisodeThread(self.step_timeout_s)
        built: List[Env] = []

        def make_env() -> Env:
            env = self.factory.build(extras)
            if not isinstance(env, Env):
                raise _NotAnEnv(f"the entry point returned a {type(env).__name__}, not a skyrl_gym.Env")
            built.append(env)
            return env

        policy = _CheckPolicy(self, action, row_index, label, add)
        validate = lambda output, turn: self._validate(output, turn, row_index, label, add)  # noqa: E731
        try:
            record = run_sync(self._drive(make_env, prompt, policy, worker, validate))
            return self._judge(record, built, worker, row_index, label, add, report)
        finally:
            worker.stop()

    async def _drive(self, make_env: Callable[[], Env], prompt: Any, policy: _CheckPolicy, worker: _EpisodeThread,
                     validate: Callable[[Any, int], Tuple[float, bool]]) -> EpisodeRecord:
        return await run_episode(make_env, copy.deepcopy(prompt) if isinstance(prompt, list) else [], policy,
                                 env_class=self.factory.env_id, caller=_EpisodeThreadCaller(worker), validate=validate,
                                 turns_past_limit=self.max_turns_slack)

    def _judge(self, record: EpisodeRecord, built: List[Env], worker: _EpisodeThread, row_index, label, add,
               report: bool) -> Optional[_Episode]:
        """Turn how the episode went into findings; None when it broke."""
        if built:
            self.report.episodes += report
        if record.end is EpisodeEnd.ERROR:
            self._report_error(record, row_index, label, add, report)
            broken = True
        else:
            broken = False
            if record.end is EpisodeEnd.MAX_TURNS:
                limit = record.max_turns or 0
                own = getattr(built[0], "max_turns", None) if built else None
                add(ERROR, "done",
                    f"not done after {limit} steps (max_turns={own if isinstance(own, int) else 'unset'} "
                    f"+ {self.max_turns_slack} slack); an episode must end by max_turns", row_index, label)
            elif built:
                self._check_metrics(worker, built[0], record.env_metrics, row_index, label, add)
        if built and not worker.hung:
            self._close_again(worker, built[0], record, row_index, label, add)
        if broken:
            return None
        own = getattr(built[0], "max_turns", None) if built else None
        return _Episode(record.rewards, record.end is EpisodeEnd.ENV_DONE, record.num_turns,
                        own if isinstance(own, int) and own > 0 else None)

    def _report_error(self, record: EpisodeRecord, row_index, label, add, report: bool) -> None:
        exc, method, turn = record.exception, record.error_method, record.num_turns + 1
        if isinstance(exc, _AlreadyReported):
            return
        # no action was played before the env was built and started: the finding names none
        if method in ("make", "init") and isinstance(exc, SandboxUnavailable):
            self.row_unusable = report
            add(SKIPPED, method, f"this machine cannot run the env: {exc}", row_index, None)
        elif method == "make":
            self.row_unusable = report
            if self.stand_in and isinstance(exc, DataError):  # likely right: the stand-in row has no ground truth
                # still an error: nothing was checked, and `assert report.ok` must not pass an env refusing every row
                add(ERROR, "make", f"the env refused the checker's stand-in row (one user message, no extras) with "
                    f"{_describe_exception(exc)}; if a row needs more, that is right, and nothing was checked: pass "
                    + (f"rows (skyrl-gym check {self.factory.env_id} --rows FILE, or check_env(env, rows))"
                       if self.factory.registered else "rows: check_env(env, rows)"), row_index, None)
            elif isinstance(exc, _NotAnEnv):
                add(ERROR, "make", str(exc), row_index, None)
            elif isinstance(exc, _Timeout):
                add(ERROR, "make", f"building the env {exc}", row_index, None)
            else:
                own = ("; the row is one the env's own dataset builder (or golden cases) made: fix the builder or "
                       "the env, whichever is wrong" if self.own_rows and isinstance(exc, DataError) else "")
                add(ERROR, "make", f"building the env raised {_describe_exception(exc)}{own}", row_index, None)
        elif method == "init":
            self.row_unusable = report
            if isinstance(exc, _Timeout):
                add(ERROR, "init", f"init(prompt) {exc}", row_index, None)
            elif record.error and "init() must return" in record.error:
                add(ERROR, "init", str(exc), row_index, None)
            else:
                add(ERROR, "init", f"init(prompt) raised {_describe_exception(exc)}", row_index, None)
        elif method == "step":
            if isinstance(exc, _Timeout):
                add(ERROR, "step", f"step() on turn {turn} {exc} (a hang stalls a whole training batch)", row_index, label)
            else:
                # on an action a model may write (not the row's reference, not a row the env refuses): the rule broken
                adversarial = label in {name for name, _ in ADVERSARIAL_ACTIONS} or label.startswith("huge string")
                fix = "" if isinstance(exc, DataError) or not adversarial or _missing_base_init(exc) else (
                    "; step() must not raise on model output: give it a reward of 0 with metadata['reason'] saying why")
                add(ERROR, "step", f"step() on turn {turn} raised {_describe_exception(exc)}{fix}", row_index, label)
        elif isinstance(exc, _Timeout):  # get_metrics
            add(ERROR, "metrics", f"get_metrics() {exc}", row_index, label)
        elif isinstance(exc, TypeError) and "must return a dict" in str(exc):
            add(ERROR, "metrics", str(exc), row_index, label)
        else:
            add(ERROR, "metrics", f"get_metrics() raised {_describe_exception(exc)}", row_index, label)

    def _validate(self, output: Any, turn: int, row_index, label, add) -> Tuple[float, bool]:
        reward, done = self._check_step_output(output, turn, row_index, label, add)
        if reward is None:
            raise _AlreadyReported(f"unusable step output on turn {turn}")
        return reward, done

    def _close_again(self, worker: _EpisodeThread, env: Env, record: EpisodeRecord, row_index, label, add) -> None:
        """The driver closed the env once; close must also be idempotent."""
        if record.close_error:
            add(ERROR, "close", record.close_error.replace("close: ", "close() raised ", 1), row_index, label)
            return
        try:
            worker.call(env.close)
        except _Timeout as exc:
            add(ERROR, "close", f"close() {exc}", row_index, label)
        except Exception as exc:
            add(ERROR, "close", f"a second close() (close must be idempotent) raised {_describe_exception(exc)}",
                row_index, label)

    def _check_metrics(self, worker: _EpisodeThread, env: Env, metrics: Any, row_index, label, add) -> None:
        """``get_metrics()`` must give a dict that ``aggregate_metrics`` can average (SkyRL logs both)."""
        if not hasattr(env, "get_metrics"):
            return
        if not isinstance(metrics, dict):
            add(ERROR, "metrics", f"get_metrics() must return a dict, got {type(metrics).__name__}", row_index, label)
            return
        if not hasattr(env, "aggregate_metrics"):
            return
        try:
            aggregated = worker.call(lambda: env.aggregate_metrics([metrics, metrics]))
            if not isinstance(aggregated, dict):
                add(ERROR, "metrics", f"aggregate_metrics() must return a dict, got {type(aggregated).__name__}",
                    row_index, label)
        except _Timeout as exc:
            add(ERROR, "metrics", f"aggregate_metrics() {exc}", row_index, label)
        except Exception as exc:
            add(ERROR, "metrics", f"aggregate_metrics() raised {_describe_exception(exc)}", row_index, label)

    # ----- type checks --------------------------------------------------------------------------
    def _check_messages(self, messages: Any, what: str, row_index, label, add) -> None:
        if isinstance(messages, list):
            size = sum(len(m.get("content")) for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str))
            if size > self.max_observation_chars:
                add(WARNING, "types", f"{what} holds {size:,} characters (more than {self.max_observation_chars:,}); "
                    "an env should bound what it adds to the model's context (echoing the action?)", row_index, label)
        if not isinstance(messages, list):
            add(ERROR, "types", f"{what} must be a list of chat messages, got {type(messages).__name__}", row_index, label)
            return
        for position, message in enumerate(messages):
            if not isinstance(message, dict):
                add(ERROR, "types", f"{what}[{position}] must be a dict with 'role' and 'content', got "
                    f"{type(message).__name__}", row_index, label)
            elif not isinstance(message.get("role"), str) or not isinstance(message.get("content"), str):
                add(ERROR, "types", f"{what}[{position}] needs string 'role' and 'content', got "
                    f"role={_short(message.get('role'), 30)}, content of type {type(message.get('content')).__name__}",
                    row_index, label)

    def _check_step_output(self, output: Any, turn: int, row_index, label, add) -> Tuple[Optional[float], bool]:
        if not isinstance(output, Mapping):
            add(ERROR, "types", f"step() must return a dict (StepOutput), got {type(output).__name__}", row_index, label)
            return None, False
        missing = [key for key in ("observations", "reward", "done", "metadata") if key not in output]
        if missing:
            extra = [key for key in output if key not in ("observations", "reward", "done", "metadata")]
            near = {key: close[0] for key in extra if isinstance(key, str)
                    and (close := difflib.get_close_matches(key, missing, n=1, cutoff=0.6))}
            hint = "".join(f"; {key!r} is not a key of it (did you mean {name!r}?)" for key, name in near.items())
            add(ERROR, "types", f"step() output lacks {missing} on turn {turn}{hint}", row_index, label)
            return None, False
        self._check_messages(output["observations"], f"step() observations (turn {turn})", row_index, label, add)
        reward = output["reward"]
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            add(ERROR, "types", f"reward must be a float, got {type(reward).__name__} {_short(reward, 40)} on turn {turn} "
                "(return float(...))", row_index, label)
            try:
                reward = float(reward)
            except (TypeError, ValueError):
                return None, False
        elif not isinstance(reward, float):
            add(WARNING, "types", f"reward is an int ({reward}); return a float", row_index, label)
        if not math.isfinite(reward):
            add(ERROR, "reward", f"reward is {reward} on turn {turn}; rewards must be finite", row_index, label)
        elif abs(reward) > 1:  # runs, but a 0-100 scale read as 0-1 by the trainer's settings and the audit's bars
            add(WARNING, "reward", f"reward {reward:g} on turn {turn} is outside -1..1: the trainers' defaults (KL "
                "coefficients, clipping) and the audit's bars assume rewards of about 0..1; rescale it unless it "
                "is meant", row_index, label)
        done = output["done"]
        if not isinstance(done, bool):
            add(ERROR, "types", f"done must be a bool, got {type(done).__name__} {_short(done, 40)} on turn {turn}",
                row_index, label)
        if not isinstance(output["metadata"], dict):
            add(ERROR, "types", f"metadata must be a dict, got {type(output['metadata']).__name__} on turn {turn}",
                row_index, label)
        post = output.get("postprocessed_action")
        if post is not None and not isinstance(post, str):
            add(ERROR, "types", f"postprocessed_action must be a str or None, got {type(post).__name__}", row_index, label)
        return float(reward), bool(done)

    # ----- a whole row --------------------------------------------------------------------------
    def row(self, row_index: Optional[int], row: Mapping[str, Any], actions: Sequence[Tuple[str, str]]) -> None:
        prompt, extras = row.get("prompt"), row_extras(row)
        self.report.rows_checked += 1
        own = reference_action(row)
        self.report.rows_without_reference += own is None
        row_actions = ([("reference answer", own)] if own is not None else []) + list(actions)
        for label, action in row_actions:
            self.row_unusable = False
            first = self.episode(row_index, prompt, extras, label, action)
            if self.row_unusable:
                return  # make/init fail for this row: every other action would repeat the same finding
            if first is None:
                continue
            if label == "reference answer" and first.rewards and max(first.rewards) <= 0:
                # a row the env itself makes: its reference answer earning nothing is the env's bug, not a note
                self.add(ERROR if self.own_rows else WARNING, "reward", f"the row's reference answer earned "
                         f"{first.rewards} (expected a positive reward; is the ground truth or the reward function "
                         "wrong, or did a sandbox the env runs fail? see the step's metadata)", row_index, label)
            if self.check_determinism:
                second = self.episode(row_index, prompt, extras, label, action, report=False)
                if second is None:
                    self.add(ERROR, "determinism", "the same action failed on a second fresh env but not on the "
                             "first; episodes must not depend on earlier ones", row_index, label)
                elif not _same_rewards(second.rewards, first.rewards):  # a NaN is reported as not finite
                    self.add(ERROR, "determinism", f"the same action on two fresh envs gave rewards {first.rewards} "
                             f"and {second.rewards}; rewards must be deterministic", row_index, label)


def _rows_from(rows: Any) -> List[Tuple[Optional[str], Any]]:
    """``(place, raw row)`` pairs (not yet validated, so that each bad row becomes a finding instead of an abort);
    the place of a file's row names the file and line (:func:`skyrl_gym.data.row_place`), else None."""
    if rows is None:
        return [(None, {"prompt": [{"role": "user", "content": "Hello."}]})]
    if isinstance(rows, (str, Path)):
        return list(placed_rows(rows))
    if isinstance(rows, Mapping):
        return [(None, rows)]
    return [(None, row) for row in rows]


GOLDEN_FILE = "golden.json"
# A golden row's string that starts with this names a file shipped beside golden.json (a database, a corpus).


class NoRowsFor(LookupError):
    """No rows to check an env with: it has no working dataset builder and ships no golden cases."""


class BrokenBuilder(Exception):
    """The env's dataset builder breaks its contract (an invalid row, other rows for the same seed, split and
    index): the env's bug, a failed check, not a bad argument."""


def _same_rows_again(env_id: str, rows: List[Dict[str, Any]], size: int, seed: int,
                     builder_kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`BrokenBuilder` unless a second build, one row longer, begins with ``rows``: row ``i`` must
    depend only on ``(seed, split, i)`` and the keyword arguments (``rebuild_row`` and a resumed run rely on it)."""
    from skyrl_gym import datasets

    try:
        again = datasets.build_rows(env_id, split="test", size=size + 1, seed=seed, **dict(builder_kwargs))
    except Exception:  # failing the second time (a file, the network): the rows it gave are checked as they are
        return
    plain = datasets.record_json
    for index, (first, second) in enumerate(zip(rows, again)):
        if plain(first) != plain(second):
            fields = sorted(key for key in set(first) | set(second) if plain(first.get(key)) != plain(second.get(key)))
            raise BrokenBuilder(
                f"the dataset builder of {env_id!r} made another row {index + 1} when built again with the same "
                f"seed={seed} and split='test' (fields that differ: {', '.join(fields)}): row i must depend only on "
                "(seed, split, i) and the builder's arguments; seed its random generator with them (e.g. "
                "random.Random(f'{seed}-{split}-{i}')), and never read the clock")
    if len(again) < len(rows):
        raise BrokenBuilder(f"the dataset builder of {env_id!r} made {len(rows)} rows for size={size}, and "
                            f"{len(again)} for size={size + 1}")


SPLIT_TEST_ROWS, SPLIT_TRAIN_ROWS, SPLIT_BUDGET_S = 20, 100, 10.0


def split_findings(env_id: str, builder_kwargs: Optional[Mapping[str, Any]] = None, seed: int = 0) -> List[Finding]:
    """A warning where test rows of the env's dataset builder repeat tasks of its train rows (two or more of the
    first ``SPLIT_TEST_ROWS``, against the first ``SPLIT_TRAIN_ROWS``, fewer where building them takes longer than
    ``SPLIT_BUDGET_S``): a score on them is not held out. None where the builder has no train split or cannot
    build here."""
    from skyrl_gym import datasets

    try:
        overlap = datasets.split_overlap(env_id, test_size=SPLIT_TEST_ROWS, train_size=SPLIT_TRAIN_ROWS, seed=seed,
                                         budget_s=SPLIT_BUDGET_S, **dict(builder_kwargs or {}))
    except datasets.InvalidBuiltRow as exc:  # a train row that is no row: the builder's bug, as a test row's is
        return [Finding(ERROR, "builder", f"{exc}; fix the env's dataset builder (its rows are what training reads)",
                        env_id)]
    except Exception:  # only a test split (humaneval), or the network: nothing to compare
        return []
    if len(overlap.shared) < 2:
        return []
    shown = ", ".join(str(i + 1) for i in overlap.shared[:8]) + (", ..." if len(overlap.shared) > 8 else "")
    return [Finding(WARNING, "split", (
        f"{len(overlap.shared)} of the first {overlap.test_rows} test rows repeat a task (prompt and ground truth) of "
        f"the first {overlap.train_rows} train rows (test rows {shown}): a test score on them is not held out. Draw "
        "each split's tasks from its own part of the task space: skyrl_gym.datasets.split_items(pool, split) for a "
        "list, draw_for_split(split, draw) for a generator (docs/new-environment.md, 'Splits')"), env_id)]


def golden_rows(env_id: str) -> Tuple[List[Dict[str, Any]], Optional[Path]]:
    """The golden cases shipped with an env: the rows of ``golden.json`` beside its entry point's module whose
    ``env_class`` is ``env_id`` (a JSON list of rows, each with a ``reference_action``); ``([], None)`` if
    none. A string value ``"$GOLDEN_DIR/NAME"`` is the file NAME shipped beside ``golden.json`` (an SQL env's
    database)."""
    import importlib.util

    entry_point = spec(env_id).entry_point
    module = entry_point.partition(":")[0] if isinstance(entry_point, str) else getattr(entry_point, "__module__", None)
    try:
        found = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):
        found = None
    if found is None or not found.origin:
        return [], None
    path = Path(found.origin).parent / GOLDEN_FILE
    if not path.exists():
        return [], None
    rows = [row for _, row in placed_rows(path)
            if isinstance(row, Mapping) and row.get("env_class") == spec(env_id).id]
    return rows, (path if rows else None)


class DefaultRows(NamedTuple):
    rows: List[Dict[str, Any]]
    source: str
    """Where the rows came from, in words (``check`` and ``audit`` print it)."""
    built: bool
    """Whether the env's dataset builder made them (then ``check`` also compares its splits)."""


def default_rows(env_id: str, size: int = 2, seed: int = 0, builder_kwargs: Optional[Mapping[str, Any]] = None,
                 command: str = "check", verify: bool = True) -> DefaultRows:
    """Rows to check ``env_id`` with when none are given, and where they came from: ``size`` rows of the test split
    from its dataset builder (:mod:`skyrl_gym.datasets`, with ``builder_kwargs``), else the golden cases shipped
    with it (also when the builder fails, e.g. without network access). Raises :class:`NoRowsFor` naming what to
    pass instead to ``skyrl-gym COMMAND`` (check, or audit), and :class:`BrokenBuilder` for a builder that makes an
    invalid row, or (with ``verify``: ``check`` and ``audit``) other rows when built again."""
    from skyrl_gym import datasets

    env_id = spec(env_id).id
    builder_error, advice = None, ""
    if datasets.has_dataset(env_id):
        try:
            rows = datasets.build_rows(env_id, split="test", size=size, seed=seed, **dict(builder_kwargs or {}))
        except Exception as exc:  # a builder that needs the network or an extra: fall back to golden cases
            if isinstance(exc, datasets.InvalidBuiltRow):  # not an argument's fault: the builder's own bug
                raise BrokenBuilder(f"{exc}; fix the env's dataset builder (its rows are what training reads)") from None
            builder_error = f"{type(exc).__name__}: {exc}"
            if "Hub" in str(exc) and os.environ.get("HF_HUB_OFFLINE") != "1":  # after 24 s of the hub's retries
                builder_error += "; without network access, HF_HUB_OFFLINE=1 skips the Hub at once"
            if isinstance(exc, ImportError) or "pip install" in str(exc):  # a package the builder needs
                advice = "Install what it names"
            elif builder_kwargs:
                advice = "Correct the --builder-args it names"
            elif command == "check":
                advice = (f"Give the builder what it needs (skyrl-gym check {env_id} --builder-args "
                          f"'{{\"key\": \"value\"}}')")
            else:
                advice = "Give the builder what it needs"
        else:
            if rows:
                if verify:
                    _same_rows_again(env_id, rows, size, seed, builder_kwargs or {})
                extra = "".join(f", {key}={value!r}" for key, value in sorted((builder_kwargs or {}).items()))
                return DefaultRows(rows, f"{len(rows)} row(s) from the dataset builder: skyrl_gym.datasets.build_rows("
                                         f"{env_id!r}, split='test', size={size}, seed={seed}{extra})", True)
            builder_error = "it built no rows"
    rows, path = golden_rows(env_id)
    if rows:
        why = f" (its dataset builder failed: {builder_error})" if builder_error else ""
        return DefaultRows(rows[:size], f"{len(rows[:size])} golden case(s) from {path}{why}", False)
    if builder_error:
        raise NoRowsFor(f"cannot build rows for {env_id!r}: its dataset builder failed ({builder_error}) and it ships "
                        f"no golden cases. {advice}, or pass rows: skyrl-gym {command} {env_id} --rows FILE (JSONL, "
                        "JSON or Parquet rows; see the README's 'The dataset row').")
    raise NoRowsFor(f"{env_id!r} has no dataset builder and ships no golden cases, so there are no rows to check it "
                    f"with: pass rows in the README's row format, skyrl-gym {command} {env_id} --rows FILE (see "
                    f"`skyrl-gym info {env_id}` for the row it expects).")


def check_env(
    env_or_id: Any,
    rows: Union[str, Path, Iterable[Mapping[str, Any]], Mapping[str, Any], None] = None,
    *,
    env_config: Any = None,
    actions: Optional[Mapping[str, str]] = None,
    adversarial: bool = True,
    huge_action_chars: int = HUGE_ACTION_CHARS,
    max_turns_slack: int = 2,
    step_timeout_s: Optional[float] = STEP_TIMEOUT_S,
    check_determinism: bool = True,
    max_rows: Optional[int] = None,
    make_kwargs: Optional[Mapping[str, Any]] = None,
    max_observation_chars: int = 100_000,
    gymnasium: bool = False,
    check_splits: bool = True,
    own_rows: bool = False,
) -> CheckReport:
    """Check an env against the contract and return a :class:`CheckReport`.

    Args:
        env_or_id: a registered id, an :class:`EnvSpec`, an Env class or factory taking
            ``(env_config=, extras=)``, or an env instance (rebuilt from its spec or class per row).
        rows: dataset rows (a list of dicts or a JSONL/JSON/Parquet path); each is validated and
            reported by number. Without rows, a registered id is checked on the rows ``skyrl-gym check ID`` uses
            (:func:`default_rows`: its dataset builder's, else its golden cases; ``report.rows_from`` says
            which); anything else, or an id with neither, on a single user message with empty extras.
        env_config: passed to every env built.
        actions: extra ``{label: text}`` actions to play on every row.
        adversarial: play the built-in adversarial actions (empty, huge, unicode, unclosed tags).
        huge_action_chars: size of the huge action.
        max_turns_slack: steps allowed past ``max_turns`` before "not done" is reported.
        step_timeout_s: a make/init/step/close taking longer is reported as hanging (None: no limit).
        check_determinism: play every action twice on fresh envs and compare rewards.
        max_rows: check at most this many rows.
        make_kwargs: other keyword arguments for the env's constructor.
        max_observation_chars: warn when one step's new messages hold more characters than this.
        gymnasium: also run Gymnasium's ``check_env`` on the env through the bridge (needs gymnasium).
        check_splits: with rows from the env's dataset builder, warn where its test rows repeat its train rows
            (:func:`split_findings`: builds up to ``SPLIT_TRAIN_ROWS`` train rows within ``SPLIT_BUDGET_S``).
        own_rows: the given ``rows`` are the env's own (:func:`default_rows` made them, as ``skyrl-gym check ID``
            does): their faults are the env's, reported as errors (as without ``rows``).
    """
    factory = _EnvFactory(env_or_id, env_config, make_kwargs or {})
    report = CheckReport(env_id=factory.env_id)
    checker = _Checker(factory, report, max_turns_slack, step_timeout_s, check_determinism, max_observation_chars)
    compare_splits = False
    if rows is None and isinstance(env_or_id, (str, EnvSpec)):  # the rows `skyrl-gym check ID` checks
        try:
            rows, report.rows_from, built = default_rows(factory.env_id, size=max_rows or 2)
            checker.own_rows = True
            compare_splits = check_splits and built
        except BrokenBuilder as exc:
            report.findings.append(Finding(ERROR, "builder", str(exc), factory.env_id))
            return report
        except (NoRowsFor, UnregisteredEnv) as exc:  # an EnvSpec of no registry has no builder either
            report.rows_from = f"one user message with no extras (none given, and none to build: {exc})"
    checker.own_rows = checker.own_rows or own_rows
    checker.stand_in = rows is None
    try:
        raw_rows = _rows_from(rows)
    except (OSError, DataError, ValueError) as exc:
        report.findings.append(Finding(ERROR, "row", f"cannot read rows: {exc}", factory.env_id))
        return report
    if not raw_rows:
        report.findings.append(Finding(ERROR, "row", "no rows to check", factory.env_id))
        return report

    play: List[Tuple[str, str]] = list(ADVERSARIAL_ACTIONS) if adversarial else []
    if adversarial and huge_action_chars > 0:
        # Long text with an answer-looking tail: envs must bound the work they do per character.
        tail = " The answer is #### 7 \\boxed{7} <answer>7</answer>"
        play.insert(1, (f"huge string ({huge_action_chars:,} chars)", "x" * max(0, huge_action_chars - len(tail)) + tail))
    play += list((actions or {}).items())
    if not play and all(reference_action(r) is None for _, r in raw_rows if isinstance(r, Mapping)):
        report.findings.append(Finding(WARNING, "row", "no actions to play (adversarial=False, no actions given, "
                                       "no reference answers in the rows)", factory.env_id))

    valid_rows: List[Mapping[str, Any]] = []
    for index, (place, raw) in enumerate(raw_rows):
        if max_rows is not None and index >= max_rows:
            break
        try:
            row = validate_row(raw, index, place=place)
        except DataError as exc:
            report.findings.append(Finding(ERROR, "row", str(exc), factory.env_id, index))
            continue
        env_class = row.get("env_class")
        if (isinstance(env_or_id, str) and env_class and env_class != env_or_id and env_class != factory.env_id
                and resolved_id(env_class) != factory.env_id):  # an alias or an unversioned id names this env
            if checker.own_rows:  # the env's own builder names another env: training on its rows would fail
                report.findings.append(Finding(ERROR, "row", f"the env's own rows name env_class {env_class!r}, "
                                               f"not {factory.env_id!r}: a trainer would build that env for them "
                                               "(is the builder's env_class misspelt?)", factory.env_id, index))
            else:
                report.findings.append(Finding(WARNING, "row", f"the row's env_class is {env_class!r}, checking "
                                               f"it with {factory.env_id!r}", factory.env_id, index))
        checker.row(index, row, play)
        valid_rows.append(row)
    if gymnasium and valid_rows:
        _check_with_gymnasium(factory, report, valid_rows)
    if compare_splits and not report.all_skipped:  # a machine that cannot run the env: nothing checked
        report.findings.extend(split_findings(factory.env_id))
    return report


def _check_with_gymnasium(factory: _EnvFactory, report: CheckReport, rows: List[Mapping[str, Any]]) -> None:
    """Run Gymnasium's own ``check_env`` on the env through the bridge; its warnings become warnings."""
    import warnings

    try:
        from gymnasium.utils.env_checker import check_env as gymnasium_check_env

        from skyrl_gym import gymnasium_bridge
    except ImportError as exc:
        report.findings.append(Finding(ERROR, "gymnasium", f"cannot run Gymnasium's checker: {exc}", factory.env_id))
        return
    if factory.env_id not in registry:
        report.findings.append(Finding(WARNING, "gymnasium", "Gymnasium's checker needs a registered env id; skipped",
                                       factory.env_id))
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # through gymnasium.make, so that env.spec is set and the determinism checks run
            env = gymnasium_bridge.make(factory.env_id, env_config=copy.deepcopy(factory.env_config), rows=rows,
                                        **factory.make_kwargs)
            try:
                gymnasium_check_env(env.unwrapped, skip_render_check=True)
            finally:
                env.close()
        except Exception as exc:
            report.findings.append(Finding(ERROR, "gymnasium", f"Gymnasium's check_env failed: "
                                           f"{_describe_exception(exc)}", factory.env_id))
    for warning in caught:
        report.findings.append(Finding(WARNING, "gymnasium", f"Gymnasium's check_env warned: {warning.message}",
                                       factory.env_id))


__all__ = ["check_env", "default_rows", "golden_rows", "reference_action", "BrokenBuilder", "NoRowsFor",
           "CheckReport", "Finding", "ADVERSARIAL_ACTIONS", "HUGE_ACTION_CHARS", "ERROR", "WARNING",
           "SKIPPED"]
