"""The data every sandbox backend speaks: limits, a request to run a program, and its result."""

from __future__ import annotations

import dataclasses
import enum
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


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one run. ``None`` leaves a limit unset (not recommended for untrusted code).

    ``wall_s`` bounds real time, ``cpu_s`` CPU time (RLIMIT_CPU), ``memory_mb`` the address space
    (RLIMIT_AS; the container's memory in the docker backend), ``processes`` the number of processes
    and threads (RLIMIT_NPROC inside the sandbox's own user namespace; the pids limit in docker),
    ``output_bytes`` stdout and stderr each, ``file_size_mb`` any single written file
    (RLIMIT_FSIZE), ``scratch_mb`` the private writable folder and /tmp together.

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
            if value is not None and (
                not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0
            ):
                raise ValueError(f"Limits.{field.name} must be a positive number or None, got {value!r}")

    def replace(self, **changes: Any) -> "Limits":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> "Limits":
        if data is None:
            return cls()
        if isinstance(data, Limits):
            return data
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
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
        for name, content in self.files.items():
            if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
                raise ValueError(
                    f"RunRequest.files: {name!r} must be a relative path inside the scratch folder"
                )
            if not isinstance(content, (str, bytes)):
                raise TypeError(
                    f"RunRequest.files[{name!r}] must be str or bytes, got {type(content).__name__}"
                )
        for name in self.fetch_files:
            if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
                raise ValueError(
                    f"RunRequest.fetch_files: {name!r} must be a relative path inside the scratch folder"
                )
        if isinstance(self.limits, Mapping):
            self.limits = Limits.from_dict(self.limits)


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
