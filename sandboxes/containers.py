"""Long-lived containers for episodes that need a whole machine (software-engineering tasks).

One container per episode, started from a locally built image: no network, all capabilities
dropped, ``no-new-privileges``, memory, CPU, process and disk limits. Commands run with ``docker exec``
under a wall-clock limit and an output cap; files are read and written through the Docker API, so
a file's bytes never pass through a shell. Containers carry the same owner labels as the docker
sandbox backend, so a crashed caller's containers are removed by the next one (one sweep for both).

    with Container("skyrl-gym-swe-toolz:abc123") as box:
        result = box.exec("python3 -m pytest -q", timeout_s=60)
        box.write_file("/testbed/notes.txt", b"hello")

What a command's output looks like when it is long: the first ``output_cap`` bytes, then one line
``[output truncated: N more bytes]``. A command that runs past its limit is killed (its whole
process group, and anything it left running in the background) and reported with ``timed_out``.

Disk: the engine caps the container's writable layer at ``ContainerLimits.disk_mb`` where it can
(``--storage-opt size``: overlay2 on xfs mounted with ``pquota``, btrfs, zfs). Elsewhere no file may
grow past that size (``RLIMIT_FSIZE``), and a watcher thread asks the engine every few seconds how much
each container has written; one past the limit is removed (``gone_why`` says so), so a command that
fills the disk costs its own episode, never the machine.
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import posixpath
import secrets
import shlex
import tarfile
import threading
import time
import uuid
import logging
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from skygym_sandboxes.docker_backend import LABEL, OWNER_LABEL, owner_id, remove_orphaned_containers
from skygym_sandboxes.docker_exec import ExecStream
from skygym_sandboxes.interrupts import signals_deferred
from skygym_sandboxes.types import SandboxUnavailable

logger = logging.getLogger(__name__)

KIND_LABEL = f"{LABEL}.kind"
DEFAULT_OUTPUT_CAP = 32_000
# What an exec's stream may carry beyond its output cap (the wrapper's last line is under 100 bytes).
EXEC_STREAM_SLACK = 64 * 1024
# The container's main process keeps it alive and reaps what commands leave: commands arrive through `docker exec`,
# and a process whose parent ended becomes PID 1's child. `sleep infinity` reaped none: every process a time limit
# killed stayed a zombie, counted against the container's process limit, until 20 commands that each left 25
# behind had used all 512 and nothing could start. `kill -9 -1` spares PID 1 and ends its sleep, which it restarts.
KEEPALIVE = ["bash", "-c", "while :; do sleep 3600 & wait $!; done"]
KEEPALIVE_PROCESSES = 2  # the loop and its sleep


_swept_engines: set = set()
_swept_lock = threading.Lock()


def _engine_key(client: Any) -> Any:
    return getattr(getattr(client, "api", None), "base_url", None) or id(client)


def _sweep_orphans_once(client: Any) -> None:
    """Remove crashed callers' containers the first time this process uses an engine, not on every
    container (a container per episode would list every labelled container each time)."""
    engine = _engine_key(client)
    with _swept_lock:
        if engine in _swept_engines:
            return
        _swept_engines.add(engine)
    remove_orphaned_containers(client)


def docker_client(base_url: Optional[str] = None, timeout_s: int = 120) -> Any:
    """A client for the Docker engine at ``base_url``, ``$SKYGYM_DOCKER_HOST``, or docker's own
    defaults (``$DOCKER_HOST``, the local socket); raises :class:`SandboxUnavailable` saying what to do."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailable("containers need the docker package: pip install 'skyrl-gym[docker]'") from exc
    # where the address came from, for the advice: the caller's (--docker-host, env_config's docker_host) or ours
    named_by = "the address given (--docker-host, docker_host)" if base_url else "SKYGYM_DOCKER_HOST"
    base_url = base_url or os.environ.get("SKYGYM_DOCKER_HOST")
    try:
        client = docker.DockerClient(base_url=base_url, timeout=timeout_s) if base_url else docker.from_env(timeout=timeout_s)
        client.ping()
    except Exception as exc:
        given = base_url or os.environ.get("DOCKER_HOST")
        hint = (f"an engine's address is a URL: unix://{given} for a socket, tcp://HOST:PORT for a port"
                if given and "://" not in given else
                "start dockerd (as root: `dockerd > /var/log/dockerd.log 2>&1 &`; `skyrl-gym doctor` checks it), or point "
                f"{named_by} at an engine that runs (unix:///PATH/docker.sock)")
        where = given or "the default socket"
        raise SandboxUnavailable(f"cannot reach a Docker engine at {where} ({exc}); {hint}") from exc
    return client


