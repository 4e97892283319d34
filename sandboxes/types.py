"""The data every sandbox backend speaks: limits, a request to run a program, and its result."""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import posixpath
from typing import Any, Dict, List, Mapping, Optional, Union

FileContent = Union[str, bytes]


class Status(str, enum.Enum):
    """How a run ended. A ``str`` enum, so ``result.status == "ok"`` works and it serialises as text."""

    OK = "ok"  # exited with code 0
    ERROR = "error"  # exited with a non-zero code (an exception, a failed assertion, ...)
    TIMEOUT = "timeout"  # wall-clock or CPU-time limit reached
    MEMORY = "memory"  # memory limit reached (MemoryError, allocation failure, OOM kill)
    OUTPUT_LIMIT = "output_limit"  # stdout/stderr or a written file went past its limit
    KILLED = "killed"  # ended by a signal that is not one of the above (a crash, a kill)
    SANDBOX_ERROR = "sandbox_error"  # the sandbox itself failed; says nothing about the program

    def __str__(self) -> str:  # "ok", not "Status.OK", in messages and f-strings
        return self.value


# The most any request may ask for; a larger value is lowered to it (see ``Limits``).
LIMIT_MAXIMA: Dict[str, float] = {
    "wall_s": 3600.0,
    "cpu_s": 3600.0,
    "memory_mb": 65536,
    "processes": 4096,
    "output_bytes": 64 * 1024 * 1024,
    "file_size_mb": 4096,
    "scratch_mb": 4096,
    "open_files": 65536,
}
_WHOLE_NUMBER_LIMITS = frozenset(name for name in LIMIT_MAXIMA if not name.endswith("_s"))


def check_limit(name: str, value: Any) -> Union[int, float]:
    """``value`` as a valid limit ``name``: a finite positive number, lowered to ``LIMIT_MAXIMA``;
    whole-number limits are rounded up. Anything else raises ``ValueError`` naming the field."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"Limits.{name} must be a positive number (or null for the default), got {value!r}"
        )
    try:
        number = float(value)
    except OverflowError:  # a whole number too large for a float (JSON carries 400 digits): past any maximum
        number = float(LIMIT_MAXIMA[name]) if value > 0 else -math.inf
    if not math.isfinite(number) or number <= 0:
        raise ValueError(
            f"Limits.{name} must be a finite number above 0 (at most {LIMIT_MAXIMA[name]:g}), "
            f"got {value!r:.40}"
        )
    number = min(number, float(LIMIT_MAXIMA[name]))
    if name in _WHOLE_NUMBER_LIMITS:
        return max(1, int(math.ceil(number)))
    return number


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one run, always in force.

    ``wall_s`` bounds real time, ``cpu_s`` CPU time (RLIMIT_CPU), ``memory_mb`` the address space
    (RLIMIT_AS; the container's memory in the docker backend; in the local backends, where a memory
    cgroup can be made, also the worker's whole memory, plus its tmpfs and the supervisor's share), ``processes`` the number of processes
    and threads (RLIMIT_NPROC inside the sandbox's own user namespace; the pids limit in docker),
    ``output_bytes`` stdout and stderr each, ``file_size_mb`` any single written file
    (RLIMIT_FSIZE), ``scratch_mb`` the private writable folder and /tmp together.

    Every value must be a finite number above 0; ``None`` (JSON ``null``) means the default shown
    here, never "unlimited". A value above ``LIMIT_MAXIMA`` (1 hour of wall or CPU time, 64 GiB of
    memory, 4096 processes, 64 MiB of output, 4 GiB files and scratch, 65536 open files) is lowered
    to it; whole-number limits are rounded up. Anything else (NaN, infinity, 0, a negative number, a
    string, a bool) raises ``ValueError`` naming the field.

    Most limits apply per run, so a request may carry its own. ``scratch_mb`` (and, in docker, the
    container's memory and pids ceilings) are set when a worker starts, from the sandbox's limits.
    """

    wall_s: Optional[float] = 10.0
    cpu_s: Optional[float] = 10.0
    memory_mb: Optional[int] = 1024
    processes: Optional[int] = 64
    output_bytes: Optional[int] = 1_000_000
    file_size_mb: Optional[int] = 64
    scratch_mb: Optional[int] = 128
    open_files: Optional[int] = 256

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            value = field.default if value is None else check_limit(field.name, value)
            object.__setattr__(self, field.name, value)

    def replace(self, **changes: Any) -> "Limits":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> "Limits":
        """Limits from a mapping (an env config, a JSON body); ``None`` gives the defaults."""
        if data is None:
            return cls()
        if isinstance(data, Limits):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"limits must be a mapping of limit names to numbers, got {type(data).__name__}")
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(str(key) for key in set(data) - known)
        if unknown:
            raise ValueError(f"unknown limit(s) {unknown}; known limits are {sorted(known)}")
        return cls(**dict(data))


