"""The warm pool: workers are recycled, replaced when they die, and a hung worker never hangs the caller."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest

from skygym_sandboxes import Limits, RunRequest, Status
from skygym_sandboxes.local import LocalSandbox
from skygym_sandboxes.workers import BACKSTOP_S

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")


def supervisor_pid(box: LocalSandbox) -> int:
    """The PID of the idle worker's launcher (bubblewrap) process."""
    (worker,) = box._pool._idle  # type: ignore[union-attr]
    return worker.channel.process.pid


def test_workers_are_recycled_after_max_runs():
    box = LocalSandbox(pool_size=1, max_runs_per_worker=2)
    try:
        assert box.wait_ready(60)
        launchers = []
        for _ in range(5):
            assert box.run("print('x')").stdout == "x\n"
            box.wait_ready(60)
            launchers.append(supervisor_pid(box))
        assert len(set(launchers)) >= 2
    finally:
        box.close()


def test_a_worker_killed_from_outside_is_replaced():
    box = LocalSandbox(pool_size=1)
    try:
        assert box.wait_ready(60)
        os.killpg(supervisor_pid(box), signal.SIGKILL)
        time.sleep(0.2)
        first = box.run("print(1)")
        # The dead worker answers with a typed failure (or was already replaced); either way the next run works.
        assert first.status in (Status.OK, Status.KILLED, Status.SANDBOX_ERROR)
        assert box.run("print(2)").stdout == "2\n"
    finally:
        box.close()


@pytest.mark.slow
def test_a_hung_worker_is_torn_down_at_the_backstop():
    box = LocalSandbox(pool_size=1)
    try:
        assert box.wait_ready(60)
        launcher = supervisor_pid(box)
        # The supervisor is bubblewrap's child (in its own session); freeze it while a program runs.
        children = open(f"/proc/{launcher}/task/{launcher}/children").read().split()
        assert len(children) == 1
        threading.Timer(0.3, lambda: os.kill(int(children[0]), signal.SIGSTOP)).start()
        started = time.monotonic()
        result = box.run(RunRequest(code="import time\ntime.sleep(30)", limits=Limits(wall_s=1)))
        elapsed = time.monotonic() - started
        assert result.status == Status.TIMEOUT and "stopped answering" in result.message, result
        assert elapsed < 1 + BACKSTOP_S + 3
        assert box.run("print('fresh worker')").stdout == "fresh worker\n"
    finally:
        box.close()
