"""The env registry: ``register``, ``make``, ``spec``, ``deregister``, ``pprint_registry``.

Ids may carry a version (``gsm8k-v1``); an unversioned id resolves to the exact id if registered,
else to the highest registered version. Third-party packages register through the
``skyrl_gym.envs`` entry-point group, read lazily on the first lookup so that installed envs exist
in every process (Ray workers included) without importing anything by hand:

* ``my_env = "my_pkg.env:MyEnv"`` registers the id ``my_env`` (nothing is imported until ``make``);
* ``my_pkg = "my_pkg.registration"`` (a module, no colon) is imported and may call ``register``.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import json
import os
import re
import threading
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from skyrl_gym._load_once import LoadOnce
from skyrl_gym.core import Env
from skyrl_gym.errors import EnvCreationError, RegistrationError, UnregisteredEnv, keyword_hint

ENTRY_POINT_GROUP = "skyrl_gym.envs"
# Env modules are imported by one thread at a time. Python 3.11's import locks can take two threads importing
# modules of one package at once (two envs' first make, each reaching skyrl_gym.rewards) for a deadlock and raise
# _DeadlockError in one of them: seen in a Ray env worker building sessions on its threads. Reentrant: a module
# may make an env while it is imported.
_IMPORTING = threading.RLock()
# At most 9 ASCII digits: int() refuses more than 4300, and an id from a client (serve-env) may hold any.
_VERSION_RE = re.compile(r"^(?P<name>.+?)-v(?P<version>[0-9]{1,9})$")

EnvCreator = Callable[..., Env]


def parse_env_id(env_id: str) -> Tuple[str, Optional[int]]:
    """Split ``"gsm8k-v1"`` into ``("gsm8k", 1)``; an unversioned id gives ``(id, None)``."""
    match = _VERSION_RE.match(env_id)
    if match is None:
        return env_id, None
    return match.group("name"), int(match.group("version"))


@dataclasses.dataclass
class EnvSpec:
    """Everything needed to build an env: its id, entry point and default keyword arguments."""

    id: str
    entry_point: Union[str, EnvCreator, None] = None
    kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    description: Optional[str] = None
    provider: str = "skyrl-gym"

    @property
    def name(self) -> str:
        return parse_env_id(self.id)[0]

    @property
    def version(self) -> Optional[int]:
        return parse_env_id(self.id)[1]

    def make(self, **kwargs: Any) -> Env:
        return make(self, **kwargs)

    @property
    def fingerprint(self) -> str:
        """A hash of what decides this env's reward (its verifier code, kwargs, data builder): see
        :mod:`skyrl_gym.fingerprint`. Computed on first use."""
        from skyrl_gym.fingerprint import fingerprint_of

        return fingerprint_of(self)

    def load_entry_point(self) -> EnvCreator:
        """The callable behind the entry point; a ``"module:Attr"`` string is imported once per spec and the
        result kept (until ``entry_point`` is changed), so ``make`` does not resolve it on every episode."""
        entry_point = self.entry_point
        if entry_point is None:
            raise EnvCreationError(f"env {self.id!r} is registered without an entry point")
        if callable(entry_point):
            return entry_point
        cached = self.__dict__.get("_loaded_entry_point")
        if cached is not None and cached[0] == entry_point:
            return cached[1]
        with _IMPORTING:
            cached = self.__dict__.get("_loaded_entry_point")
            if cached is not None and cached[0] == entry_point:
                return cached[1]
            try:
                creator = load_env_creator(entry_point, env_id=self.id)
            except EnvCreationError as exc:
                if not self.__dict__.get("_from_package_metadata") or self.provider == _OWN_DISTRIBUTION:
                    raise
                # An installed package's entry point: the fix is in its metadata, which only a reinstall reads.
                raise EnvCreationError(
                    f"{exc}. The entry point {entry_point!r} is the one package {self.provider!r} declares: fix it "
                    f'under [project.entry-points."{ENTRY_POINT_GROUP}"] in its pyproject.toml, then pip install -e '
                    "it again (entry points change only when it is installed)") from exc
            self.__dict__["_loaded_entry_point"] = (entry_point, creator)
        return creator

    def get_description(self) -> str:
        """The registered description, else the first line of the entry point's docstring."""
        if self.description:
            return self.description
        try:
            doc = self.load_entry_point().__doc__ or ""
        except Exception as exc:  # a broken plugin must not break `skyrl-gym list`
            return f"(cannot load: {exc})"
        return doc.strip().splitlines()[0] if doc.strip() else ""

    def to_json(self) -> str:
        """Serialise the spec; the entry point must be a ``"module:Attr"`` string or importable callable."""
        entry_point = self.entry_point
        if callable(entry_point):
            entry_point = f"{entry_point.__module__}:{entry_point.__qualname__}"
        data = {
            "id": self.id,
            "entry_point": entry_point,
            "kwargs": self.kwargs,
            "description": self.description,
            "provider": self.provider,
        }
        try:
            return json.dumps(data)
        except TypeError as exc:
            raise ValueError(f"the kwargs of env {self.id!r} cannot be written as JSON: {exc}") from exc

    @staticmethod
    def from_json(text: str) -> "EnvSpec":
        data = json.loads(text)
        unknown = set(data) - {f.name for f in dataclasses.fields(EnvSpec)}
        if unknown:
            raise ValueError(f"unknown EnvSpec fields in JSON: {sorted(unknown)}")
        return EnvSpec(**data)


