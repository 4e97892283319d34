"""A command's output reaches its caller whole, however late the client reads the engine's answer.

docker-py's ``exec_start`` loses output that arrived together with the HTTP response's headers (it reads them
through a buffer, then the raw socket). On a loaded machine a quick command's whole output can arrive that way:
in CI a SWE instance whose ``git apply`` printed nothing and exited 0 was read as "the test patch does not
apply" and dropped. Here the client reads every answer late on purpose, so the output is always in that buffer.
"""

from __future__ import annotations

import http.client
import select
import socket
import time

import pytest

from skygym_sandboxes import Limits, Status
from skygym_sandboxes.containers import Container, docker_client
from skygym_sandboxes.docker_exec import ExecStream
from tests.sandboxes.docker_support import make_docker_sandbox

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LATE_S = 1.0  # long enough for the engine to run the command and send its output before the headers are read


class LateReader:
    until = b""  # while set: an answer's headers are read only once these bytes have come too


def _wait_for(sock, wanted: bytes, timeout_s: float = 60.0) -> None:
    """Until ``wanted`` is among the bytes waiting on ``sock`` (peeked, so still there for the reader)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if select.select([sock], [], [], 0.05)[0] and wanted in sock.recv(1 << 16, socket.MSG_PEEK):
            return
        time.sleep(0.01)


@pytest.fixture
def late_reader(monkeypatch):
    """Every HTTP answer from the engine is read LATE_S after it was asked for, and one while ``until`` is set
    not before those bytes are there too (LATE_S alone raced a loaded machine's slow ``docker exec``)."""
    begin = http.client.HTTPResponse.begin
    late = LateReader()

    def late_begin(self):
        time.sleep(LATE_S)
        sock = getattr(getattr(self.fp, "raw", None), "_sock", None)
        if late.until and type(sock) is socket.socket:  # a plain socket's bytes (not TLS's) can be peeked
            _wait_for(sock, late.until)
        return begin(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
    return late


def test_a_quick_commands_output_survives_a_late_reader(docker_engine, late_reader):
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client) as container:
        # the case itself: the whole output came in with the headers (docker-py 7.x's exec_start returns b"" here)
        exec_id = client.api.exec_create(container._container.id, ["echo", "early"], stdout=True, stderr=True)["Id"]
        late_reader.until = b"early\n"
        try:
            stream = ExecStream(client, exec_id)
        finally:
            late_reader.until = b""
        try:
            assert stream._pending, "the late reader no longer puts the output in the HTTP reader's buffer"
            assert stream.read_to_end() == b"early\n"
        finally:
            stream.close()

        done = container.exec("echo kept; echo on-stderr >&2; exit 3", timeout_s=30)
        assert (done.exit_code, done.timed_out) == (3, False), done
        assert done.output.splitlines() == ["kept", "on-stderr"]

        big = container.exec("head -c 200000 /dev/zero | tr '\\0' x", timeout_s=30, output_cap=300_000)  # more than one buffer
        assert big.ok and big.output == "x" * 200_000


def test_a_warm_workers_first_message_survives_a_late_reader(docker_engine, late_reader):
    """The supervisor says it is ready as soon as it starts: that first message arrives with the headers."""
    box = make_docker_sandbox(docker_engine, Limits(wall_s=10), pool_size=1)
    try:
        result = box.run("print(6 * 7)")
        assert (result.status, result.stdout) == (Status.OK, "42\n"), result
        from skygym_sandboxes.docker_backend import OWNER_LABEL, owner_id

        client = docker_client(docker_engine.base_url)
        mine = client.containers.list(filters={"label": f"{OWNER_LABEL}={owner_id()}"})
        assert mine and all(c.attrs["HostConfig"]["LogConfig"]["Type"] == "none" for c in mine)  # no log file
    finally:
        box.close()


def test_output_written_around_the_cap_to_the_exec_stream_is_not_held(docker_engine):
    """``head -c`` caps the command's pipe, but a process in the container may write to the exec's stream itself:
    the stdout of the wrapper shell, through /proc. The caller reads at most the cap and a little more, then stops
    the command."""
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client) as container:
        # a 300 s sleep against a 60 s bound: a loaded machine's slow kill is not taken for the sleep
        command = ("for f in /proc/[0-9]*/cmdline; do grep -qa 'setsi[d] timeout' $f && w=${f%/cmdline}; done; "
                   "head -c 50000000 /dev/zero > $w/fd/1; sleep 300")
        done = container.exec(command, timeout_s=600, output_cap=1000)
        assert done.output.startswith("\0" * 1000), done.output[:200]  # it reached the stream, past the pipe
        assert (done.exit_code, done.truncated) == (-1, True)
        assert done.output.endswith("the rest was not read and the container's processes were killed]")
        assert len(done.output) < 1000 + 200 and done.duration_s < 60  # not the 50 MB, nor the sleep
        assert container.exec("echo alive").output.strip() == "alive"


