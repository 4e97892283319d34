"""The ``docker`` backend: programs run in containers of a locally built image.

Containers have no network, a read-only root, tmpfs scratch and /tmp, memory/CPU/pids limits, all
capabilities dropped but those the supervisor needs to hand the program to ``nobody``, and
``no-new-privileges``. A warm worker is a container plus a supervisor started with ``docker exec``
and kept attached, so each program costs a framed message over the exec socket, not a new exec.
Containers are labelled with their owner (host and PID); a new ``DockerSandbox`` removes the ones
whose owner is gone (a caller that was killed), and ``close`` removes its own.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
import uuid
import weakref
from typing import Any, Dict, List, Optional, Union

from skygym_sandboxes.docker_exec import ExecStream
from skygym_sandboxes.protocol import BaseSandbox
from skygym_sandboxes.types import Limits, RunRequest, RunResult, SandboxUnavailable
from skygym_sandboxes.workers import (
    CANCEL_POLL_S,
    SUPERVISOR_SOURCE,
    Cancelled,
    SupervisorWorker,
    WarmPool,
    WorkerDied,
    pid_alive,
)

LABEL = "io.skyrl-gym.sandbox"
OWNER_LABEL = "io.skyrl-gym.sandbox.owner"
SCRATCH = "/sandbox/work"
# Containers share the host's user namespace, where RLIMIT_NPROC counts a uid's processes
# machine-wide: each container's programs get a uid of their own (see skygym_sandboxes.local).
PROGRAM_UID_RANGE = (260_000, 320_000)
# The supervisor runs as root inside the container with only these capabilities; the program it
# forks switches to nobody, which clears them.
SUPERVISOR_CAPS = ["SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"]
DEFAULT_PRELOAD = (
    "collections,itertools,functools,heapq,bisect,math,re,string,json,random,operator,copy,typing,decimal"
)


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def remove_orphaned_containers(client: Any) -> List[str]:
    """Remove sandbox containers that are no longer running, or whose owning process on this host
    is gone. Running containers of another host are left alone: their owner may be alive."""
    removed = []
    host = socket.gethostname()
    # ignore_removed: another process may remove a container between the listing and its inspection
    for container in client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
        owner_host, _, pid = container.labels.get(OWNER_LABEL, "").rpartition(":")
        running = container.status in ("running", "created", "restarting")
        if running and (owner_host != host or (pid.isdigit() and pid_alive(int(pid)))):
            continue
        try:
            container.remove(force=True)
            removed.append(container.name)
        except Exception:
            pass
    return removed


def remove_session_containers(client: Any, session: str, owner: Optional[int] = None) -> None:
    """Remove the containers of one sandbox (its session label), whatever their state; only in the process
    ``owner`` when given (a forked child collecting its copy of the sandbox leaves the parent's containers)."""
    if owner is not None and os.getpid() != owner:
        return
    try:
        containers = client.containers.list(all=True, filters={"label": f"{LABEL}.session={session}"},
                                            ignore_removed=True)
    except Exception:  # the engine is gone: nothing to remove there
        return
    for container in containers:
        try:
            container.remove(force=True)
        except Exception:  # removed meanwhile (by its owner, or the engine's own cleanup): nothing left to do
            pass


class DockerExecChannel:
    """A supervisor started with ``docker exec`` whose stdin/stdout is the attached exec socket."""

    def __init__(self, client: Any, container: Any, command: List[str]) -> None:
        self.client = client
        self.container = container
        exec_id = client.api.exec_create(
            container.id, command, stdin=True, stdout=True, stderr=True, tty=False, user="0"
        )["Id"]
        self._stream = ExecStream(client, exec_id)
        self._stream.sock.setblocking(True)
        self._stdout = self._stream.stdout  # the supervisor's demultiplexed stdout, taken from the front
        self._killed = False

    def send(self, data: bytes) -> None:
        try:
            self._stream.send(data)
        except OSError as exc:
            raise WorkerDied(f"could not send to the container's supervisor: {exc}") from None

    def _pump(self, deadline: Optional[float], poll_s: Optional[float] = None) -> None:
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise TimeoutError("the container's supervisor did not answer in time")
        if poll_s is not None:
            timeout = poll_s if timeout is None else min(timeout, poll_s)
        if not self._stream.pump(timeout):
            stderr = self._stream.stderr.decode("utf-8", "replace")[-1000:]
            raise WorkerDied(f"the container's supervisor exited; stderr: {stderr or 'nothing'}")

    def recv_exact(
        self, size: int, deadline: Optional[float], cancel: Optional[threading.Event] = None
    ) -> bytes:
        while len(self._stdout) < size:
            if cancel is not None and cancel.is_set():
                raise Cancelled("the run was cancelled")
            self._pump(deadline, poll_s=CANCEL_POLL_S if cancel is not None else None)
        data = bytes(self._stdout[:size])
        del self._stdout[:size]
        return data

    def alive(self) -> bool:
        return not self._killed

    def kill(self, grace_s: float = 0.0) -> None:
        if self._killed:
            return
        self._killed = True
        self._stream.close()
        try:
            self.container.remove(force=True)
        except Exception:
            pass


class DockerSandbox(BaseSandbox):
    """Runs programs in containers of ``image`` (built by ``skygym-sandboxes build-image``).

    ``warm=True`` keeps ``pool_size`` containers, each with an attached supervisor; ``warm=False``
    creates and removes a container per run. ``base_url`` picks the engine (default: the
    environment's ``DOCKER_HOST`` or the local socket).
    """

    name = "docker"

    def __init__(
        self,
        limits: Optional[Union[Limits, dict]] = None,
        image: Optional[str] = None,
        warm: bool = True,
        pool_size: int = 2,
        base_url: Optional[str] = None,
        python: str = "/usr/bin/python3",
        cpus: float = 1.0,
        preload: str = DEFAULT_PRELOAD,
        client: Any = None,
    ) -> None:
        super().__init__(limits)
        try:
            import docker
        except ImportError as exc:
            raise SandboxUnavailable(
                "the docker backend needs the docker package: pip install 'skyrl-gym[docker]'"
            ) from exc
        from skygym_sandboxes.images.build_image import DEFAULT_TAG, image_exists

        try:
            self.client = client or (
                docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
            )
            self.client.ping()
        except Exception as exc:
            raise SandboxUnavailable(
                f"cannot reach a Docker engine ({exc}); start dockerd (as root: `dockerd > /var/log/dockerd.log 2>&1 &`;"
                " `skyrl-gym doctor` checks it)") from exc
        self.image = image or DEFAULT_TAG
        if not image_exists(self.client, self.image):
            raise SandboxUnavailable(f"image {self.image!r} not found; build it with `skygym-sandboxes build-image`")
        self.python = python
        self.cpus = cpus
        self.preload = preload
        self.warm = warm
        self.name = "docker-warm" if warm else "docker"
        self.default_concurrency = pool_size if warm else 2
        self._session = uuid.uuid4().hex[:10]
        self._own_client = client is None  # closed with the sandbox; a caller's stays the caller's
        remove_orphaned_containers(self.client)
        # a sandbox dropped without close(), or a process ending without it, left its containers running (`sleep
        # infinity`) until another sandbox started on that engine: removed when it is collected or at exit (a kill
        # leaves them to that sweep)
        self._leftovers = weakref.finalize(self, remove_session_containers, self.client, self._session,
                                           os.getpid())
        self._pool: Optional[WarmPool] = None
        if warm:
            self._pool = WarmPool(lambda: self._start_worker("serve"), size=pool_size, name=self.name)

    def _container_kwargs(self, uid: int) -> Dict[str, Any]:
        limits = self.limits
        memory_mb = (limits.memory_mb or 1024) + 128  # room for the supervisor beside the program
        scratch_mb = limits.scratch_mb or 256
        return dict(
            image=self.image,
            command=["sleep", "infinity"],
            detach=True,
            init=True,  # a real PID 1 that reaps whatever a run leaves
            network_mode="none",
            read_only=True,
            # /sandbox (the work folder's parent) belongs to the program's uid: the supervisor, root,
            # never writes into it; the program's own uid writes files, fetches and cleans up.
            tmpfs={
                "/sandbox": f"size={scratch_mb}m,mode=700,uid={uid},gid={uid}",
                "/tmp": f"size={scratch_mb}m,mode=1777",
            },
            mem_limit=f"{memory_mb}m",
            memswap_limit=f"{memory_mb}m",
            pids_limit=(limits.processes or 64) + 16,
            nano_cpus=int(self.cpus * 1e9),
            cap_drop=["ALL"],
            cap_add=SUPERVISOR_CAPS,
            security_opt=["no-new-privileges"],
            ipc_mode="private",
            labels={LABEL: "1", OWNER_LABEL: owner_id(), f"{LABEL}.session": self._session},
            name=f"skyrl-sandbox-{self._session}-{uuid.uuid4().hex[:8]}",
            environment={"LANG": "C.UTF-8"},
            log_config={"Type": "none", "Config": {}},  # nothing reaches the engine's log file, outside every limit
        )

    def _start_worker(self, mode: str) -> SupervisorWorker:
        uid = PROGRAM_UID_RANGE[0] + secrets.randbelow(PROGRAM_UID_RANGE[1] - PROGRAM_UID_RANGE[0])
        container = self.client.containers.run(**self._container_kwargs(uid))
        program_user = f"{uid}:{uid}"
        command = [
            self.python,
            "-I",
            "-c",
            SUPERVISOR_SOURCE,
            mode,
            "--root",
            "/sandbox",
            "--work",
            SCRATCH,
            "--wipe",
            "/tmp",
            "--wipe",
            "/dev/shm",
            "--run-as",
            program_user,
        ]
        if mode == "serve" and self.preload:
            command += ["--preload", self.preload]
        try:
            channel = DockerExecChannel(self.client, container, command)
            return SupervisorWorker(channel, expect_ready=(mode == "serve"))
        except Exception:
            try:
                container.remove(force=True)
            except Exception:
                pass
            raise

    def _run(
        self, request: RunRequest, limits: Limits, cancel: Optional[threading.Event] = None
    ) -> RunResult:
        if self._pool is not None:
            return self._pool.run(request, limits, cancel=cancel)
        worker = self._start_worker("once")
        try:
            return worker.run(request, limits, cancel)
        finally:
            worker.kill()

    def wait_ready(self, timeout_s: float = 120.0) -> bool:
        return self._pool.wait_ready(timeout_s) if self._pool is not None else True

    def containers(self) -> List[Any]:
        """This sandbox's containers (for inspection and tests)."""
        return self.client.containers.list(all=True, filters={"label": f"{LABEL}.session={self._session}"})

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        if self._pool is not None:
            self._pool.close()
        self._leftovers()  # anything a failed start left behind
        if self._own_client:
            self.client.close()
