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


def test_a_worker_killed_from_outside_is_replaced_and_the_run_goes_to_another():
    """An idle warm worker that died (killed from outside, the host's OOM killer) once answered the next run with
    `killed`, though its program never ran: an honest rollout scored 0. The request reached no worker, so the pool
    runs it on a fresh one."""
    box = LocalSandbox(pool_size=1)
    try:
        assert box.wait_ready(60)
        os.killpg(supervisor_pid(box), signal.SIGKILL)
        time.sleep(0.2)
        first = box.run("print(1)")
        assert (first.status, first.stdout) == (Status.OK, "1\n"), first
        assert box.run("print(2)").stdout == "2\n"
    finally:
        box.close()


class _LimitThatCannotBeSet:
    """A unit-test double of a worker's memory cgroup whose limit the kernel refuses to set."""

    def before_run(self, limits):
        raise OSError(16, "Device or resource busy")


def test_a_run_whose_memory_limit_cannot_be_set_goes_to_another_worker():
    box = LocalSandbox(pool_size=1)
    try:
        assert box.wait_ready(60)
        (worker,) = box._pool._idle  # type: ignore[union-attr]
        worker.cgroup = _LimitThatCannotBeSet()
        result = box.run("print(3)")
        assert (result.status, result.stdout) == (Status.OK, "3\n"), result
        assert not worker.alive()  # the worker that could not be limited was torn down
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
        assert elapsed < 1 + BACKSTOP_S + 20  # the frozen worker never answers: room for a loaded machine
        assert box.run("print('fresh worker')").stdout == "fresh worker\n"
    finally:
        box.close()


def test_async_runs_take_turns_by_whose_work_they_are(monkeypatch):
    """``arun`` handed every run to a thread of its own pool, first come, first served, where it waited for a worker:
    the code envs' runs of one serve-env client (searchcode's, stepped on the loop) made another client's run wait
    behind all of them, and the threads did not carry the client's name (an attacker's pass). With one worker, one
    client's four runs (held in their turn until all five are in) and then another's one: the other's runs second,
    not fifth. The order is the one the runs took their turns in (runs of 0.4 s raced a loaded machine: one could end
    before the last arrived, and the order the answers reached their tasks is not the order they ran in)."""
    import asyncio

    from skygym_sandboxes.turns import turn_key

    box = LocalSandbox(pool_size=1)
    try:
        assert box.wait_ready(60)
        released, ran = threading.Event(), []
        run_in_turn = box._pool._run_in_turn

        def held_in_turn(request, *args):
            ran.append(request.code)
            if request.code == "print('busy')":
                released.wait(timeout=30)
            return run_in_turn(request, *args)

        monkeypatch.setattr(box._pool, "_run_in_turn", held_in_turn)

        async def main() -> None:
            async def run(key: str, code: str) -> None:
                turn_key.set(key)  # in this task's own context
                result = await box.arun(code)
                assert result.status == Status.OK, result

            async def waiting(count: int, what: str) -> None:
                deadline = time.monotonic() + 30
                while box._pool.turns.waiting() < count:
                    assert time.monotonic() < deadline, what
                    await asyncio.sleep(0.01)

            busy = [asyncio.ensure_future(run("busy", "print('busy')")) for _ in range(4)]
            await waiting(3, "the runs never queued")  # one runs, three wait for their turn
            light = asyncio.ensure_future(run("light", "print('light')"))
            await waiting(4, "the light run never queued")
            released.set()
            await asyncio.gather(*busy, light)

        try:
            asyncio.run(main())
        finally:
            released.set()
        assert ran == ["print('busy')", "print('light')", "print('busy')", "print('busy')", "print('busy')"]
        assert box._pool.turns._free == 1 and not box._pool.turns._held
    finally:
        box.close()