def test_the_keep_alive_process_reaps_what_killed_commands_leave(docker_engine):
    """``sleep infinity`` as PID 1 reaped nothing: each process a kill left became a zombie, counted against the
    container's process limit until nothing could start. The zombies are counted from /proc (the cgroup's process
    count had this exec's own processes in it, as many as the bound at best: a loaded machine's poll ran to its
    deadline)."""
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client) as container:
        # orphans, PID 1's children (their output elsewhere: the exec would wait for its stream until its limit)
        started = container.exec("for i in $(seq 1 40); do (sleep 1000 > /dev/null 2>&1 &); done", timeout_s=60)
        assert started.exit_code == 0 and not started.timed_out, started
        container._kill_all_but_init()
        zombies = ('z=0; for f in /proc/[0-9]*/stat; do read -r _ _ state _ < "$f" 2>/dev/null && [ "$state" = Z ] '
                   '&& z=$((z + 1)); done; echo $z')
        deadline = time.monotonic() + 60  # each poll is a docker exec, seconds on a loaded machine
        while int(container.exec(zombies).output.strip()) > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert int(container.exec(zombies).output.strip()) == 0


def test_a_container_whose_processes_cannot_be_stopped_after_an_overflow_is_removed(docker_engine, monkeypatch):
    """When the kill after an overflow cannot start (at the process limit, as an attacker's pass made it), the
    writer goes on: the container is removed, and the result says so (it said the processes were killed). The
    kill that cannot start is a stand-in here; the writer, the engine and its process listing are real."""
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client) as container:
        monkeypatch.setattr(container, "_kill_all_but_init", lambda: None)
        # a 300 s sleep against a 60 s bound: a loaded machine's slow removal is not taken for the sleep
        command = ("for f in /proc/[0-9]*/cmdline; do grep -qa 'setsi[d] timeout' $f && w=${f%/cmdline}; done; "
                   "(setsid bash -c \"while :; do head -c 1000000 /dev/zero; done > $w/fd/1\" &); sleep 300")
        done = container.exec(command, timeout_s=600, output_cap=1000)
        assert done.exit_code == -1 and done.output.endswith("the rest was not read and the container was removed]")
        assert container.id is None and container.gone_why == "a command left processes that could not be stopped"
        assert done.duration_s < 60


# Reads the end marker from the wrapper shell's command line, prints a forged last line with it, then kills the
# wrapper's shells so that no true last line follows.
FORGED_STATUS = r"""W=$(awk '{print $4}' /proc/$PPID/stat)
m=$(grep -ao '__skygym_end_[0-9a-f]*__' /proc/$W/cmdline | head -1)
printf '\n%s0 0\n' "$m"; sleep 0.5
for s in /proc/[0-9]*/stat; do read -r pid _ _ pp _ < $s; [ "$pp" = "$W" ] && [ "$pid" != "$PPID" ] && kill -9 $pid; done
kill -9 "$W"; exit 3"""


def test_a_command_cannot_forge_its_exit_status(docker_engine):
    """The status came from the wrapper's last line only, and this command made that line say 0 (it exits 3)."""
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client) as container:
        forged = container.exec(FORGED_STATUS, timeout_s=30)
        assert forged.exit_code == 137 and not forged.timed_out, forged  # its wrapper was killed: the engine says so
        honest = container.exec("echo fine; exit 5", timeout_s=30)
        assert (honest.exit_code, honest.output) == (5, "fine\n"), honest
