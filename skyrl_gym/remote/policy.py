"""What a client of ``skyrl-gym serve-env`` may configure, and what only the operator may.

The operator fixes at server start, in ``--env-config FILE`` (JSON: ``{"*": {...}, "<env id>": {...}}``),
every ``env_config`` key that touches the host: the sandbox backend and its isolation, the judge's endpoint
and key, data folders, the retrieval service, the Docker engine. A client's ``env_config`` may set only the
keys listed here for its env, each within bounds: a timeout, a limit or a number of attempts is at most the
operator's value for that key (or, where the operator left it out, the ceiling listed here), so a client may
lower it, never raise it. Anything else is refused with a 422 naming the key; nothing is silently dropped or
lifted.

``CLIENT_KEYS`` is the one table of what a client may set (the docs' table is generated from it, see
:func:`markdown_table`); an env from another package may declare its own as a ``client_env_config`` attribute
of its class (a mapping of key to :class:`Rule`), else a client may set none of its keys.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from skyrl_gym.data import check_row_fields
from skyrl_gym.errors import DataError

ANY_ENV = "*"

# Keys only the operator may set, with what they give access to (named in the refusal).
OPERATOR_KEYS: Dict[str, str] = {
    "sandbox": "the sandbox backend, its isolation and its service URL",
    "judge": "the LLM judge's endpoint, model and API key",
    "db_path": "the folder of databases on the server",
    "search_url": "the retrieval service the server calls",
    "docker_host": "the Docker engine the server drives",
    "images": "the Docker images the server runs",
    "log_requests": "what the server writes to its logs",
    "retry_delay_s": "how hard the server retries a service",
}

# An env class that needs operator keys on a server (without them a row could name any file of the host) says
# so in an attribute of this name, a tuple of keys: the class, not its id, so that every id it is registered
# under (an alias, an --import of the operator's own) needs them too.
REQUIRES_OPERATOR_KEYS = "server_requires_env_config"


class PolicyError(ValueError):
    """A client's ``env_config`` asks for what it may not; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a client may give for one key.

    ``kind``: ``"ceiling"`` (a finite number above 0, at most the operator's value, else ``ceiling``, else the
    env's own default: its class's ``config_defaults[key]``, the one place that default is written),
    ``"range"`` (a number from ``low`` to ``high``), ``"flag"`` (true or false), ``"choice"`` (one of
    ``choices``),
    ``"settings"`` (a JSON object). ``whole``: whole numbers only."""

    kind: str
    meaning: str
    ceiling: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    whole: bool = False
    choices: Tuple[str, ...] = ()

    def describe(self, env_default: Any = None) -> str:
        if self.kind == "ceiling":
            unit = "a whole number" if self.whole else "a number"
            if self.ceiling is not None:
                return f"{unit} > 0, at most the operator's value (default ceiling {self.ceiling:g})"
            if env_default is None:  # the env bounds nothing by default: only an operator's value lets a client set it
                return f"{unit} > 0, at most the operator's value (none set: a client may not set it)"
            default = f"the env's default, {env_default:g}"
            return f"{unit} > 0, at most the operator's value (default ceiling: {default})"
        if self.kind == "range":
            unit = "a whole number" if self.whole else "a number"
            low, high = (int(self.low), int(self.high)) if self.whole else (self.low, self.high)  # type: ignore[arg-type]
            return f"{unit} from {low} to {high}"
        if self.kind == "flag":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(f"`{choice}`" for choice in self.choices)
        return "a JSON object"

    def check(
        self, key: str, value: Any, operator_value: Any, where: str = "", env_default: Any = None
    ) -> Any:
        where = where or f"env_config.{key}"
        if self.kind == "flag":
            if not isinstance(value, bool):
                raise PolicyError(f"{where} must be true or false, got {value!r:.60}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                raise PolicyError(f"{where} must be one of {list(self.choices)}, got {value!r:.60}")
            return value
        if self.kind == "settings":
            if not isinstance(value, dict):
                raise PolicyError(f"{where} must be a JSON object, got {type(value).__name__}")
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not _finite(value):
            raise PolicyError(f"{where} must be a finite number, got {value!r:.60}")
        if self.whole and value != int(value):
            raise PolicyError(f"{where} must be a whole number, got {value!r}")
        if self.kind == "range":
            if not self.low <= value <= self.high:  # type: ignore[operator]
                raise PolicyError(f"{where} must be from {self.low:g} to {self.high:g}, got {value!r}")
            return value
        ceiling = next((c for c in (operator_value, self.ceiling, env_default) if c is not None), None)
        if not isinstance(ceiling, numbers.Real):  # no ceiling known: refused, never unbounded
            raise PolicyError(
                f"{where} has no ceiling on this server (the env declares no default for it): the operator "
                f"must set one in --env-config before a client may choose it"
            )
        if value <= 0:
            raise PolicyError(f"{where} must be above 0, got {value!r}")
        if value > ceiling:
            raise PolicyError(
                f"{where} asks for {value!r}, above this server's ceiling of {ceiling:g} (the operator's "
                f"--env-config sets it); a client may lower it, never raise it"
            )
        return value


def _finite(value: numbers.Real) -> bool:
    """True for a number a float can hold that is not NaN or infinite (a 400-digit integer is not: JSON
    carries it, and ``math.isfinite`` raises ``OverflowError`` on it)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _ceiling(meaning: str, whole: bool = False, ceiling: Optional[float] = None) -> Rule:
    """A limit a client may lower: at most the operator's value, else ``ceiling``, else the env's default."""
    return Rule("ceiling", meaning, ceiling=ceiling, whole=whole)


