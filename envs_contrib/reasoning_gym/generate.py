"""The one place that calls reasoning-gym: build a dataset from a name and settings, and fetch entry ``i``.

Entries are generated in chunks of :data:`CHUNK`: row ``i`` of a split is item ``i % CHUNK`` of the dataset seeded
``base + i - i % CHUNK``, where ``base`` derives from the row seed and the split (most reasoning-gym datasets draw
item ``j`` of the dataset seeded ``s`` from ``Random(s + j)``, so every position of a stream gets its own
generator: seeding the chunks ``base``, ``base + 1``, ... made row 500 repeat row 1), if its question is one of the
split's (:func:`skyrl_gym.datasets.split_of`: a hash of the question
puts a tenth of all questions in test, a tenth in validation); else the first of the row's next tries that is
(:func:`find`, :func:`attempt`). So a row depends only on ``(seed, split, i)`` and the
settings, never on how many rows were asked for (some reasoning-gym datasets, e.g. ``acre``, generate all items
of a size up front), and no question is in two splits: ``tower_of_hanoi``'s default settings make 90 questions,
and each split drew from all of them (14 of 20 test rows were train rows).

Settings come from rows and from serve-env's clients, and reasoning-gym checks little of them: a 200-byte
request for ``rotate_matrix`` with ``min_n = max_n = 20000`` would build a 400-million-cell question (16 GB)
on the caller's thread, and ``puzzle24`` with ``max_value=1`` draws for ever. Settings other than reasoning-gym's
defaults are first tried in a child process (:func:`vet`: the dataset built and :data:`VET_ITEMS` entries
generated, within :data:`VET_S` seconds, :data:`VET_MEMORY_BYTES` of memory and questions of at most
:data:`MAX_QUESTION_CHARS` characters), once per process and settings, a composite's each component on its own.
A try draws a few entries, and the draws of a fixed seed can be searched for settings whose tried entries are
small and whose others are not: so each entry of such settings is also generated in a child process
(:func:`_entry_apart`), under the same bounds, and only the dataset the scorer needs is built in this one.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Mapping, Optional, Tuple

from skygym_contrib.reasoning_gym.names import COMPOSITE_DEFAULT, DATASETS

CHUNK = 500
VET_ITEMS = 8
"""Entries the child process of :func:`vet` generates (datasets draw each entry's size within the settings' range:
eight draws meet its upper part)."""
VET_S = 60.0
VET_MEMORY_BYTES = 2 << 30
MAX_QUESTION_CHARS = 200_000
"""A longer question (or answer) is no training row: it would not fit any model's context."""
VETS_AT_ONCE = 2
VET_WAIT_S = 3 * VET_S
"""How long one dataset's settings (a composite's parts together) may wait for free children and their tries."""


class SettingsError(ValueError):
    """Settings that the reasoning-gym dataset rejects; the message names the dataset and its valid settings."""


