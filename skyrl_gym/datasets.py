"""Dataset builders: dataset rows for an env through one public API, never through the env's own modules.

    import skyrl_gym.datasets as datasets

    datasets.has_dataset("multiply")                                          # True
    rows = datasets.build_rows("multiply", split="train", size=512, seed=0, num_digits=1)

A builder is registered beside its env (``skyrl_gym/envs/__init__.py`` for the built-in ones) with
:func:`register_dataset`; third-party packages declare it as an entry point, read on the first lookup
(as envs are)::

    [project.entry-points."skyrl_gym.datasets"]
    my_env = "my_pkg.dataset:build_rows"     # a builder (imported only when rows are built)
    my_pkg = "my_pkg.registration"           # or a module (no colon) that calls register_dataset

A builder is ``builder(split, size, seed, **kwargs) -> iterable of rows``. Its contract:

* row ``i`` depends only on ``(seed, split, i)`` and the keyword arguments, not on ``size``: a
  smaller ``size`` gives a prefix of a larger one, and the same call gives the same rows in any
  process (generated datasets seed their generator from ``seed`` and ``split``; published
  datasets such as GSM8K return their records in the published order and ignore the seed);
* ``size=None`` means every row, for datasets that have an end (generated ones ask for a size);
* a generated dataset's splits share no task: a test score measures what training did not show. Draw a
  split's tasks from its own part of the task space: :func:`split_items` for a finite pool (a word list),
  :func:`draw_for_split` for a generator. ``skyrl-gym check`` warns when test rows repeat train rows.

:func:`build_rows` validates every row (:func:`skyrl_gym.data.validate_row`) and records where it
came from in ``extra_info["origin"]``: the env id, split, seed, index, the builder, and its keyword
arguments as JSON, which is enough to build the same row again.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import itertools
import json
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, TypeVar, Union

from skyrl_gym._load_once import LoadOnce
from skyrl_gym.data import validate_row
from skyrl_gym.errors import DataError, RegistrationError, keyword_hint, refused_keyword

ENTRY_POINT_GROUP = "skyrl_gym.datasets"

Builder = Callable[..., Iterable[Dict[str, Any]]]

_builders: Dict[str, Union[str, Builder]] = {}
_lock = threading.RLock()
plugin_errors: Dict[str, str] = {}


class InvalidBuiltRow(DataError):
    """A dataset builder made a row that is not a valid dataset row: the builder's bug, not its caller's."""


class UnknownDataset(RegistrationError, LookupError):
    """No dataset builder is registered for the env id; the message lists the ones that are."""


def register_dataset(env_id: str, builder: Union[str, Builder], replace: bool = False) -> None:
    """Register the dataset builder of ``env_id``: a callable or a ``"package.module:function"`` string
    (imported on first use, so registering costs nothing)."""
    if not isinstance(env_id, str) or not env_id.strip():
        raise RegistrationError(f"a dataset needs a non-empty env id, got {env_id!r}")
    if isinstance(builder, str):
        if ":" not in builder:
            raise RegistrationError(f"dataset builder {builder!r} of {env_id!r} must have the form 'module:function'")
    elif not callable(builder):
        raise RegistrationError(f"dataset builder of {env_id!r} must be a callable or a 'module:function' string")
    with _lock:
        if env_id in _builders and not replace:
            raise RegistrationError(
                f"a dataset builder for {env_id!r} is already registered; pass replace=True to replace it"
            )
        _builders[env_id] = builder


def deregister_dataset(env_id: str) -> None:
    with _lock:
        if env_id not in _builders:
            raise RegistrationError(f"no dataset builder registered for {env_id!r}")
        del _builders[env_id]


def _load_entry_point_plugins() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            if ":" in ep.value:
                with _lock:
                    _builders.setdefault(ep.name, ep.value)  # an explicit register_dataset() call wins
            else:
                importlib.import_module(ep.value)
        except Exception as exc:  # one broken plugin must not hide the others
            plugin_errors[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"


# Other threads wait until every entry point is read; a plugin module that calls register_dataset() or
# has_dataset() while it is imported runs in the loading thread and sees what is registered so far.
_load_plugins = LoadOnce(_load_entry_point_plugins)


def has_dataset(env_id: str) -> bool:
    """Whether rows for ``env_id`` can be built with :func:`build_rows`."""
    _load_plugins()
    return env_id in _builders


def dataset_ids() -> List[str]:
    """Every env id with a registered dataset builder, sorted."""
    _load_plugins()
    return sorted(_builders)


def builder_name(env_id: str) -> str:
    """``"module:function"`` of the builder of ``env_id`` (as recorded in the rows' origin)."""
    builder = _lookup(env_id)
    if isinstance(builder, str):
        return builder
    return f"{getattr(builder, '__module__', '?')}:{getattr(builder, '__qualname__', repr(builder))}"


def _lookup(env_id: str) -> Union[str, Builder]:
    _load_plugins()
    if env_id in _builders:
        return _builders[env_id]
    suggestions = difflib.get_close_matches(env_id, list(_builders), n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
    broken = f" (its plugin failed to load: {plugin_errors[env_id]})" if env_id in plugin_errors else ""
    raise UnknownDataset(
        f"no dataset builder for env {env_id!r}{broken}.{hint} Envs with one: {', '.join(sorted(_builders))}. "
        "Register one with skyrl_gym.datasets.register_dataset(env_id, builder)."
    )


def _resolve(env_id: str) -> Builder:
    builder = _lookup(env_id)
    if callable(builder):
        return builder
    module_name, _, attr = builder.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise RegistrationError(f"cannot load the dataset builder {builder!r} of env {env_id!r}: {exc}") from exc
    return obj


GENERATED_SPLITS = ("train", "validation", "test")
"""The splits of a generated dataset (each seeds its own rows): a misspelled split would seed another dataset."""


def check_generated_split(dataset: str, split: str) -> None:
    """``ValueError`` naming ``split`` where it is not one of :data:`GENERATED_SPLITS` (with the closest one)."""
    if split in GENERATED_SPLITS:
        return
    close = difflib.get_close_matches(str(split), GENERATED_SPLITS, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"{dataset} has the splits {', '.join(GENERATED_SPLITS)}, not {split!r}{hint}")


# ----- splits that share no task ------------------------------------------------------------------------
T = TypeVar("T")
DRAW_TRIES = 10_000
"""How many draws :func:`draw_for_split` makes before it says the task space is too small for the split."""


def _canonical(value: Any, what: str = "a task") -> str:
    """``value`` as JSON with sorted keys: the same text in every process (``str`` of a set or an object is not)."""
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON (lists, dicts, strings, numbers) to be split the same in every "
                         f"process, got {str(value)[:80]!r} ({exc}); pass key= to choose its JSON part") from None


def split_of(task: Any) -> str:
    """The split a task belongs to, from a hash of its JSON: ``"test"`` for a tenth of all tasks, ``"validation"``
    for another tenth, ``"train"`` for the rest. The same in every process and on every machine."""
    digest = hashlib.sha256(_canonical(task).encode("utf-8")).digest()
    tenth = int.from_bytes(digest[:8], "big") * 10 >> 64
    return "test" if tenth == 0 else "validation" if tenth == 1 else "train"


def split_items(items: Iterable[T], split: str) -> List[T]:
    """The items of a finite pool (a word list) that ``split`` may use: in the pool's sorted order (repeats left
    out), every tenth item from the first is the test split's, every tenth from the second the validation split's,
    the rest train's. No item is in two splits, and each split has one from three items on. An item added to the
    pool moves the later ones to other splits: a new pool is a new dataset."""
    check_generated_split("the pool", split)
    pool = [item for _, item in sorted({_canonical(item, "an item of the pool"): item for item in items}.items())]
    at = {"test": (0,), "validation": (1,)}.get(split)
    mine = [item for k, item in enumerate(pool) if (k % 10 in at if at else k % 10 > 1)]
    if not mine:
        raise ValueError(f"a pool of {len(pool)} task(s) has none for the {split!r} split: it takes three or more "
                         "to keep train, validation and test apart")
    return mine


class NoTaskForSplit(ValueError):
    """:func:`draw_for_split` drew no task of the split: the settings leave too few distinct tasks."""


def draw_for_split(split: str, draw: Callable[[], T], key: Optional[Callable[[T], Any]] = None,
                   tries: int = DRAW_TRIES) -> T:
    """Call ``draw()`` (a generator's next task, from a random generator seeded with ``(seed, split, i)``) until
    what it returns belongs to ``split`` (:func:`split_of` of ``key(task)``, the task itself by default). Raises
    :class:`NoTaskForSplit` after ``tries`` draws: the settings leave too few distinct tasks to keep ``split``
    apart (what ``draw`` raises goes through as it is)."""
    check_generated_split("the generator", split)
    for _ in range(tries):
        task = draw()
        if split_of(task if key is None else key(task)) == split:
            return task
    raise NoTaskForSplit(f"{tries} draws gave no task of the {split!r} split: these settings leave too few distinct "
                     "tasks to keep the splits apart (a tenth of them are test's, a tenth validation's); make the "
                     "task space larger")


def task_key(row: Dict[str, Any]) -> str:
    """What makes two rows the same task: the prompt and ``reward_spec.ground_truth``, as JSON."""
    reward_spec = row.get("reward_spec")
    truth = reward_spec.get("ground_truth") if isinstance(reward_spec, dict) else None
    return record_json([row.get("prompt"), truth])


class SplitOverlap(NamedTuple):
    shared: List[int]
    """Indexes of the test rows whose task (:func:`task_key`) is also a train row's."""
    test_rows: int
    train_rows: int


def split_overlap(env_id: str, test_size: int = 20, train_size: int = 200, seed: int = 0,
                  budget_s: Optional[float] = None, **kwargs: Any) -> SplitOverlap:
    """Which of the first ``test_size`` test rows of ``env_id`` repeat a task of its first ``train_size`` train
    rows (both with ``seed`` and the builder's ``kwargs``). With ``budget_s``, fewer rows where building them
    takes longer (test rows for 30% of it, train rows for the rest; the counts say how many were built: a row is
    not cut short, so a slow one can overrun it)."""
    start = time.monotonic()

    def until(share: float, rows: Iterator[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
        if budget_s is None:
            return rows
        return itertools.takewhile(lambda _: time.monotonic() < start + share * budget_s, rows)

    # a train row first: a builder with no train split (humaneval) fails before any test row is built
    train_rows = iter_rows(env_id, split="train", size=train_size, seed=seed, **kwargs)
    train = [task_key(row) for row in itertools.islice(train_rows, 1)]
    test = list(until(0.3, iter_rows(env_id, split="test", size=test_size, seed=seed, **kwargs)))
    train += [task_key(row) for row in until(1.0, train_rows)]  # the rest of the budget
    seen = set(train)
    return SplitOverlap([i for i, row in enumerate(test) if task_key(row) in seen], len(test), len(train))


def record_json(value: Any) -> str:
    """JSON with sorted keys, anything else as its text (a Path, a NumPy number): for records, row keys and
    comparing rows (NaN equals NaN, an array compares as its text, not element-wise)."""
    return json.dumps(value, sort_keys=True, default=str)


def build_rows(
    env_id: str, split: str = "train", size: Optional[int] = None, seed: int = 0, **kwargs: Any
) -> List[Dict[str, Any]]:
    """``size`` rows (every row when ``None`` and the dataset has an end) of the ``split`` split of
    ``env_id``'s dataset; row ``i`` is the same for the same ``(seed, split, i)`` and ``kwargs``.

    Keyword arguments go to the builder (e.g. ``num_digits`` for ``multiply``, ``source`` for a local
    GSM8K file). Every row is validated; ``extra_info["origin"]`` records how to build it again.
    """
    return list(iter_rows(env_id, split, size, seed, **kwargs))


def iter_rows(
    env_id: str, split: str = "train", size: Optional[int] = None, seed: int = 0, **kwargs: Any
) -> Iterator[Dict[str, Any]]:
    """:func:`build_rows`'s rows one at a time, each built when it is asked for. ``size`` and ``split`` are checked
    at once, and the builder's own arguments where the builder checks them before its first row."""
    if size is not None and (not isinstance(size, int) or size < 0):
        raise ValueError(f"size must be a non-negative integer or None, got {size!r}")
    if not isinstance(split, str) or not split:
        raise ValueError(f"split must be a non-empty string such as 'train' or 'test', got {split!r}")
    builder = _resolve(env_id)
    name = builder_name(env_id)
    try:
        produced = builder(split=split, size=size, seed=seed, **kwargs)
    except TypeError as exc:
        found = refused_keyword(exc, builder)
        if found is None:
            raise  # not the builder's own refusal
        options = [option for option in found[1] if option not in ("split", "size", "seed", "kwargs")]
        raise TypeError(f"the dataset builder {name} of env {env_id!r} takes no option {found[0]!r} (its options: "
                        f"{', '.join(options) or 'none'}){keyword_hint(exc, builder)}") from None
    if size is not None:
        produced = itertools.islice(produced, size)
    kwargs_json = record_json(kwargs)

    def rows() -> Iterator[Dict[str, Any]]:
        for index, row in enumerate(produced):
            try:
                row = dict(validate_row(dict(row), index, require_env_class=True))
            except DataError as exc:
                raise InvalidBuiltRow(
                    f"the dataset builder {name} of env {env_id!r} made an invalid row: {exc}") from None
            extra_info = dict(row.get("extra_info") or {})
            extra_info["origin"] = {"env_id": env_id, "split": split, "seed": seed, "index": index, "builder": name,
                                    "kwargs": kwargs_json}
            row["extra_info"] = extra_info
            yield row

    return rows()


def rebuild_row(origin: Dict[str, Any]) -> Dict[str, Any]:
    """The row that ``extra_info["origin"]`` describes, built again."""
    kwargs = json.loads(origin.get("kwargs") or "{}")
    rows = build_rows(origin["env_id"], split=origin["split"], size=origin["index"] + 1, seed=origin["seed"], **kwargs)
    if len(rows) <= origin["index"]:
        raise DataError(f"the {origin['env_id']!r} dataset has no row {origin['index']} in split {origin['split']!r}")
    return rows[origin["index"]]


__all__ = [
    "ENTRY_POINT_GROUP",
    "InvalidBuiltRow",
    "UnknownDataset",
    "build_rows",
    "builder_name",
    "dataset_ids",
    "deregister_dataset",
    "has_dataset",
    "rebuild_row",
    "register_dataset",
]