MAX_TURNS = Rule("range", "turns per episode (a row's max_turns does the same)", low=1, high=1000, whole=True)
SEED = Rule("range", "the generator's seed", low=0, high=2**32 - 1, whole=True)

_SEARCH = {
    "max_turns": MAX_TURNS,
    "topk": _ceiling("passages per search", whole=True, ceiling=10),  # above the default of 3
    "timeout": _ceiling("seconds per search request"),
    "retry_attempts": _ceiling("tries per search request", whole=True),
}
_SQL = {
    "max_turns": MAX_TURNS,
    "sql_timeout_s": _ceiling("seconds per query of the model"),
    "reward_timeout_s": _ceiling("seconds per query of the reward"),
    "max_rows_shown": _ceiling("rows shown per query result", whole=True),
}
_GENERATED = {
    "seed": SEED,
    "settings": Rule("settings", "the generator's settings (checked by the env; a file may be named only as one "
                     "the package ships)"),
}

# env id (or "<namespace>/*") -> the env_config keys a client may set.
CLIENT_KEYS: Dict[str, Dict[str, Rule]] = {
    "aime": {},
    "gsm8k": {},
    "gsm8k_multi_turn": {"format_score": Rule("range", "credit of formatted wrong answers, shared over the turns",
                                              low=0, high=1)},
    "countdown": {},
    "math": {"verify_timeout": _ceiling("seconds to verify an answer")},
    "multiply": {"boxed_wrong_reward": Rule("range", "reward of a boxed wrong answer", low=0, high=1)},
    "code_interpreter": {
        "max_turns": MAX_TURNS,
        "observation_role": Rule("choice", "role of tool output messages", choices=("user", "tool")),
        "timeout": _ceiling("seconds per Python call"),
        "message_timeout_s": _ceiling("seconds for the Python calls of one message", ceiling=20),
        "verify_timeout": _ceiling("seconds to verify the answer"),
        "stateful": Rule("flag", "keep Python state between calls"),
        "max_output_chars": _ceiling("characters of tool output shown", whole=True),
    },
    "humaneval": {
        "timeout": _ceiling("seconds per test run"),
        "memory_mb": _ceiling("memory of a test run (MB)", whole=True),
    },
    "lcb": {
        "timeout": _ceiling("seconds per test"),
        "memory_mb": _ceiling("memory of a test run (MB)", whole=True),
        "stop_on_first_failure": Rule("flag", "stop at the first failing test"),
        "total_timeout": _ceiling("seconds for all tests of a response"),
    },
    "search": dict(_SEARCH),
    "searchcode": {**_SEARCH, "python_timeout": _ceiling("seconds per Python call")},
    "sql": dict(_SQL),
    "text2sql": dict(_SQL),
    "swe": {
        "max_turns": MAX_TURNS,
        "bash_timeout_s": _ceiling("seconds per bash command"),
        "message_timeout_s": _ceiling("seconds for the bash commands of one message", ceiling=120),
        "output_cap": _ceiling("characters of command output shown", whole=True),
        "eval_timeout_s": _ceiling("seconds for the hidden tests"),
        "memory_mb": _ceiling("memory of the container (MB)", whole=True),
        "cpus": _ceiling("CPUs of the container"),
    },
    "reasoning_gym/*": {
        **_GENERATED,
        "split": Rule("choice", "the split rows come from", choices=("train", "test")),
        "index": Rule("range", "the entry of the split", low=0, high=10**12, whole=True),
        "containment_credit": Rule("flag", "pay reasoning-gym's credit to answers that only contain the answer"),
        "partial_credit": Rule("flag", "pay a family's own partial credit (false: only a full score)"),
    },
    "games/*": {**_GENERATED, "max_turns": MAX_TURNS},
}