# Engines that refused --storage-opt size (overlay2 needs xfs with pquota): their containers are watched.
_DISK_QUOTA: "dict[Any, bool]" = {}
_DISK_QUOTA_LOCK = threading.Lock()  # containers start at once: the first to learn it says it, once


def _refuses_disk_quota(exc: Exception) -> bool:
    text = str(getattr(exc, "explanation", "") or exc).lower()
    return "storage-opt" in text or "storage opt" in text or "quota" in text or "backingfs" in text


DEEPEST_LAYER_FOLDER = 256  # past any project's tree; an attacker's hides files where a path is too long to walk
HIDDEN_FILES = 10**12  # what a layer counts as holding when part of it could not be counted


def _entries(folder: str) -> int:
    """How many files and folders the tree at ``folder`` holds (links not followed). Folders are opened relative to
    their parent's descriptor, so no path grows past PATH_MAX (by path, a tree of 20 folders with 250-character
    names hid every file below them); a tree deeper than :data:`DEEPEST_LAYER_FOLDER`, or a folder that cannot be
    read but was not removed meanwhile, counts :data:`HIDDEN_FILES`."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        top = os.open(folder, flags)
    except OSError:
        return 0
    count, stack = 0, [(top, os.scandir(top))]
    try:
        while stack:
            fd, listing = stack[-1]
            entry = next(listing, None)
            if entry is None:
                listing.close()
                os.close(fd)
                stack.pop()
                continue
            count += 1
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                if len(stack) >= DEEPEST_LAYER_FOLDER:
                    return HIDDEN_FILES
                child = os.open(entry.name, flags, dir_fd=fd)
            except FileNotFoundError:  # removed while the walk ran
                continue
            except OSError:
                return HIDDEN_FILES
            try:
                stack.append((child, os.scandir(child)))
            except OSError:
                os.close(child)
                return HIDDEN_FILES
    finally:
        for fd, listing in stack:
            listing.close()
            os.close(fd)
    return count


def _deleted_but_open(client: Any, container_id: str) -> int:
    """How many files the container's processes hold open after they were deleted: their inodes stay used, and no
    walk of the layer finds them (15,000 such held an attacker's inodes unseen)."""
    try:
        listed = client.api.top(container_id)
        column = listed["Titles"].index("PID")
        pids = [row[column] for row in listed["Processes"] or []]
    except Exception:
        return 0
    held = 0
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                held += os.readlink(f"/proc/{pid}/fd/{name}").endswith(" (deleted)")
            except OSError:
                continue
    return held


class _DiskWatch:
    """One daemon thread, started with the first container: every ``interval_s`` it asks the engine how much each
    container whose disk it cannot cap has written, and removes one past its ``disk_mb``; and where the engine's
    disk is this machine's and has fewer than ``inode_reserve`` of its inodes left, it removes the container whose
    layer holds the most files (no engine caps inodes: one command made 200,000 empty files in 10 s, 0 MB to the
    engine, and 13 such calls would have used up this machine's). The owner sees ``id`` None and ``gone_why``."""

    interval_s = 3.0
    inode_reserve = 0.05
    _thread: Optional[threading.Thread] = None
    _lock = threading.Lock()

    @classmethod
    def start(cls) -> None:
        with cls._lock:
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(target=cls._run, name="container-disk-watch", daemon=True)
                cls._thread.start()

    @classmethod
    def check(cls, inode_reserve: Optional[float] = None,
              among: Optional[List["Container"]] = None) -> List["Container"]:
        """One pass over ``among`` (default: every open container); the containers it removed."""
        containers = list(Container._open) if among is None else among
        removed = cls._check_inodes(cls.inode_reserve if inode_reserve is None else inode_reserve, containers)
        for container in containers:
            if container.disk_quota or container._container is None:
                continue
            try:
                used = container.disk_used_mb()
            except Exception:  # removed meanwhile, or the engine is busy: the next pass sees it
                continue
            if used > container.limits.disk_mb:
                container.gone_why = (f"it wrote {used:.0f} MB to its disk, more than the "
                                      f"{container.limits.disk_mb} MB it may")
                logger.warning("container %s: %s; removed", container.name, container.gone_why)
                container.close()
                removed.append(container)
        return removed

    @classmethod
    def _check_inodes(cls, reserve: float, containers: List["Container"]) -> List["Container"]:
        layers = [(container, container.upper_dir) for container in containers
                  if container._container is not None and container.upper_dir]
        if not layers:
            return []
        try:
            disk = os.statvfs(layers[0][1])
        except OSError:
            return []
        if not disk.f_files or disk.f_favail > disk.f_files * reserve:
            return []
        counted = [(_entries(upper) + _deleted_but_open(container.client, container.id), container)
                   for container, upper in layers]
        made, worst = max(counted, key=lambda pair: pair[0])
        files = "files and folders where they could not all be counted" if made >= HIDDEN_FILES else \
            f"{made} files and folders"
        worst.gone_why = (f"it made {files} while the engine's disk had {disk.f_favail} of its {disk.f_files} "
                          "inodes left")
        logger.warning("container %s: %s; removed", worst.name, worst.gone_why)
        worst.close()
        return [worst]

    @classmethod
    def _run(cls) -> None:
        while True:
            time.sleep(cls.interval_s)
            try:
                cls.check()
            except Exception:  # the thread outlives an engine that went away; the next pass tries again
                logger.exception("the container watcher's pass failed")


@dataclass
class ContainerLimits:
    """Resources of one container. ``network`` stays off unless a task really needs it."""

    memory_mb: int = 2048
    cpus: float = 1.0
    pids: int = 512
    network: bool = False
    disk_mb: int = 4096  # what the container may write (its layer), and the largest file it may write

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpus", "pids", "disk_mb"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ContainerLimits.{name} must be a positive number, got {value!r}")