@dataclasses.dataclass
class RunRequest:
    """One program to run: Python source (``code``) or a command line (``command``), not both.

    ``files`` are written into the scratch folder (relative paths only) before the program starts;
    ``fetch_files`` are read back from it afterwards (into ``RunResult.files``); ``stdin`` is fed
    to it; ``limits`` default to the sandbox's own; ``argv`` are extra arguments given to a Python
    program (``sys.argv[1:]``).
    """

    code: Optional[str] = None
    command: Optional[List[str]] = None
    stdin: Union[str, bytes] = ""
    files: Dict[str, FileContent] = dataclasses.field(default_factory=dict)
    limits: Optional[Limits] = None
    argv: List[str] = dataclasses.field(default_factory=list)
    fetch_files: List[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if (self.code is None) == (self.command is None):
            raise ValueError(
                "RunRequest needs exactly one of `code` (Python source) or `command` (a list of strings)"
            )
        if self.code is not None and not isinstance(self.code, str):
            raise TypeError(f"RunRequest.code must be a str, got {type(self.code).__name__}")
        if self.command is not None:
            if isinstance(self.command, str) or not all(isinstance(part, str) for part in self.command):
                raise TypeError("RunRequest.command must be a list of strings, e.g. ['sh', '-c', 'echo hi']")
            if not self.command:
                raise ValueError("RunRequest.command must not be empty")
        if not isinstance(self.stdin, (str, bytes)):
            raise TypeError(f"RunRequest.stdin must be str or bytes, got {type(self.stdin).__name__}")
        check_file_count("RunRequest.files", self.files)
        files: Dict[str, FileContent] = {}
        for name, content in dict(self.files).items():
            clean = relative_path("RunRequest.files", name)
            if clean in files:
                raise ValueError(f"RunRequest.files: {name!r} names the same file as another entry ({clean!r})")
            if not isinstance(content, (str, bytes)):
                raise TypeError(
                    f"RunRequest.files[{name!r}] must be str or bytes, got {type(content).__name__}"
                )
            files[clean] = content
        self.files = files
        if isinstance(self.fetch_files, (str, bytes)) or not isinstance(self.fetch_files, (list, tuple)):
            raise TypeError("RunRequest.fetch_files must be a list of relative paths")
        # refused as soon as the list is too long to be fetched: 40,000 names took 43 s to compare one by one, with
        # both of a service's body parsers held meanwhile (an attacker's pass)
        too_many = (f"RunRequest.fetch_files names more than {MAX_FETCH_FILES} files; at most {MAX_FETCH_FILES} may "
                    "be fetched")
        if len(self.fetch_files) > MAX_FILES:
            raise ValueError(too_many)
        fetch: Dict[str, None] = {}  # "a.txt" and "./a.txt" are one file, fetched once
        for name in self.fetch_files:
            fetch[relative_path("RunRequest.fetch_files", name)] = None
            if len(fetch) > MAX_FETCH_FILES:
                raise ValueError(too_many)
        self.fetch_files = list(fetch)
        if isinstance(self.argv, (str, bytes)) or not all(isinstance(arg, str) for arg in self.argv):
            raise TypeError("RunRequest.argv must be a list of strings")
        self.argv = list(self.argv)
        if isinstance(self.limits, Mapping):
            self.limits = Limits.from_dict(self.limits)
        elif self.limits is not None and not isinstance(self.limits, Limits):
            raise TypeError(f"RunRequest.limits must be Limits, a mapping or None, got {type(self.limits).__name__}")


# At most this many files may be read back per run; each is cut to the output limit, and all of
# them together to FETCH_TOTAL_FACTOR times it.
MAX_FETCH_FILES = 64
FETCH_TOTAL_FACTOR = 4
# At most this many files may be written in per run: 4.5 million empty ones fit a 64 MiB body, and took the
# service to 1.3 GiB and a minute of work before the program ran.
MAX_FILES = 1024


def check_file_count(what: str, files: Any) -> None:
    """``ValueError`` when ``files`` holds more than :data:`MAX_FILES` entries."""
    if len(files) > MAX_FILES:
        raise ValueError(f"{what} names {len(files)} files; at most {MAX_FILES} may be written in per run")


def relative_path(what: str, name: Any) -> str:
    """``name`` as a normalised path inside the scratch folder ("./a//b" -> "a/b"), or ValueError."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError(f"{what}: {name!r} must be a non-empty relative path inside the scratch folder")
    if name.startswith("/") or ".." in name.split("/"):
        raise ValueError(f"{what}: {name!r} must be a relative path inside the scratch folder (no '/' start, no '..')")
    clean = posixpath.normpath(name)
    if clean in (".", "") or clean.startswith(("/", "../")) or clean == "..":
        raise ValueError(f"{what}: {name!r} does not name a file inside the scratch folder")
    return clean


@dataclasses.dataclass
class RunResult:
    """What happened. ``stdout``/``stderr`` are decoded as UTF-8 (bad bytes replaced) and cut to the
    output limit; the ``*_truncated`` flags say when something was cut. ``exit_code`` is ``None``
    when the program did not exit by itself (killed by a signal, then ``signal`` names it)."""

    status: Status
    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_time_s: float = 0.0
    cpu_time_s: float = 0.0
    signal: Optional[int] = None
    message: str = ""  # why the sandbox chose this status, or what failed in the sandbox
    backend: str = ""
    # The requested ``fetch_files`` that existed after the run: path -> base64 of the content (each
    # cut to the output limit; a file that could not be read safely is left out).
    files: Dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def to_dict(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunResult":
        known = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["status"] = Status(values.get("status", Status.SANDBOX_ERROR))
        return cls(**values)

    @classmethod
    def sandbox_error(cls, message: str, backend: str = "", wall_time_s: float = 0.0) -> "RunResult":
        return cls(status=Status.SANDBOX_ERROR, message=message, backend=backend, wall_time_s=wall_time_s)


class SandboxUnavailable(RuntimeError):
    """The backend cannot run on this machine (tool missing, engine not running); the message says why."""