def client_rules(env_id: str, creator: Any = None) -> Dict[str, Rule]:
    """The keys a client may set for ``env_id``: the table's entry (exact id, then ``namespace/*``), else the
    ``client_env_config`` of the env's class, else none."""
    if env_id in CLIENT_KEYS:
        return CLIENT_KEYS[env_id]
    if "/" in env_id and env_id.split("/", 1)[0] + "/*" in CLIENT_KEYS:
        return CLIENT_KEYS[env_id.split("/", 1)[0] + "/*"]
    declared = getattr(creator, "client_env_config", None)
    if isinstance(declared, Mapping) and all(isinstance(rule, Rule) for rule in declared.values()):
        return dict(declared)
    return {}


def _creator(env_id: str) -> Any:
    """The registered entry point of ``env_id`` (its class holds its ``config_defaults``), else None."""
    from skyrl_gym.errors import UnregisteredEnv
    from skyrl_gym.registration import spec

    try:
        return spec(env_id).load_entry_point()
    except (UnregisteredEnv, ImportError):
        return None


def _operator_sections(operator_config: Mapping[str, Any], env_id: str) -> Iterator[Mapping[str, Any]]:
    yield operator_config.get(ANY_ENV) or {}
    if "/" in env_id:
        yield operator_config.get(env_id.split("/", 1)[0] + "/*") or {}
    yield operator_config.get(env_id) or {}


def operator_env_config(operator_config: Mapping[str, Any], env_id: str) -> Dict[str, Any]:
    """The operator's ``env_config`` for ``env_id``: ``"*"``, then ``"namespace/*"``, then the id's own
    keys."""
    merged: Dict[str, Any] = {}
    for section in _operator_sections(operator_config, env_id):
        merged.update(section)
    return merged


class MissingOperatorKeys(list):
    """The keys an env needs from a server's operator that its ``--env-config`` leaves unset; reads as a sentence."""

    def __init__(self, env_id: str, keys: List[str]) -> None:
        super().__init__(keys)
        self.env_id = env_id

    def __str__(self) -> str:
        return (f"env {self.env_id!r} needs the operator's {', '.join(self)} on a server "
                f"({OPERATOR_KEYS.get(self[0], 'set by the operator')})")

    @property
    def fix(self) -> str:
        return (f"serve-env --env-config FILE, where FILE holds "
                f"{{{json.dumps(self.env_id)}: {{{json.dumps(self[0])}: ...}}}} (docs/remote-envs.md)")


def operator_keys_missing(env_id: str, operator_config: Optional[Mapping[str, Any]],
                          creator: Any = None) -> MissingOperatorKeys:
    """What ``env_id`` needs from the operator (its class's ``server_requires_env_config``) and ``operator_config``
    leaves unset: a session of it is refused until the operator sets them."""
    operator = operator_env_config(operator_config or {}, env_id)
    required = getattr(_creator(env_id) if creator is None else creator, REQUIRES_OPERATOR_KEYS, ())
    return MissingOperatorKeys(env_id, [key for key in required if operator.get(key) is None])


def effective_env_config(
    operator_config: Mapping[str, Any],
    env_id: str,
    client_config: Optional[Mapping[str, Any]],
    creator: Any = None,
) -> Dict[str, Any]:
    """The ``env_config`` a session is built with: the operator's, plus the client's keys where the rules
    allow them. Raises :class:`PolicyError` naming the first key a client may not set, or a value out of
    bounds."""
    operator = operator_env_config(operator_config, env_id)
    if creator is None:
        creator = _creator(env_id)
    missing = operator_keys_missing(env_id, operator_config, creator)
    if missing:
        raise PolicyError(f"{missing}; this server was started without it: {missing.fix}")
    rules = client_rules(env_id, creator)
    env_defaults = getattr(creator, "config_defaults", None) or {}
    config = dict(operator)
    if len(client_config or {}) > len(rules) + 64:  # keys not the client's: said before sorting millions of them
        raise PolicyError(f"env_config has {len(client_config or {}):,} keys; a client may set at most these "
                          f"{len(rules)} of env {env_id!r}: {sorted(rules) or 'none'}")
    for key in sorted(client_config or {}, key=str):
        value = client_config[key]  # type: ignore[index]
        if key in OPERATOR_KEYS:
            raise PolicyError(
                f"env_config.{key} is set by the server's operator, not by a client ({OPERATOR_KEYS[key]})"
            )
        rule = rules.get(key)
        if rule is None:
            allowed = sorted(rules) or "none"
            raise PolicyError(
                f"env_config.{key} is not a key a client may set for env {env_id!r} "
                f"(a client may set: {allowed}; "
                f"the operator sets the rest at server start)"
            )
        if value is None:
            continue  # "the server's value"
        config[key] = rule.check(key, value, operator.get(key), env_default=env_defaults.get(key))
    return config