def load_env_creator(name: str, env_id: Optional[str] = None) -> EnvCreator:
    """Import ``"package.module:Attr"`` and return ``Attr``."""
    where = f" for env {env_id!r}" if env_id else ""
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise EnvCreationError(f"entry point {name!r}{where} must have the form 'package.module:Attr'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvCreationError(f"cannot import module {module_name!r}{where}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            close = difflib.get_close_matches(part, [n for n in dir(obj) if not n.startswith("_")], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise EnvCreationError(f"module {module_name!r} has no attribute {attr!r}{where}{hint}") from exc
    return obj


class EnvRegistry(dict):
    """A dict of id -> :class:`EnvSpec` that reads installed plugins before the first lookup."""

    def __init__(self) -> None:
        super().__init__()
        self._load_plugins_once = LoadOnce(lambda: _load_entry_point_plugins(self))
        self.plugin_errors: Dict[str, str] = {}

    @property
    def _plugins_loaded(self) -> bool:
        """Whether the entry points have been read (set only once they all are)."""
        return self._load_plugins_once.done

    def load_plugins(self) -> None:
        """Read the installed plugins' entry points, once per process; other threads wait until it is done."""
        self._load_plugins_once()

    # Every read goes through load_plugins(); writes do not, so register() stays cheap.
    def __getitem__(self, key: str) -> EnvSpec:
        self.load_plugins()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.load_plugins()
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.load_plugins()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self.load_plugins()
        return super().__iter__()

    def __len__(self) -> int:
        self.load_plugins()
        return super().__len__()

    def keys(self):  # type: ignore[override]
        self.load_plugins()
        return super().keys()

    def values(self):  # type: ignore[override]
        self.load_plugins()
        return super().values()

    def items(self):  # type: ignore[override]
        self.load_plugins()
        return super().items()


registry = EnvRegistry()

# Called with no arguments after every register()/deregister(), so that mirrors of the registry
# (the Gymnasium bridge) follow it. Listeners must be cheap and must not raise.
_change_listeners: List[Callable[[], None]] = []


def add_change_listener(listener: Callable[[], None]) -> None:
    """Call ``listener()`` after every change of the registry."""
    if listener not in _change_listeners:
        _change_listeners.append(listener)


def _notify_change() -> None:
    for listener in list(_change_listeners):
        listener()


def _load_entry_point_plugins(target: EnvRegistry) -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        provider = ep.dist.name if getattr(ep, "dist", None) is not None else "unknown"
        before = set(dict.keys(target))
        try:
            if ":" in ep.value:
                if dict.__contains__(target, ep.name):
                    continue  # an explicit register() call wins over the entry point
                declared = EnvSpec(id=ep.name, entry_point=ep.value, provider=provider)
                declared.__dict__["_from_package_metadata"] = True  # a wrong one is fixed there (and reinstalled)
                dict.__setitem__(target, ep.name, declared)
            else:
                importlib.import_module(ep.value)
            if provider == _OWN_DISTRIBUTION:  # envs this package ships through its own entry points
                _shipped_ids.update(set(dict.keys(target)) - before)
        except Exception as exc:  # one broken plugin must not hide the others
            target.plugin_errors[f"{provider}:{ep.name}"] = f"{type(exc).__name__}: {exc}"


# Ids this package ships (set once the built-in envs are registered): a user's register() of one of them
# replaces ours with a warning, as SkyRL-train's tutorials register ids (such as "multiply") that we ship too.
_shipped_ids: set = set()
_OWN_DISTRIBUTION = "skyrl-gym"


def mark_shipped() -> None:
    """Record the ids registered so far as shipped with the package (called by ``skyrl_gym/__init__``)."""
    _shipped_ids.update(dict.keys(registry))


def register(
    id: str,
    entry_point: Union[str, EnvCreator, None] = None,
    kwargs: Optional[Dict[str, Any]] = None,
    description: Optional[str] = None,
    provider: str = "skyrl-gym",
    **extra: Any,
) -> EnvSpec:
    """Register an env under ``id``. An id this package ships is replaced, with a warning naming what was
    replaced; any other duplicate id raises :class:`RegistrationError`."""
    if not isinstance(id, str) or not id.strip():
        raise RegistrationError(f"env id must be a non-empty string, got {id!r}")
    if extra:
        raise RegistrationError(f"register({id!r}) got unknown arguments: {sorted(extra)}")
    if entry_point is not None and not callable(entry_point) and not isinstance(entry_point, str):
        raise RegistrationError(
            f"entry point of env {id!r} must be a 'module:Attr' string or a callable, got {entry_point!r}"
        )
    if isinstance(entry_point, str) and ":" not in entry_point:
        raise RegistrationError(f"entry point {entry_point!r} of env {id!r} must have the form 'module:Attr'")
    if dict.__contains__(registry, id) and id in _shipped_ids:
        replaced = dict.__getitem__(registry, id)
        _shipped_ids.discard(id)
        where = replaced.entry_point if isinstance(replaced.entry_point, str) else repr(replaced.entry_point)
        warnings.warn(
            f"register({id!r}) replaces the env that skyrl_gym ships under this id (entry point {where}); "
            f"skyrl_gym.make({id!r}) now builds yours",
            UserWarning,
            stacklevel=2,
        )
        dict.__delitem__(registry, id)
    if dict.__contains__(registry, id):
        raise RegistrationError(f"env {id!r} is already registered; call deregister({id!r}) first to replace it")
    new_spec = EnvSpec(
        id=id, entry_point=entry_point, kwargs=dict(kwargs or {}), description=description, provider=provider
    )
    dict.__setitem__(registry, id, new_spec)
    _notify_change()
    return new_spec


def deregister(id: str) -> None:
    if not dict.__contains__(registry, id):
        raise UnregisteredEnv(f"cannot deregister env {id!r}: it is not registered")
    _shipped_ids.discard(id)
    dict.__delitem__(registry, id)
    _notify_change()


def env_config_for(env_configs: Optional[Dict[str, Any]], env_id: str, default: Any = None) -> Any:
    """The ``env_config`` section for ``env_id`` in a mapping of sections by id (a trainer's
    ``environment.skyrl_gym.<id>``): its own, else that of an alias (another id registered with the same
    entry point string, e.g. ``sql`` and ``text2sql``), else ``default``."""
    if not env_configs:
        return default
    if env_id in env_configs:
        return env_configs[env_id]
    own = registry.get(env_id)
    if own is not None and isinstance(own.entry_point, str):
        for other_id, section in env_configs.items():
            other = registry.get(other_id) if isinstance(other_id, str) else None
            if other is not None and other.entry_point == own.entry_point:
                return section
    return default


MAX_ID_CHARS = 256
"""No env id is longer: a longer one is refused at once (a server's client sent 30 MB of id, and the search for
close spellings took three seconds on the server's event loop)."""


def _resolve_id(env_id: str) -> str:
    if env_id in registry:
        return env_id
    if len(env_id) > MAX_ID_CHARS:
        raise UnregisteredEnv(f"no env registered with id {env_id[:80]!r}... ({len(env_id):,} characters; ids are at "
                              f"most {MAX_ID_CHARS}). Run `skyrl-gym list` to see them all.")
    name, version = parse_env_id(env_id)
    if version is None:
        versions = [(v, k) for k in registry for n, v in [parse_env_id(k)] if n == name and v is not None]
        if versions:
            return max(versions)[1]
    # ids are case-sensitive; the spelling is compared without case ("GSM8K" -> 'gsm8k')
    by_lower: Dict[str, List[str]] = {}
    for known in registry:
        by_lower.setdefault(known.lower(), []).append(known)
    close = difflib.get_close_matches(env_id.lower(), list(by_lower), n=3, cutoff=0.6)
    suggestions = [known for lower in close for known in by_lower[lower]][:3]
    hint = f" Did you mean: {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
    raise UnregisteredEnv(f"no env registered with id {env_id!r}.{hint}{_installation_hint(env_id)} Run "
                          "`skyrl-gym list` to see them all.")


_DATASETS_GROUP = "skyrl_gym.datasets"  # skyrl_gym.datasets.ENTRY_POINT_GROUP (that module imports this one)


def _installation_hint(env_id: str) -> str:
    """Why a package meant to register ``env_id`` does not, from what is installed (a cold run: a misspelt or
    missing entry point was answered "not installed", which reinstalling did not change): an entry point in a
    misspelt group; an installed package with a dataset builder of that name but no env; the package ``skyrl-gym
    init`` wrote in this folder, installed without the env, or not installed."""
    from importlib.metadata import PackageNotFoundError, distribution as installed, entry_points

    from skyrl_gym.scaffold import distribution

    for ep in entry_points(group=ENTRY_POINT_GROUP):  # declared, and still not registered: it failed to load
        if ep.name == env_id:
            failed = [error for key, error in registry.plugin_errors.items() if key.endswith(f":{env_id}")]
            owner = ep.dist.name if getattr(ep, "dist", None) is not None else "an installed package"
            return (f" {owner} declares it ({ep.value}), but it did not load" + (f": {failed[0]}" if failed else "")
                    + ".")
    misgrouped = _misgrouped_entry_point(env_id)
    if misgrouped:
        return misgrouped
    declare = (f'declare it in its pyproject.toml ([project.entry-points."{ENTRY_POINT_GROUP}"] {env_id} = '
               '"module:EnvClass"), then pip install -e it again (entry points change only when it is installed).')
    for ep in entry_points(group=_DATASETS_GROUP):
        if ep.name == env_id and getattr(ep, "dist", None) is not None:
            return f" {ep.dist.name} is installed with a dataset builder {env_id!r} but no env of that id: {declare}"
    folder = distribution(env_id)
    if not os.path.isfile(os.path.join(folder, "pyproject.toml")):
        return ""
    try:
        installed(folder)
    except PackageNotFoundError:
        return f" ./{folder} holds its package, not installed: pip install -e ./{folder}, then run this again."
    return f" ./{folder} holds its package, installed without an env {env_id!r}: {declare}"


def resolved_id(env_id: Any) -> Optional[str]:
    """The registered id ``env_id`` names (an alias, an unversioned id resolved), or None."""
    try:
        return spec(str(env_id)).id
    except UnregisteredEnv:
        return None


def _misgrouped_entry_point(env_id: str) -> str:
    """An installed entry point named ``env_id`` in a group spelt like ``skyrl_gym.envs`` but not it (a cold run:
    ``"skyrl_gym.env"`` in pyproject.toml gave only "no env registered"): where it is, and what to change."""
    from importlib.metadata import entry_points

    for group in sorted(entry_points().groups):
        # 0.9: 'skyrl_gym.env' and 'skyrl-gym.envs' are misspellings; 'skyrl_gym.judges', '.tools', '.retrievers'
        # (0.75-0.8) are other groups of this package, whose names may be env ids too ('dense')
        if group == ENTRY_POINT_GROUP or difflib.SequenceMatcher(None, group, ENTRY_POINT_GROUP).ratio() < 0.9:
            continue
        for ep in entry_points(group=group):
            if ep.name == env_id:
                where = f" of {ep.dist.name}" if getattr(ep, "dist", None) is not None else ""
                return (f" An entry point {env_id!r}{where} is in the group {group!r}; envs are read from "
                        f"{ENTRY_POINT_GROUP!r}: correct the group in its pyproject.toml, then pip install -e it "
                        "again (entry points change only when the package is installed).")
    return ""


def spec(env_id: str) -> EnvSpec:
    """The :class:`EnvSpec` of ``env_id`` (an unversioned id resolves to the latest version; ``"remote"`` is the
    client of ``skyrl-gym serve-env``, :class:`skyrl_gym.remote.client.RemoteEnv`)."""
    if registry._plugins_loaded:  # the common case, an exact id: one dict lookup
        found = dict.get(registry, env_id)
        if found is not None:
            return found
    if env_id == _REMOTE_SPEC.id and env_id not in registry:
        return _REMOTE_SPEC
    return registry[_resolve_id(env_id)]


def unregistered_ids(env_ids: Iterable[str]) -> Dict[str, str]:
    """Each of ``env_ids`` that is not a registered env, with why: the message names the closest registered ids."""
    problems = {}
    for env_id in env_ids:
        try:
            spec(env_id)
        except UnregisteredEnv as exc:
            problems[env_id] = str(exc)
    return problems


def declared_config(env_id: str) -> Optional[Dict[str, Any]]:
    """The ``env_config`` keys the env registered as ``env_id`` reads, with their defaults (its class's
    :attr:`~skyrl_gym.core.Env.config_defaults`), or None when its class declares none or the id cannot be
    loaded."""
    try:
        creator = spec(env_id).load_entry_point()
    except Exception:
        return None
    declared = getattr(getattr(creator, "func", creator), "config_defaults", None)  # a functools.partial's class
    return dict(declared) if isinstance(declared, dict) else None


# env_config keys that make() reads for every env, whatever it declares: the judge of rows scored by an LLM judge
READ_BY_MAKE = ("judge",)


def unknown_config_keys(env_id: str, env_config: Any) -> Dict[str, str]:
    """Each key of ``env_config`` that the env registered as ``env_id`` does not read, with why (the closest key
    it reads, and all of them): a misspelt ``serch_url`` would otherwise leave the env at its default, silently.
    Empty when the env declares no keys (its :attr:`~skyrl_gym.core.Env.config_defaults` is None)."""
    declared = declared_config(env_id)
    if declared is None or not hasattr(env_config, "keys"):
        return {}
    known = sorted(declared)
    problems = {}
    for key in env_config.keys():
        if key in declared or key in READ_BY_MAKE:
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        reads = f"it reads: {', '.join(known)}" if known else "it reads no env_config key"
        problems[str(key)] = f"env {env_id!r} has no env_config key {str(key)!r} ({hint}{reads})"
    return problems


def envs_reading(key: str) -> List[str]:
    """The registered ids whose env reads ``key`` from its ``env_config`` (declares it), sorted: where a key set on
    the wrong env belongs."""
    return sorted(env_id for env_id in registry if key in (declared_config(env_id) or {}))


_CHECKED_CONFIGS: "set[Tuple[str, Tuple[str, ...]]]" = set()  # (env id, the keys set): each said once a process


def _warn_unread_config(env_id: str, env_config: Any) -> None:
    """A warning, once a process for each env id and set of keys, for each ``env_config`` key set (not None) that
    the env does not read: ``make("multiply", env_config={"max_turn": 3})`` left the env at its defaults,
    silently. ``judge`` is read by :func:`make` for judged rows. The commands, the trainer and serve-env refuse
    such a key; a library call is only warned, as SkyRL-gym took any."""
    if not env_config or not hasattr(env_config, "items"):
        return
    keys = tuple(sorted(str(key) for key, value in env_config.items() if value is not None and key not in READ_BY_MAKE))
    if not keys or (env_id, keys) in _CHECKED_CONFIGS:
        return
    _CHECKED_CONFIGS.add((env_id, keys))
    for why in unknown_config_keys(env_id, dict.fromkeys(keys)).values():
        warnings.warn(f"{why}; it is ignored", UserWarning, stacklevel=3)


# make("remote", url=..., env_id=...): an env served by `skyrl-gym serve-env`. A spelling, not a catalogue entry:
# it has no rows of its own, so it is kept out of the registry (and of `skyrl-gym list`).
_REMOTE_SPEC = EnvSpec(
    id="remote",
    entry_point="skyrl_gym.remote.client:RemoteEnv",
    description="An env served by `skyrl-gym serve-env`: make('remote', url=..., env_id=..., extras=row).",
)


def fingerprint_or_none(env_id: str) -> Optional[str]:
    """The reward fingerprint of a registered id (:attr:`EnvSpec.fingerprint`), or None when it has none (an
    unregistered id, a verifier that cannot be read): a record of the reward is never worth failing an episode
    for."""
    try:
        return spec(env_id).fingerprint
    except Exception:
        return None


def fingerprints_of(env_ids: List[str]) -> Dict[str, Optional[str]]:
    """``{id: fingerprint or None}`` of the given ids."""
    return {env_id: fingerprint_or_none(env_id) for env_id in sorted(set(env_ids))}


def make(id: Union[str, EnvSpec], **kwargs: Any) -> Env:
    """Build a registered env. ``kwargs`` override deep copies of the spec's default kwargs. A row whose
    ``reward_spec.method`` is ``"judge"`` gets the env wrapped so that an LLM judge gives the episode's reward
    (:mod:`skyrl_gym.rewards.judged_env`).

    >>> env = make("gsm8k", extras={"reward_spec": {"ground_truth": "72"}})
    """
    env_spec = id if isinstance(id, EnvSpec) else spec(id)
    creator = env_spec.load_entry_point()
    merged = {**copy.deepcopy(env_spec.kwargs), **kwargs} if env_spec.kwargs else kwargs
    try:
        env = creator(**merged)
    except TypeError as exc:
        raise TypeError(f"{exc} (raised by the entry point of env {env_spec.id!r} with kwargs {sorted(merged)})"
                        f"{keyword_hint(exc, creator)}") from exc
    if not isinstance(env, Env):
        raise EnvCreationError(
            f"the entry point of env {env_spec.id!r} returned {type(env).__name__}, which is not a skyrl_gym.Env"
            + (" (a gymnasium.Env? subclass skyrl_gym.Env or BaseTextEnv instead)" if _looks_like_gymnasium(env) else "")
        )
    try:
        env.spec = env_spec
    except AttributeError:  # a class with __slots__ or a read-only property: leave it be
        pass
    if not (env_spec.id == _REMOTE_SPEC.id and (merged.get("url") or merged.get("env_id"))):
        _warn_unread_config(env_spec.id, merged.get("env_config"))  # (remote: the served env's, its server checks)
    extras = merged.get("extras")
    # any env, scored by an LLM judge (skyrl_gym.rewards.judged_env); a remote env's server judges its own sessions (a
    # client wrapper judged the episode a second time, or failed with no judge of its own)
    if extras and _reward_method(extras) == "judge" and env_spec.id != _REMOTE_SPEC.id:
        from skyrl_gym.rewards.judged_env import with_judge_reward

        env = with_judge_reward(env, merged.get("env_config"), extras)
    return env


def _reward_method(extras: Any) -> Any:
    reward_spec = extras.get("reward_spec") if isinstance(extras, dict) else None
    return reward_spec.get("method") if isinstance(reward_spec, dict) else None


def _looks_like_gymnasium(obj: Any) -> bool:
    return any(cls.__module__.startswith(("gymnasium", "gym.")) for cls in type(obj).__mro__)


def pprint_registry(print_output: bool = True, exclude_namespaces: Optional[List[str]] = None) -> Optional[str]:
    """Print (or return) the registered ids grouped by provider."""
    by_provider: Dict[str, List[str]] = {}
    for env_id, env_spec in sorted(registry.items()):
        by_provider.setdefault(env_spec.provider, []).append(env_id)
    lines = []
    for provider, ids in sorted(by_provider.items()):
        if exclude_namespaces and provider in exclude_namespaces:
            continue
        lines.append(f"===== {provider} =====")
        lines.append("  ".join(ids))
    text = "\n".join(lines)
    if print_output:
        print(text)
        return None
    return text