def _exec_output(client: Any, exec_id: str, max_bytes: int) -> Tuple[bytes, bool]:
    """Start the exec and return all it writes, and whether it wrote past ``max_bytes`` (then the rest is not
    read, and the command still runs). See ExecStream for why not docker-py's exec_start."""
    stream = ExecStream(client, exec_id)
    try:
        return stream.read_to_end(max_bytes), stream.overflowed
    finally:
        stream.close()


class _CappedReader(io.RawIOBase):
    """A file over an iterator of byte chunks (an archive the engine streams) that refuses to read past
    ``cap`` bytes."""

    def __init__(self, chunks: Any, cap: int, what: str) -> None:
        self._chunks = iter(chunks)
        self._buffer = b""
        self._left = cap
        self._what = what

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._buffer = chunk
        size = min(len(target), len(self._buffer))
        if size > self._left:
            raise ValueError(f"the archive of {self._what} is larger than this reads")
        target[:size], self._buffer = self._buffer[:size], self._buffer[size:]
        self._left -= size
        return size


@dataclass
class ExecResult:
    exit_code: int
    output: str
    truncated: bool = False
    timed_out: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Container:
    """One running container (see the module docstring). Close it, or use it as a context manager."""

    _open: "weakref.WeakSet[Container]" = weakref.WeakSet()  # every container of this process not yet closed
    kill_grace_s = 30.0
    """How long a command past its limit may take to end once everything in the container was killed; then the
    container is removed."""

    def __init__(
        self,
        image: str,
        client: Any = None,
        limits: Optional[ContainerLimits] = None,
        workdir: str = "/",
        env: Optional[Mapping[str, str]] = None,
        kind: str = "container",
        base_url: Optional[str] = None,
        image_hint: str = "",
    ) -> None:
        """``image_hint``: how to get ``image`` where the engine lacks it (said in the :class:`SandboxUnavailable`)."""
        self.client = client or docker_client(base_url)
        self.image = image
        self.limits = limits or ContainerLimits()
        self.workdir = workdir
        self._container: Any = None
        self._closing = threading.RLock()  # a second close waits for the first to remove the container
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="container-exec")
        _sweep_orphans_once(self.client)
        import docker

        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            self._pool.shutdown(wait=False)
            raise SandboxUnavailable(f"image {image!r} is not in the Docker engine; " + (image_hint or (
                "build it first (SWE instances' images: `skyrl-gym swe build`; the code sandbox's: `skygym-sandboxes "
                "build-image`)"))) from None
        self.name = f"skygym-{kind}-{uuid.uuid4().hex[:12]}"
        self.gone_why = ""  # why the container was removed before its owner closed it
        # Variables every later command gets, over the container's own (an environment its image activates
        # only in a login shell, say); a call's ``env`` goes over these.
        self.exec_env: Dict[str, str] = {}
        disk_bytes = self.limits.disk_mb * 2**20
        options = dict(
            name=self.name,
            detach=True,
            labels={LABEL: "1", OWNER_LABEL: owner_id(), KIND_LABEL: kind},
            network_mode="bridge" if self.limits.network else "none",
            mem_limit=f"{self.limits.memory_mb}m",
            memswap_limit=f"{self.limits.memory_mb}m",
            nano_cpus=int(self.limits.cpus * 1e9),
            pids_limit=self.limits.pids,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            working_dir=workdir,
            environment=dict(env or {}),
            tmpfs={"/tmp": "size=256m,exec"},
            ulimits=[docker.types.Ulimit(name="fsize", soft=disk_bytes, hard=disk_bytes)],
            # no log: what PID 1 prints went to the engine's log file, outside the layer and every limit (100 MB
            # written to /proc/1/fd/1 made a 573 MB log in 1.5 s); commands' output comes through their exec
            log_config=docker.types.LogConfig(type=docker.types.LogConfig.types.NONE),
        )
        engine = _engine_key(self.client)
        self.disk_quota = _DISK_QUOTA.get(engine, True)  # the engine caps the layer (until it says it cannot)
        try:
            with signals_deferred():
                try:
                    self._container = self.client.containers.run(
                        image, KEEPALIVE, **options,
                        **({"storage_opt": {"size": f"{self.limits.disk_mb}M"}} if self.disk_quota else {}))
                except docker.errors.APIError as exc:
                    if not self.disk_quota or not _refuses_disk_quota(exc):
                        raise
                    self._remove_by_name()
                    self.disk_quota = False
                    with _DISK_QUOTA_LOCK:
                        first = _DISK_QUOTA.get(engine, True)
                        _DISK_QUOTA[engine] = False
                    if first:
                        logger.warning(
                            "the Docker engine cannot cap a container's disk (%s); each container may write "
                            "files of at most %d MB, and one that writes more than that in all is removed",
                            str(exc.explanation or exc)[:200], self.limits.disk_mb)
                    self._container = self.client.containers.run(image, KEEPALIVE, **options)
        except BaseException:
            self._remove_by_name()  # created but not started: it still has a name
            self.close()
            raise
        upper = (getattr(self._container, "attrs", None) or {}).get("GraphDriver", {}).get("Data", {}).get("UpperDir")
        # the folder of the container's own layer where the engine's disk is this machine's: its files are counted
        # when inodes run short (_DiskWatch)
        self.upper_dir: Optional[str] = upper if isinstance(upper, str) and os.path.isdir(upper) else None
        Container._open.add(self)
        _DiskWatch.start()

    @classmethod
    def close_all(cls) -> int:
        """Remove every container this process still holds; returns how many. For Ctrl-C and SIGTERM:
        a command running in a removed container ends at once (its ``exec`` reports it killed, or
        the next call raises that the container is closed), so threads waiting on one return."""
        containers = list(cls._open)
        for container in containers:
            container.close()
        return len(containers)

    def _remove_by_name(self) -> None:
        with signals_deferred():
            try:
                self.client.containers.get(self.name).remove(force=True)
            except Exception:
                pass

    # ----- commands ---------------------------------------------------------------------------------
    def exec(
        self,
        command: str,
        timeout_s: float = 60.0,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        workdir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> ExecResult:
        """Run ``command`` with bash in the container; stdout and stderr together, capped at
        ``output_cap`` bytes. Never raises for the command's own failure: see ``exit_code``."""
        if self._container is None:
            raise RuntimeError("the container is closed")
        # A random end marker before the count of bytes past the cap, so the command's own text is not read as it.
        # The exit status is the engine's (`_exit_status`), never printed text: the command can read this marker.
        marker = "__skygym_end_" + secrets.token_hex(8) + "__"
        limit = max(1, int(timeout_s))
        # The command comes in through the environment, so no quoting can break out of the wrapper.
        # Output goes through a pipe that keeps the first bytes and drains the rest (no disk use);
        # `setsid` puts the command in a process group of its own that the limit kills whole.
        wrapper = (
            f'setsid timeout -s KILL {limit} bash -c "$SKYGYM_COMMAND" </dev/null 2>&1'
            f' | {{ head -c {output_cap}; printf "\\n{marker}"; wc -c | tr -d " \\n"; printf "\\n"; }}; '
            f'exit "${{PIPESTATUS[0]}}"'
        )
        environment = {**self.exec_env, **(env or {})}
        environment["SKYGYM_COMMAND"] = command
        started = time.monotonic()
        exec_id = self.client.api.exec_create(
            self._container.id,
            ["bash", "-c", wrapper],
            stdout=True,
            stderr=True,
            environment=environment,
            workdir=workdir or self.workdir,
            user="0",
        )["Id"]
        # Read at most the capped output and the wrapper's last line: more came past the pipe's cap, written to the
        # exec's stream from inside the container, and is not held in this process.
        future = self._pool.submit(_exec_output, self.client, exec_id, output_cap + EXEC_STREAM_SLACK)
        try:
            raw, overflowed = future.result(timeout=limit + 10)
        except concurrent.futures.TimeoutError:
            # Something the command started in the background keeps the pipe open: kill everything
            # in the container but its keep-alive process, which ends the exec.
            self._kill_all_but_init()
            try:
                raw, overflowed = future.result(timeout=self.kill_grace_s)
            except concurrent.futures.TimeoutError:
                # Still open (no process slot left to run the kill, say)
                self._remove_unstoppable()
                note = "[the command left processes that could not be stopped; the container was removed]"
                return ExecResult(-1, note, timed_out=True, duration_s=time.monotonic() - started)
        if overflowed:  # the command is still writing: stop it, as at its time limit
            stopped = self._stop_all_but_init()
            if not stopped:  # no process slot left to run the kill, say
                self._remove_unstoppable()
            what = "the container's processes were killed" if stopped else "the container was removed"
            note = (f"\n[the command wrote more than {output_cap} bytes around its output's cap, to the exec's stream "
                    f"itself; the rest was not read and {what}]")
            return ExecResult(-1, raw[:output_cap].decode("utf-8", "replace") + note, truncated=True,
                              duration_s=time.monotonic() - started)
        result = self._parse(raw, marker, output_cap, limit, time.monotonic() - started, self._exit_status(exec_id))
        if self.gone_why and self._container is None:  # the disk watcher removed it while the command ran
            result.output += f"\n[{self.gone_why}; the container was removed]"
        return result

    def disk_used_mb(self) -> float:
        """What the container has written to its own layer, in MB (the engine measures it)."""
        if self._container is None:
            raise RuntimeError("the container is closed")
        listed = self.client.api.containers(all=True, size=True, filters={"id": self._container.id})
        if not listed:
            raise RuntimeError("the container is gone")
        return (listed[0].get("SizeRw") or 0) / 2**20

    def _exit_status(self, exec_id: str, wait_s: float = 10.0) -> Optional[int]:
        """The exec's exit status as the engine saw it (None if it will not say within ``wait_s``). The only
        status trusted: the command can read the end marker (it is in the wrapper's command line, in /proc),
        print a forged last line, then kill the wrapper's shells so no true one follows; the engine's status is
        the wrapper's own (it exits with the command's), or its killing."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                state = self.client.api.exec_inspect(exec_id)
            except Exception:
                return None
            if not state.get("Running") and state.get("ExitCode") is not None:
                return int(state["ExitCode"])
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)

    @staticmethod
    def _parse(raw: bytes, marker: str, output_cap: int, limit: int, duration_s: float,
               engine_status: Optional[int]) -> ExecResult:
        # The wrapper's last line is "<marker><bytes left after the cap> <exit status>". Its status is never read:
        # the command could have forged it. The engine's (None: it did not say) is the only one.
        text = raw.decode("utf-8", "replace")
        output, found, status = text.rpartition("\n" + marker)
        if not found:  # the wrapper itself was killed: by the limit, or by the command (`kill -9 -1`)
            timed_out = duration_s >= limit - 0.5
            note = "" if timed_out else "\n[the command's shell was killed before it reported an exit status]"
            return ExecResult(-1, text[:output_cap] + note, timed_out=timed_out, duration_s=duration_s)
        leftover_text = status.strip().partition(" ")[0]
        leftover = int(leftover_text) if leftover_text.isdigit() else 0
        if leftover:
            output += f"\n[output truncated: {leftover} more bytes]"
        if engine_status is None:  # fail closed: a status nobody can vouch for is a failure
            output += "\n[the container engine did not report the command's exit status; counted as failed]"
            return ExecResult(-1, output, leftover > 0, False, duration_s)
        exit_code = engine_status
        timed_out = exit_code == 137 and duration_s >= limit - 0.5
        return ExecResult(exit_code, output, leftover > 0, timed_out, duration_s)

    def _kill_all_but_init(self) -> None:
        try:
            self.client.api.exec_start(
                # the shell's own kill: an image need not have a kill program (the SWE images have none)
                self.client.api.exec_create(self._container.id, ["bash", "-c", "kill -9 -1"], user="0")["Id"]
            )
        except Exception:
            pass

    def _remove_unstoppable(self) -> None:
        """A command left processes that could not be stopped: the container goes, and with it every process in
        it. Later calls raise that the container is closed."""
        self.gone_why = "a command left processes that could not be stopped"
        self.close()

    def _stop_all_but_init(self, wait_s: float = 5.0) -> bool:
        """Kill every process but the keep-alive's; whether, within ``wait_s``, no other is left (the engine lists
        them: a kill that could not start, at the process limit, leaves them all)."""
        self._kill_all_but_init()
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if len(self.client.api.top(self._container.id)["Processes"] or []) <= KEEPALIVE_PROCESSES:
                    return True
            except Exception:  # the container is gone, or the engine cannot list it
                return False
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    # ----- files ------------------------------------------------------------------------------------
    def read_file(self, path: str, max_bytes: int = 10_000_000) -> bytes:
        """The bytes of the regular file at ``path``. Raises FileNotFoundError, IsADirectoryError or
        ValueError (larger than ``max_bytes``, or not a regular file). The archive is read as it arrives
        and never past ``max_bytes`` and its headers: a folder, or a file swapped for a large one after
        the engine reported its size, costs this process no more memory than that."""
        import docker

        try:
            stream, stat = self._container.get_archive(path)
        except docker.errors.NotFound:
            raise FileNotFoundError(path) from None
        try:
            if stat.get("size", 0) > max_bytes:
                raise ValueError(f"{path} is {stat['size']} bytes, more than the {max_bytes} this reads")
            reader = _CappedReader(stream, max_bytes + 1_048_576, path)
            with tarfile.open(fileobj=reader, mode="r|") as archive:
                member = archive.next()
                if member is None or member.isdir():
                    raise IsADirectoryError(path)
                if not member.isfile():
                    raise ValueError(f"{path} is not a regular file")
                if member.size > max_bytes:
                    raise ValueError(f"{path} is {member.size} bytes, more than the {max_bytes} this reads")
                handle = archive.extractfile(member)
                assert handle is not None
                return handle.read()
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def write_file(self, path: str, data: bytes, mode: int = 0o644, make_folder: bool = True) -> None:
        """Create or replace the file at the absolute ``path`` (its folder is created, unless ``make_folder``
        is False: one command less, for a folder known to exist)."""
        if not path.startswith("/"):
            raise ValueError(f"write_file needs an absolute path, got {path!r}")
        folder, name = posixpath.split(posixpath.normpath(path))
        made = self.exec(f"mkdir -p -- {shlex.quote(folder)}", timeout_s=30) if make_folder else None
        if made is not None and not made.ok:
            why = "timed out" if made.timed_out else f"exit status {made.exit_code}"
            raise OSError(f"cannot create {folder} ({why} after {made.duration_s:.1f} s): "
                          f"{made.output.strip() or 'no output'}")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            archive.addfile(info, io.BytesIO(data))
        if not self._container.put_archive(folder, buffer.getvalue()):
            raise OSError(f"the Docker engine refused to write {path}")

    def put_tree(self, folder: str, files: Mapping[str, bytes]) -> None:
        """Write many files under ``folder`` in one archive: relative paths, folders created (0755),
        files 0644 whatever modes they came with."""
        self.exec(f"mkdir -p -- {shlex.quote(folder)}", timeout_s=30)
        buffer = io.BytesIO()
        made = set()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for rel, data in sorted(files.items()):
                parts = rel.split("/")
                for depth in range(1, len(parts)):
                    parent = "/".join(parts[:depth])
                    if parent not in made:
                        made.add(parent)
                        info = tarfile.TarInfo(parent)
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        archive.addfile(info)
                info = tarfile.TarInfo(rel)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                archive.addfile(info, io.BytesIO(data))
        if not self._container.put_archive(folder, buffer.getvalue()):
            raise OSError(f"the Docker engine refused to write under {folder}")

    # ----- life cycle -------------------------------------------------------------------------------
    def commit(self, repository: str, tag: str, changes: Optional[List[str]] = None) -> str:
        """Save the container's filesystem as the image ``repository:tag``; returns the tag."""
        with signals_deferred():
            self._container.commit(repository=repository, tag=tag, changes=changes or [])
        return f"{repository}:{tag}"

    @property
    def id(self) -> Optional[str]:
        return None if self._container is None else self._container.id

    def close(self) -> None:
        """Remove the container. Returns once it is gone, also where another thread's close is removing it (a
        run cut short closes what a cancelled trajectory's thread is still closing)."""
        with self._closing, signals_deferred():  # taken and removed, or neither: never half-way by Ctrl-C
            container, self._container = self._container, None
            Container._open.discard(self)
            if container is not None:
                try:
                    container.remove(force=True)
                except Exception:
                    pass
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "Container":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten container must not outlive its owner for long
        try:
            self.close()
        except Exception:
            pass


def containers_of_kind(client: Any, kind: str) -> List[Any]:
    """Every container (running or not) this module started with ``kind``: what tests check is gone."""
    return client.containers.list(all=True, filters={"label": f"{KIND_LABEL}={kind}"}, ignore_removed=True)
