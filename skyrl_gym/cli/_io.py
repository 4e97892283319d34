"""Helpers shared by the commands: JSON arguments, rows, output paths."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union


class UsageError(Exception):
    """Bad command-line input; the message says which argument and why (exit code 2)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised by a command that cleans up after it as after Ctrl-C (:func:`terminated_as_interrupt`);
    the command exits ``128 + signum`` (143, 129), as a program the signal killed."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(f"signal {signum}")
        self.signum = int(signum)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP (a scheduler's stop, ``timeout``, a closed terminal) raise
    :class:`Terminated` in the main thread, so the command ends as after Ctrl-C: its ``with`` blocks close, its
    temporary folders go (by default these signals end the process at once: a training run's weight-sync folder,
    a whole model, stayed behind). Handlers set by someone else are kept; the old ones come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    previous = {}
    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):  # no SIGHUP on Windows
        if signum is not None and signal.getsignal(signum) == signal.SIG_DFL:
            previous[signum] = signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def seconds_arg(value: float | None, flag: str, zero: str = "") -> float | None:
    """``value`` of a seconds flag, checked (NaN and negatives refused); 0 reads as None when ``zero`` says what
    it means."""
    if value is None:
        return None
    if not value >= 0:  # NaN too
        raise UsageError(f"{flag} must be a number of seconds, 0 or more{zero and f' (0: {zero})'}, got {value:g}")
    return None if zero and value == 0 else value


def parse_json_arg(text: str | None, flag: str, default: Any = None) -> Any:
    """``--flag '{"a": 1}'`` or ``--flag @file.json``."""
    if text is None:
        return default
    source = text
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.exists():
            raise UsageError(f"{flag}: file not found: {path}")
        source = path.read_text(encoding="utf-8")
    try:
        return json.loads(source)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not valid JSON ({exc.msg} at position {exc.pos}): {text[:80]!r}") from exc


def env_config_arg(text: str | None, env_ids: Iterable[Any], flag: str = "--env-config",
                   default: Any = None) -> Any:
    """``--env-config`` (JSON, or ``@file.json``) for the envs ``env_ids``: a JSON object, each of whose keys
    one of them reads (a misspelt key would leave every env at its default, silently). ``default`` when not
    given; a :class:`UsageError` names the first key no env reads."""
    from skyrl_gym.registration import unknown_config_keys

    config = parse_json_arg(text, flag, default=default)
    if text is None:
        return config
    if not isinstance(config, dict):
        raise UsageError(f"{flag} must be a JSON object such as '{{\"timeout\": 5}}', got {type(config).__name__}")
    unread = [unknown_config_keys(str(env_id), config) for env_id in dict.fromkeys(env_ids) if env_id]
    for key in config:
        if unread and all(key in problems for problems in unread):
            raise UsageError(f"{flag}: {unread[0][key]}")
    return config


def load_row(path: str, index: int) -> Tuple[Any, Dict[str, Any]]:
    """``(prompt, extras)`` of row ``index`` of a JSONL/JSON/Parquet rows file. Only that row is checked, and a
    JSONL file is read only up to it: a bad line further on does not stop a user stepping this one."""
    from skyrl_gym.data import placed_rows, row_extras, validate_row

    records: List[Tuple[str, Dict[str, Any]]] = []
    for placed in placed_rows(path):
        records.append(placed)
        if index >= 0 and len(records) > index:
            break
    if not records:
        raise UsageError(f"{path} holds no rows")
    if not -len(records) <= index < len(records):
        raise UsageError(f"--index {index} is out of range: {path} has {len(records)} rows")
    place, record = records[index]
    row = dict(validate_row(record, place=place))
    return row.get("prompt"), row_extras(row)


def to_json(value: Any, indent: int | None = None) -> str:
    """JSON for display; values JSON cannot hold are shown with ``repr``."""
    return json.dumps(value, ensure_ascii=False, indent=indent, default=repr)


def error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def unknown_env_problem(env_id: Any, rows: List[Dict[str, Any]]) -> str:
    """What is wrong with the env ids rows would be played with (``env_id`` for every row when given, else
    each row's ``env_class``), in one line naming where the id came from; ``""`` when every id is
    registered."""
    from skyrl_gym.data import row_place
    from skyrl_gym.registration import unregistered_ids

    if env_id:
        sources = {str(env_id): "--env"}
    else:
        missing = next((i for i, row in enumerate(rows) if not row.get("env_class")), None)
        if missing is not None:
            return f"{row_place(missing)} has no env_class; pass --env ID to play every row with one env"
        sources = {}
        for index, row in enumerate(rows):
            sources.setdefault(str(row["env_class"]), f"{row_place(index)}'s env_class")
    name, why = next(iter(unregistered_ids(sources).items()), ("", ""))
    return f"{sources[name]} {name!r}: {why}" if name else ""


def output_problem(path: Union[str, Path]) -> Optional[str]:
    """Why ``path`` cannot take a command's output, or None: checked before the episodes run, not after (an
    evaluation of hours was lost to a misspelt folder). Makes the missing parent folders, as writing would; leaves
    the file as it was."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder; give a file name"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        with path.open("a", encoding="utf-8"):
            pass
        if not existed:
            path.unlink()
    except FileExistsError:  # mkdir of a parent that is there as a file
        return f"cannot write {path}: {path.parent} is a file, not a folder"
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return None