def base_seed(seed: int, split: str) -> int:
    digest = hashlib.sha256(f"{seed}:{split}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


ATTEMPTS = 500
"""How many entries :func:`find` tries for one row before it says the settings make too few distinct questions
(a split whose part of the questions is 1% of the draws still finds one 99 times in 100)."""


SPARE = {"train": 10, "validation": 50, "test": 50}
"""Entries set aside for each row of a split, for when its first is another split's question: a train row needs
its spare ones once in five, a test row nine times in ten (ten tries on average). They divide :data:`CHUNK`, so
a row's spare entries are items of one dataset, which the spare entries of ``CHUNK // SPARE`` rows share
(building a dataset costs up to 0.3 s: one per try would cost more than the entries)."""


def attempt(seed: int, split: str, index: int, number: int) -> Tuple[int, int]:
    """``(dataset seed, item index)`` of try ``number`` for row ``index`` of ``split``: position ``index`` of the
    split's own stream first, then the row's :data:`SPARE` positions of the split's spare stream, then the
    positions of a stream of the row's own. Position ``at`` of the stream seeded ``base`` is item ``at % CHUNK`` of
    the dataset seeded ``base + at - at % CHUNK``."""
    spare = SPARE.get(split, SPARE["test"])
    if number == 0:
        at, label = index, split
    elif number <= spare:
        at, label = index * spare + number - 1, f"{split}/spare"
    else:
        at, label = number - 1 - spare, f"{split}/row/{index}"
    return (base_seed(seed, label) + at - at % CHUNK) % (2**32), at % CHUNK


_create = threading.local()
"""``deadline``: the ``time.monotonic()`` by which this thread's :func:`find` must be done, where it has a budget
(an env a client creates); the waits for children and their tries end by it too."""


def _deadline() -> float:
    """:data:`VET_WAIT_S` from now, or the create's deadline (:data:`_create`) where that is sooner."""
    own = time.monotonic() + VET_WAIT_S
    create = getattr(_create, "deadline", None)
    return own if create is None else min(own, create)


def find(name: str, settings: str, seed: int, split: str, index: int,
         budget_s: Optional[float] = None) -> Tuple[int, int, Dict[str, Any]]:
    """``(dataset seed, item index, entry)`` of row ``index`` of ``split``: of the row's tries (:func:`attempt`),
    the first whose question belongs to ``split``. With ``budget_s`` (an env made from ``env_config``: a client may
    choose the seed and index that need the most tries), the tries and their waits end within it; the rows of
    ``build_rows`` have none, as a row may not depend on how fast the machine is."""
    from skyrl_gym.datasets import NoTaskForSplit, check_generated_split, draw_for_split

    check_generated_split(f"reasoning_gym/{name}", split)
    numbers = itertools.count()
    deadline = None if budget_s is None else time.monotonic() + budget_s

    def draw() -> Tuple[int, int, Dict[str, Any]]:
        number = next(numbers)
        if number and deadline is not None and time.monotonic() > deadline:
            raise SettingsError(f"reasoning-gym dataset {name!r}: {number} entries for row {index} of the "
                                f"{split!r} split took more than {budget_s:g} s, and none was a question of that "
                                f"split: the settings {settings[:300]} are slow to generate, or make few questions "
                                "of that split (a tenth of them are test's, a tenth validation's)")
        dataset_seed, item = attempt(seed, split, index, number)
        return dataset_seed, item, entry(name, settings, dataset_seed, item)

    outer, _create.deadline = getattr(_create, "deadline", None), deadline
    try:
        return draw_for_split(split, draw, key=lambda found: found[2]["question"], tries=ATTEMPTS)
    except NoTaskForSplit as exc:
        raise SettingsError(f"reasoning-gym dataset {name!r} with the settings {settings[:300]}: {exc}") from None
    finally:
        _create.deadline = outer


# Settings that name a file (spell_backward's data_file, figlet_font's static_font, ...): reasoning-gym opens them
# relative to its own package, where an absolute path or ``..`` reaches any file (its words came back in the
# reward's reason and error text; /dev/zero filled memory). Rows and serve-env's clients set these.
_NAMES_A_FILE = re.compile(r"file|path|dir|font", re.IGNORECASE)


def check_no_paths(name: str, config: Mapping[str, Any]) -> None:
    """A setting that names a file may be a plain name only (one the package looks up among its own files); the
    same for each part of a composite."""
    for key, value in config.items():
        names = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else []
        if _NAMES_A_FILE.search(key) and not all(  # numbers name no file (min_path_length)
                not isinstance(n, str) or (re.fullmatch(r"\w[\w.+-]*", n) and ".." not in n) for n in names):
            raise SettingsError(f"reasoning-gym dataset {name!r}: setting {key}={str(value)[:80]!r} must be the "
                                "plain name of a file reasoning-gym ships (no folder, no '..'): settings come from "
                                "rows and clients, and may not open files elsewhere")
    if name == "composite":
        for spec in config.get("datasets") or []:
            if isinstance(spec, Mapping) and isinstance(spec.get("config"), Mapping):
                check_no_paths(str(spec.get("name")), spec["config"])


def settings_json(settings: Mapping[str, Any]) -> str:
    return json.dumps(dict(settings), sort_keys=True)


def check_name(name: str) -> None:
    if name not in DATASETS:
        import difflib

        close = difflib.get_close_matches(name, list(DATASETS), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise SettingsError(f"reasoning-gym has no dataset {name!r}.{hint} Run `skyrl-gym list` for the "
                            "reasoning_gym/<name> ids.")


@functools.lru_cache(maxsize=64)
def dataset(name: str, settings: str, seed: int) -> Any:
    """The reasoning-gym dataset ``name`` with ``settings`` (JSON of config fields) and ``seed``; cached. Settings
    other than reasoning-gym's defaults are vetted first (:func:`vet`), a composite's each component on its own."""
    built = _build(name, settings, seed, construct=False)  # the settings' own errors first, named
    deadline = _deadline()  # the parts of a composite share it
    for part, part_settings in _untried_parts(name, settings):
        vet(part, settings_json(part_settings), deadline)
    with _here:
        return built()


_here = threading.Lock()
"""Held while reasoning-gym works in this process (a dataset built, an entry of default settings generated): that
work is Python holding the GIL, so it gains nothing from running side by side, and on a server sixteen creates of
new seeds at once (futoshiki, zebra_puzzles) took the steps of other clients' sessions from 2 ms to over a second.
One at a time leaves them their share; the callers wait their turn (none is refused: a trainer's env threads are
callers too)."""


def _untried_parts(name: str, settings: str) -> list:
    """The parts of ``name`` (see :func:`_parts`) whose settings are not reasoning-gym's defaults."""
    return [(part, config) for part, config in _parts(name, json.loads(settings)) if not _is_default(part, config)]


def _parts(name: str, config: Mapping[str, Any]) -> list:
    """``(dataset, settings)`` of what ``name`` generates from: a composite's components, each vetted on its own (a
    component of small weight would hide among the entries a try of the whole composite draws)."""
    if name != "composite":
        return [(name, config)]
    specs = config.get("datasets") or COMPOSITE_DEFAULT
    return [part for spec in specs if isinstance(spec, Mapping)  # a composite in a composite too
            for part in _parts(str(spec.get("name")), dict(spec.get("config") or {}))]


def _build(name: str, settings: str, seed: int, construct: bool = True) -> Any:
    """The dataset, or (``construct=False``) the settings checked and a function that builds it."""
    check_name(name)
    try:
        from reasoning_gym.factory import DATASETS as RG_DATASETS
    except ImportError as exc:
        raise SettingsError("the reasoning_gym/* envs need the reasoning-gym package: "
                            "pip install 'skyrl-gym[reasoning-gym]'") from exc
    dataset_cls, config_cls = RG_DATASETS[name]
    fields = {f.name for f in dataclasses.fields(config_cls)}
    config: Dict[str, Any] = json.loads(settings)
    unknown = sorted(set(config) - fields)
    if unknown:
        valid = ", ".join(sorted(fields - {"seed", "size"}))
        raise SettingsError(f"reasoning-gym dataset {name!r} has no setting(s) {unknown}; its settings are: {valid}")
    if "seed" in config or "size" in config:
        raise SettingsError(f"give seed and size to build_rows, not as settings of {name!r}")
    check_no_paths(name, config)
    if name == "composite":
        from reasoning_gym.composite import DatasetSpec

        config["datasets"] = [DatasetSpec(**spec) for spec in config.get("datasets") or COMPOSITE_DEFAULT]

    def rejected(exc: Exception) -> SettingsError:
        why = str(exc) or type(exc).__name__
        return SettingsError(f"reasoning-gym rejected the settings {settings} of {name!r}: {why}")

    try:
        built = config_cls(**config, seed=seed, size=CHUNK)
    except (AssertionError, ValueError, TypeError) as exc:
        raise rejected(exc) from exc

    def construct_dataset() -> Any:
        try:
            return dataset_cls(config=built)
        except (AssertionError, ValueError, TypeError) as exc:
            raise rejected(exc) from exc

    return construct_dataset() if construct else construct_dataset


def _is_default(name: str, config: Mapping[str, Any]) -> bool:
    """Whether ``config`` sets each field to reasoning-gym's own default for ``name``. Any other value is vetted, a
    smaller number too: some generators draw until a condition holds, which a small value can make impossible
    (puzzle24 with ``max_value=1`` looks for ever for four numbers that make 24)."""
    from reasoning_gym.factory import DATASETS as RG_DATASETS

    if name not in RG_DATASETS:
        return False
    defaults = {}
    for field in dataclasses.fields(RG_DATASETS[name][1]):
        if field.default is not dataclasses.MISSING:
            defaults[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            defaults[field.name] = field.default_factory()  # type: ignore[misc]
    return all(key in defaults and value == defaults[key] and type(value) is type(defaults[key])
               for key, value in config.items())


_vetted: "collections.OrderedDict[tuple, Optional[str]]" = collections.OrderedDict()  # settings -> None or refusal
_vetting: Dict[tuple, threading.Event] = {}  # settings being vetted now -> set when done
_vet_lock = threading.Lock()
_vet_slots = threading.BoundedSemaphore(VETS_AT_ONCE)


def vet(name: str, settings: str, deadline: Optional[float] = None) -> None:
    """Build ``name`` with ``settings`` and generate :data:`VET_ITEMS` entries in a child process under
    :data:`VET_S` seconds and :data:`VET_MEMORY_BYTES`, or raise :class:`SettingsError` saying which bound they
    passed. A verdict is remembered, but for a time-out (a busy machine can cause one);
    callers with the same settings wait for the one child; at most :data:`VETS_AT_ONCE` children run at a time,
    and a caller is refused rather than wait past ``deadline`` (``time.monotonic()``; default :data:`VET_WAIT_S`
    from now) or start a child that could run past it: a server's clients cannot hold its threads for longer by
    sending ever new settings, or a composite of many parts."""
    key = (name, settings)
    deadline = time.monotonic() + VET_WAIT_S if deadline is None else deadline
    while True:
        with _vet_lock:
            if key in _vetted:
                refusal = _vetted[key]
                if refusal:
                    raise SettingsError(refusal)
                return
            running = _vetting.get(key)
            if running is None:
                _vetting[key] = threading.Event()
                break
        if not running.wait(max(0.0, deadline - time.monotonic())):
            raise _busy(name)
    try:
        room = deadline - time.monotonic() - VET_S  # a child started later could run past the deadline
        if room < 0 or not _vet_slots.acquire(timeout=room):
            raise _busy(name)
        try:
            refusal, lasting = _vet_in_child_process(name, settings)
        finally:
            _vet_slots.release()
        with _vet_lock:
            if lasting:
                _vetted[key] = refusal
            while len(_vetted) > 1024:
                _vetted.popitem(last=False)
    finally:
        with _vet_lock:
            _vetting.pop(key).set()
    if refusal:
        raise SettingsError(refusal)


def _busy(name: str) -> SettingsError:
    return SettingsError(f"reasoning-gym dataset {name!r}: its settings could not be tried within the create's "
                         f"{VET_WAIT_S:g} s (at most {VETS_AT_ONCE} tries run at a time, each up to {VET_S:g} s, and a composite's "
                         "parts share the time); try again later: the settings already tried are remembered")


def _vet_in_child_process(name: str, settings: str) -> Tuple[Optional[str], bool]:
    """``(None, True)`` where ``settings`` stayed within the bounds in the child, else the refusal and whether it
    lasts (a time-out may not). The settings go on the child's stdin: an argument holds at most 128 KiB."""
    command = [sys.executable, "-m", __name__, name, str(VET_ITEMS), str(VET_MEMORY_BYTES), str(MAX_QUESTION_CHARS)]
    # -m puts the working folder first on the child's path: the interpreter's own folder, not the caller's
    folder = os.path.dirname(os.path.abspath(sys.executable))
    try:
        done = subprocess.run(command, input=settings, capture_output=True, text=True, timeout=VET_S, cwd=folder)
    except subprocess.TimeoutExpired:
        return (f"reasoning-gym dataset {name!r}: the settings {settings[:300]} took more than {VET_S:g} s to "
                f"generate {VET_ITEMS} entries; lower them"), False
    if done.returncode == 0:
        return None, True
    lines = (done.stderr or done.stdout).strip().splitlines()
    why = lines[-1] if lines else f"the child process exited with status {done.returncode}"
    # a file's folders stay on this machine: the refusal reaches serve-env's clients ("No such file or directory:
    # '/root/.cache/.../site-packages/reasoning_gym/data/x.txt'" told one where the server is installed)
    why = _FOLDERS.sub("", why)
    return f"reasoning-gym dataset {name!r}: the settings {settings[:300]} were refused: {why[:500]}", True


_FOLDERS = re.compile(r"(?<![\w.])/(?:[^\s'\":/]+/)+")


def _cap_memory(memory_bytes: int) -> None:
    """In a child: what Python and reasoning-gym's imports already mapped, plus ``memory_bytes``, is all it may map."""
    import resource

    from reasoning_gym.factory import DATASETS as RG_DATASETS  # noqa: F401  (its memory is not the settings')

    with open("/proc/self/statm") as handle:
        mapped = int(handle.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + memory_bytes, mapped + memory_bytes))


def _too_long(index: int, item: Mapping[str, Any], max_chars: int) -> Optional[str]:
    for field in ("question", "answer"):
        size = len(str(item.get(field) or ""))
        if size > max_chars:
            return (f"entry {index}'s {field} is {size:,} characters long; at most {max_chars:,} are allowed (no "
                    "model's context holds more); lower the settings")
    return None


def _vet_in_child(name: str, settings: str, items: int, memory_bytes: int, max_chars: int) -> int:
    """The child of :func:`vet`: its memory capped, build the dataset and generate the entries; exit status 0
    when they stay within the bounds, else 1 with the reason on stderr's last line."""
    _cap_memory(memory_bytes)
    try:
        built = _build(name, settings, seed=0)
        for index in range(items):
            refusal = _too_long(index, built[index], max_chars)
            if refusal:
                print(refusal, file=sys.stderr)
                return 1
    except MemoryError:
        print(f"generating {items} entries needs more than {memory_bytes >> 20:,} MiB of memory; lower the "
              "settings", file=sys.stderr)
        return 1
    except SettingsError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


def _entries_in_child(memory_bytes: int, max_chars: int) -> int:
    """The child of :class:`_EntryChild`: its memory capped, answer each request line with a frame; reasoning-gym's
    own prints go to stderr, not into the frames."""
    import pickle

    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _cap_memory(memory_bytes)
    frames.write(bytes(8))  # started
    frames.flush()
    built = functools.lru_cache(maxsize=4)(lambda name, settings, seed: _build(name, settings, seed))
    for line in sys.stdin:
        name, settings, seed, index = json.loads(line)
        found: Optional[Dict[str, Any]] = None
        try:
            found = built(name, settings, seed)[index]
            refusal = _too_long(index, found, max_chars)
        except MemoryError:
            refusal = f"generating it needs more than {memory_bytes >> 20:,} MiB of memory; lower the settings"
        except Exception as exc:
            refusal = f"{type(exc).__name__}: {str(exc)[:500]}"
        payload = pickle.dumps((None, refusal) if refusal else (found, None))
        frames.write(len(payload).to_bytes(8, "big") + payload)
        frames.flush()
    return 0


def entry(name: str, settings: str, seed: int, index: int) -> Dict[str, Any]:
    """Item ``index`` of the dataset seeded ``seed``: ``{"question", "answer", "metadata"}`` (a copy: some
    datasets take seconds to generate one item, e.g. futoshiki, so items are cached)."""
    return copy.deepcopy(_cached_entry(name, settings, seed, index))


@functools.lru_cache(maxsize=1024)
def _cached_entry(name: str, settings: str, seed: int, index: int) -> Dict[str, Any]:
    deadline = _deadline()  # the tries and the wait for a child to generate the entry share it
    built = dataset(name, settings, seed)  # the settings vetted; the scorer's dataset
    if _untried_parts(name, settings):
        return _entry_apart(name, settings, seed, index, deadline)
    with _here:
        return built[index]


CHILD_START_S = 60.0
"""How long a child of :func:`_entry_apart` may take to start (import reasoning-gym), on a busy machine too."""
ENTRY_FRAME_BYTES = 32 << 20
"""The most a child of :func:`_entry_apart` may send back for one entry (its question and answer are bounded by
:data:`MAX_QUESTION_CHARS`, its metadata by the child's memory)."""
_idle_children: "list[_EntryChild]" = []  # at most VETS_AT_ONCE, guarded by _vet_lock


def _entry_apart(name: str, settings: str, seed: int, index: int, deadline: float) -> Dict[str, Any]:
    """Entry ``index`` of the dataset, generated in a long-lived child process within :data:`VET_S` seconds,
    :data:`VET_MEMORY_BYTES` and :data:`MAX_QUESTION_CHARS` (a child that passes a bound is ended; the next entry
    gets a new one). Children and tries share :data:`VETS_AT_ONCE` slots; none is waited for past ``deadline``, nor
    taken when the entry could run past it (a child's start, a second or two, aside)."""
    room = deadline - time.monotonic() - VET_S
    if room < 0 or not _vet_slots.acquire(timeout=room):
        raise SettingsError(f"reasoning-gym dataset {name!r}: no child process was free to generate entry {index} "
                            f"within {VET_WAIT_S:g} s of the create (at most {VETS_AT_ONCE} tries and entries run "
                            "at a time); try again later")
    try:
        with _vet_lock:
            mine = [child for child in _idle_children if child.parent == os.getpid()]
            child = mine[-1] if mine else None
            if child is not None:
                _idle_children.remove(child)
        child = child or _EntryChild()
        found = child.entry(name, settings, seed, index)  # a child that raises has ended
        with _vet_lock:
            _idle_children.append(child)
        return found
    finally:
        _vet_slots.release()


def _after_fork_in_child() -> None:
    """A forked process (a DataLoader worker, ``datasets.map(num_proc=...)``) starts with none of its parent's
    children, tries or locks: the parent's children answer the parent, and its locks may be held by threads the
    fork did not copy."""
    global _vet_lock, _vet_slots, _here, _vetting
    _idle_children.clear()
    _vetting = {}
    _vet_lock, _vet_slots, _here = threading.Lock(), threading.BoundedSemaphore(VETS_AT_ONCE), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def close_children() -> None:
    """End the idle children of :func:`_entry_apart` (a new one starts when an entry is next asked for)."""
    with _vet_lock:
        children = list(_idle_children)
        _idle_children.clear()
    for child in children:
        child.close()


class _EntryChild:
    """A child process (this module with ``--entries``) that reads ``[name, settings, seed, index]`` lines and
    answers each with a frame: 8 bytes of length, then the pickled ``(entry, refusal)``. The pickle comes from our
    own code in the child, which the settings (data) cannot change; it is read only up to
    :data:`ENTRY_FRAME_BYTES`."""

    def __init__(self) -> None:
        command = [sys.executable, "-m", __name__, "--entries", str(VET_MEMORY_BYTES), str(MAX_QUESTION_CHARS)]
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL,
                                            cwd=os.path.dirname(os.path.abspath(sys.executable)))
        except OSError as exc:  # no processes or files left
            raise SettingsError(f"reasoning-gym: cannot start a child process to generate entries: {exc}") from None
        self.parent = os.getpid()  # a forked process may not talk to it: the answers would cross
        self.started = False  # the child says so (8 zero bytes) once it has imported reasoning-gym

    def entry(self, name: str, settings: str, seed: int, index: int) -> Dict[str, Any]:
        import pickle

        where = f"reasoning-gym dataset {name!r}: entry {index} of seed {seed} with the settings {settings[:300]}"
        try:
            if not self.started:  # its imports are not the entry's time
                if self._read(8, time.monotonic() + CHILD_START_S) != bytes(8):
                    raise EOFError("it wrote something else than its start")
                self.started = True
            deadline = time.monotonic() + VET_S
            assert self.process.stdin is not None
            self.process.stdin.write((json.dumps([name, settings, seed, index]) + "\n").encode())
            self.process.stdin.flush()
            size = int.from_bytes(self._read(8, deadline), "big")
            if size > ENTRY_FRAME_BYTES:
                raise SettingsError(f"{where} is {size:,} bytes pickled; at most {ENTRY_FRAME_BYTES:,} are read")
            try:
                found, refusal = pickle.loads(self._read(size, deadline))
            except (pickle.UnpicklingError, ValueError, TypeError) as exc:
                raise EOFError(f"its answer could not be read: {exc}") from None
        except TimeoutError:
            self.close()
            if not self.started:
                raise SettingsError(f"{where}: the child process to generate it did not start within "
                                    f"{CHILD_START_S:g} s (a busy machine?); try again") from None
            raise SettingsError(f"{where} took more than {VET_S:g} s to generate; lower the settings") from None
        except (OSError, EOFError) as exc:
            self.close()
            raise SettingsError(f"{where}: the child process generating it ended ({exc or type(exc).__name__})"
                                ) from None
        except BaseException:
            self.close()
            raise
        if refusal:
            self.close()  # a MemoryError may have left the child's state half made
            raise SettingsError(f"{where} was refused: {refusal}")
        return found

    def _read(self, size: int, deadline: float) -> bytes:
        import select

        assert self.process.stdout is not None
        stream, chunks, left = self.process.stdout.fileno(), [], size
        while left:
            if not select.select([stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError
            chunk = os.read(stream, min(left, 1 << 20))
            if not chunk:
                raise EOFError(f"exit status {self.process.wait()}")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]


def system_prompt() -> str:
    """reasoning-gym's own default system prompt: think, then the final answer in ``<answer>...</answer>``."""
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return SYSTEM_PROMPTS["default"]


def version() -> Optional[str]:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("reasoning-gym")
    except Exception:
        return None


if __name__ == "__main__":  # the child process of vet(), or of _entry_apart()
    if sys.argv[1] == "--entries":
        sys.exit(_entries_in_child(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(_vet_in_child(sys.argv[1], sys.stdin.read(), *(int(arg) for arg in sys.argv[2:5])))