def check_row(extras: Optional[Mapping[str, Any]]) -> None:
    """A client's row may set what a client's ``env_config`` may, no more: its ``max_turns`` (at the top or
    in ``extra_info``, where envs read it) within :data:`MAX_TURNS`; ``reward_spec`` and ``extra_info`` are dicts
    where present (an env reading a string's keys raised a 500). Raises :class:`PolicyError`."""
    if not extras:
        return
    try:
        check_row_fields(extras, "extras")
    except DataError as exc:
        raise PolicyError(str(exc)) from None
    where_value = [("extras.max_turns", extras.get("max_turns"))]
    extra_info = extras.get("extra_info")
    if isinstance(extra_info, Mapping):
        where_value.append(("extras.extra_info.max_turns", extra_info.get("max_turns")))
    for where, value in where_value:
        if value is not None:
            MAX_TURNS.check("max_turns", value, None, where=where)


def sandbox_settings(operator_config: Mapping[str, Any]) -> Iterator[Tuple[str, Any]]:
    """``(section, settings)`` of every ``sandbox`` the operator's config names."""
    for section, values in operator_config.items():
        if isinstance(values, Mapping) and "sandbox" in values:
            yield section, values["sandbox"]


def check_operator_config(operator_config: Any, allow_no_isolation: bool = False) -> Dict[str, Any]:
    """The operator's config, checked: a JSON object of sections (``"*"``, env ids, ``"namespace/*"``) that
    are objects, an env id's holding only keys its env reads; a sandbox without isolation is refused unless
    ``allow_no_isolation``. Raises ``ValueError``."""
    from skyrl_gym.registration import registry, unknown_config_keys, unregistered_ids

    if not isinstance(operator_config, Mapping):
        raise ValueError(
            f"--env-config must hold a JSON object of sections, got {type(operator_config).__name__}"
        )
    for section, values in operator_config.items():
        if not isinstance(values, Mapping):
            raise ValueError(f"--env-config section {section!r} must be an object of env_config keys")
        # a misspelt section applied to no env: its ceilings and settings were silently the envs' defaults
        if str(section).endswith("/*"):
            namespace = str(section)[:-1]
            if not any(env_id.startswith(namespace) for env_id in registry):
                raise ValueError(f"--env-config section {section!r}: no registered env id starts with "
                                 f"{namespace!r}. Run `skyrl-gym list` to see them all.")
        elif section != ANY_ENV:
            for why in unregistered_ids([str(section)]).values():
                raise ValueError(f"--env-config section {section!r}: {why}")
        if section != ANY_ENV and not str(section).endswith("/*"):  # those hold keys for envs of many kinds
            for key, why in unknown_config_keys(str(section), values).items():
                raise ValueError(f"--env-config {section}.{key}: {why}")
    for section, settings in sandbox_settings(operator_config):
        if not isinstance(settings, Mapping):
            raise ValueError(
                f'--env-config {section}.sandbox must be an object such as {{"backend": "local"}}'
            )
        if settings.get("isolation") == "none" and not allow_no_isolation:
            raise ValueError(
                f"--env-config {section}.sandbox has isolation 'none': every client's code would run on this "
                f"host with only rlimits around it. Pass --allow-no-isolation if every client is trusted"
            )
    return dict(operator_config)


def load_operator_config(path: str, allow_no_isolation: bool = False) -> Dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--env-config {path}: {exc}") from None
    return check_operator_config(data, allow_no_isolation)


def markdown_table() -> str:
    """The docs' table of what a client may set, per env (docs/security.md holds it; a test keeps it
    current)."""
    lines = ["| env | key a client may set | what it is | allowed values |", "|---|---|---|---|"]
    for pattern in sorted(CLIENT_KEYS):
        rules = CLIENT_KEYS[pattern]
        if not rules:
            lines.append(f"| `{pattern}` | (none) | | |")
        defaults = {} if pattern.endswith("/*") else getattr(_creator(pattern), "config_defaults", None) or {}
        for key, rule in sorted(rules.items()):
            lines.append(f"| `{pattern}` | `{key}` | {rule.meaning} | {rule.describe(defaults.get(key))} |")
    return "\n".join(lines) + "\n"


def covered(env_id: str) -> bool:
    """True when the table lists ``env_id`` (by its id or its namespace)."""
    return env_id in CLIENT_KEYS or ("/" in env_id and env_id.split("/", 1)[0] + "/*" in CLIENT_KEYS)


__all__ = [
    "ANY_ENV",
    "MAX_TURNS",
    "CLIENT_KEYS",
    "OPERATOR_KEYS",
    "PolicyError",
    "Rule",
    "check_operator_config",
    "check_row",
    "client_rules",
    "covered",
    "effective_env_config",
    "load_operator_config",
    "markdown_table",
    "operator_env_config",
]
