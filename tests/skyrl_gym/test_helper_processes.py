"""Helper processes (``skyrl_gym.helper_processes``): the fresh interpreters that run SQL tool work and math-verify
outside the caller's process."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import pytest

from skyrl_gym.helper_processes import HelperDied, HelperPool, HelperTimeout


def _die_once(flag: str) -> int:
    """Kills its helper the first time (as an out-of-memory kill would), answers the second."""
    if not os.path.exists(flag):
        open(flag, "w").close()
        os._exit(1)
    return os.getpid()


def _echo_after(seconds: float, value: str) -> str:
    time.sleep(seconds)
    return value


@pytest.fixture
def pool():
    made = HelperPool(2)
    yield made
    made.close()


def test_a_call_runs_in_a_helper_and_what_it_raises_is_raised_here(pool):
    helper_pid = pool.call(os.getpid)
    assert helper_pid != os.getpid() and pool.pids() == [helper_pid]
    assert pool.call(os.getpid) == helper_pid  # the same helper serves the next call
    with pytest.raises(ValueError, match="invalid literal"):
        pool.call(int, "not a number")
    assert pool.call(os.getpid) == helper_pid  # an exception in the function costs no helper
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):  # the caller is told, not a helper
        pool.call(lambda: 1)
    assert pool.call(os.getpid) == helper_pid


def test_a_function_of_the_main_script_is_refused_with_the_reason(pool, monkeypatch):
    def scored(answer):
        return answer

    monkeypatch.setattr(scored, "__module__", "__main__")
    with pytest.raises(ValueError, match="defined in the main script.*move it into a module"):
        pool.call(scored, 1)


def _spin(seconds: float) -> str:
    """Python that runs ``seconds`` and says how it ended (a catch-all ``except Exception`` included, as
    math-verify's has)."""
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            pass
    except Exception as exc:
        return f"took the alarm for its own error: {exc!r}"
    return "ran to its end"


def _deaf(seconds: float) -> None:
    """Code that does not come back to Python to be stopped (C code that checks no signals): the alarm is held."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(seconds)


def test_a_call_past_its_time_limit_is_stopped_in_its_helper_which_goes_on_serving(pool, monkeypatch):
    """Stopped in its helper, not killed by the caller: the caller's 1 s of grace is 30 here (a loaded machine
    took longer to deliver a stopped call's answer); a call the alarm did not stop would still be killed at 30 s."""
    from skyrl_gym import helper_processes

    monkeypatch.setattr(helper_processes, "KILL_GRACE_S", 30.0)
    first = pool.call(os.getpid)
    for func, args in ((time.sleep, (60,)), (_spin, (60,))):
        start = time.monotonic()
        with pytest.raises(HelperTimeout, match="longer than 0.5 s; it was stopped"):
            pool.call(func, *args, timeout=0.5)
        assert time.monotonic() - start < 60  # only a bound for a broken test: it returns at once
        assert pool.call(os.getpid) == first  # no fresh helper to start (0.3-0.6 s with math-verify)
    assert pool.call(_spin, 0.05, timeout=5) == "ran to its end"  # no alarm left over for the next call


def test_a_call_that_cannot_be_stopped_has_its_helper_killed_and_the_next_call_gets_a_fresh_one(pool):
    first = pool.call(os.getpid)
    start = time.monotonic()
    with pytest.raises(HelperTimeout, match="longer than 0.5 s and did not stop; its helper was killed"):
        pool.call(_deaf, 60, timeout=0.5)
    assert time.monotonic() - start < 30
    assert not _running(first)
    assert pool.call(os.getpid) not in (first, os.getpid())


def test_a_helper_that_died_after_its_last_answer_does_not_cost_the_next_call(pool, tmp_path):
    """A reference answer scored 0 with "math-verify helper died (Broken pipe)" in a loaded test run: its helper
    had died after answering the call before, while it still looked alive. Here the helper is killed and made to
    look alive to the caller; the next call is asked again on a fresh helper and gets its answer."""
    pool.call(os.getpid)
    (helper,) = pool._helpers
    dead = helper.process
    dead.kill()
    dead.wait()
    dead.poll = lambda: None  # what the caller sees in the race: a process that died after it looked
    assert pool.call(os.getpid) not in (dead.pid, os.getpid())
    # a helper that dies under the call gets it once more, too
    assert pool.call(_die_once, str(tmp_path / "flag")) not in (dead.pid, os.getpid())


def test_a_call_that_kills_two_helpers_in_a_row_gets_an_error_that_says_so(pool):
    said = r"ended before it answered \(exit status 3\); its error output, if any, is above"
    with pytest.raises(HelperDied, match=said):
        pool.call(os._exit, 3)
    assert pool.call(os.getpid) != os.getpid()


def test_closing_the_pool_ends_a_busy_call_and_the_next_call_starts_a_helper_again(pool):
    pool.call(os.getpid)
    outcome = []

    def caller():
        try:
            pool.call(time.sleep, 60)
        except HelperDied as exc:
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    deadline = time.monotonic() + 30  # only stops a broken test from hanging
    # until the call is under way: its helper taken is not enough (under load, a close() before the call was sent
    # made the call start a fresh helper, as any later call does, and the test waited for it in vain)
    while not (pool._helpers and pool._helpers[0]._calls == 2) and time.monotonic() < deadline:
        time.sleep(0.01)
    pool.close()
    thread.join(timeout=30)
    assert len(outcome) == 1 and "its pool was closed" in str(outcome[0])  # no second try on a fresh helper
    assert pool.call(os.getpid) != os.getpid()


class _Interrupted(Exception):
    """Raised in the main thread by an alarm: Ctrl-C's KeyboardInterrupt, without touching pytest's own."""


@contextlib.contextmanager
def _interrupted_after(seconds: float):
    """Runs the block until an alarm interrupts it after ``seconds``; yields a list that holds True if it did."""

    def interrupt(signum, frame):
        if frame is not None and (frame.f_code is _interrupted_after.__wrapped__.__code__
                                  or frame.f_code.co_filename == contextlib.__file__):
            # not in the block: a 1 ms alarm on a loaded machine once fired right after it was set, and the
            # exception left the `with` line itself. The block is interrupted a moment later instead
            signal.setitimer(signal.ITIMER_REAL, 0.001)
            return
        raise _Interrupted

    interrupted = []
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield interrupted
    except _Interrupted:
        interrupted.append(True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_answer_due_to_an_interrupted_call_never_reaches_the_next_call(pool):
    """Ctrl-C in the caller while its helper works: the helper's answer still comes, later. The next call on that
    helper must get its own answer (a math verdict for another rollout's answer is a reward reaching the wrong
    rollout), so the interrupted call's helper is stopped."""
    with _interrupted_after(0.3) as interrupted:
        pool.call(_echo_after, 1.0, "the first call's answer")
    assert interrupted
    time.sleep(1.0)  # the first answer would have arrived by now
    assert pool.call(_echo_after, 0, "the second call's answer") == "the second call's answer"


def test_ctrl_c_does_not_end_a_helper(pool):
    """Ctrl-C reaches the terminal's whole process group; the trainer finishes its step, whose math rewards a
    helper computes: a helper ended by it gave that step's right answers an error verdict."""
    helper_pid = pool.call(os.getpid)
    os.kill(helper_pid, signal.SIGINT)
    time.sleep(0.5)
    assert pool.call(os.getpid) == helper_pid  # the same helper, alive


def test_a_forked_child_starts_its_own_helpers(pool):
    parent_helper = pool.call(os.getpid)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (runs in the child)
        try:
            os.write(write, json.dumps([pool.call(os.getpid), os.getpid()]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        child_helper, child_pid = json.loads(answer.read())
    os.waitpid(child, 0)
    assert child_helper not in (parent_helper, child_pid)  # not the parent's helper, whose pipes are the parent's
    assert pool.call(os.getpid) == parent_helper


_OWNER = """
import json, os, sys
from skyrl_gym.tools.blocking import tool_process_pool
from skyrl_gym.rewards.math import math_equal, _helper

pool = tool_process_pool()
pool.call(os.getpid)
math_equal("0.5", "\\\\frac{1}{2}")
with open(sys.argv[1], "w") as out:
    json.dump(pool.pids() + _helper.pids(), out)
os._exit(0)  # as a Ray actor or a pytest-xdist worker ends: no atexit, so no pool is closed
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: a process reparented to an init that does not reap stays one)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_helpers_end_with_the_process_that_started_them(tmp_path):
    """An owner that ended without closing its pools (killed, or ``os._exit``) must not leave helpers behind."""
    script, found, log = tmp_path / "owner.py", tmp_path / "pids.json", tmp_path / "owner.log"
    script.write_text(_OWNER)
    with log.open("w") as output:  # a file, not a pipe: helpers left behind would hold a pipe open
        done = subprocess.run([sys.executable, str(script), str(found)], stdout=output, stderr=output, timeout=180)
    assert done.returncode == 0, log.read_text()
    pids = json.loads(found.read_text())
    assert len(pids) == 2  # a tool helper and a math helper
    deadline = time.monotonic() + 30  # only stops a broken test from hanging: they end at once
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if _running(pid)]


def test_closing_the_pool_while_other_threads_take_idle_helpers(pool, monkeypatch):
    """close() listed the idle helpers, let go of its lock, then stopped them one by one: a call that took one not
    yet stopped had its pipes closed under it and raised AttributeError (3 times in 10 with a slow stop), which the
    math reward did not catch. Here every stop is slow; each call waits or gets a fresh helper, and its own answer."""

    def in_threads(values, seconds):
        answers = {}

        def caller(value):
            try:
                answers[value] = pool.call(_echo_after, seconds, value)
            except Exception as exc:  # what the test is about: reported below, with its type
                answers[value] = exc

        threads = [threading.Thread(target=caller, args=(value,)) for value in values]
        for thread in threads:
            thread.start()
        return threads, answers

    threads, _ = in_threads(["warm-a", "warm-b"], 0.3)  # two helpers, both idle after
    for thread in threads:
        thread.join(timeout=60)
    assert len(pool.pids()) == 2
    wait = subprocess.Popen.wait

    def slow_wait(self, *args, **kwargs):
        time.sleep(0.3)
        return wait(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "wait", slow_wait)
    closer = threading.Thread(target=pool.close)
    closer.start()
    time.sleep(0.05)  # close() is stopping the first idle helper now
    threads, answers = in_threads(["mine", "theirs"], 0.6)
    for thread in [closer, *threads]:
        thread.join(timeout=60)
    assert answers == {"mine": "mine", "theirs": "theirs"}


def test_an_odd_sys_path_reaches_the_helpers(pool, monkeypatch, tmp_path):
    """sys.path was pasted into the helper's command line as text: a pathlib entry did not parse there (every math
    verdict became "helper died") and 150 KB of entries passed the kernel's limit of one argument."""
    import pathlib

    monkeypatch.setattr(sys, "path", [*sys.path, pathlib.Path(tmp_path), *(f"/nowhere/{i:06d}" for i in range(15_000))])
    assert sum(map(len, map(str, sys.path))) > 150_000
    assert pool.call(os.getpid) != os.getpid()


def test_an_interrupted_start_leaves_no_helper_whose_ready_signal_poses_as_an_answer(pool):
    for delay in (0.001, 0.01, 0.03):  # in Popen, or while the helper starts
        with _interrupted_after(delay):
            pool.call(_echo_after, 0.5, "interrupted")
        assert pool.call(_echo_after, 0, f"after {delay}") == f"after {delay}"


def test_an_endless_timeout_is_no_limit_and_nan_is_refused(pool):
    assert pool.call(_echo_after, 0, "kept", timeout=float("inf")) == "kept"
    with pytest.raises(ValueError, match="NaN"):
        pool.call(os.getpid, timeout=float("nan"))


def test_an_answer_to_another_call_is_never_taken_for_this_ones(pool):
    """Whatever put it there, an answer in the pipe that names another call is not this call's answer: the helper
    is stopped and the call runs on a fresh one."""
    first = pool.call(os.getpid)
    (helper,) = pool._helpers
    helper._requests.send_bytes((999).to_bytes(8, "little") + pickle.dumps((_echo_after, (0, "a stray answer"))))
    assert pool.call(_echo_after, 0.1, "mine") == "mine"
    assert pool.call(os.getpid) not in (first, os.getpid())


def _own_alarm_handler(then: str) -> str:
    """A call that leaves the helper's alarm set up its own way: its own handler, the alarm ignored, or blocked."""
    if then == "handler":
        signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(ValueError("someone else's alarm")))
    elif then == "ignored":
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
    else:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    return then


def _swallow_the_alarm(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(end - time.monotonic())
        except BaseException:  # noqa: BLE001 (what a careless function does)
            pass
    return "finished late"


def test_each_call_gets_its_own_alarm_whatever_the_call_before_did_to_it(monkeypatch):
    """An attacker's pass: the alarm's handler was set once per helper, so a call that set its own handler, ignored
    or blocked the alarm left the next call with another's error or with no limit at all. The caller's grace is 30 s
    here (the swallowed alarm's call answered 0.6 s into a 1.2 s wait: a loaded machine can take longer); a spin
    with no alarm to stop it runs past it and is killed, not stopped."""
    from skyrl_gym import helper_processes

    monkeypatch.setattr(helper_processes, "KILL_GRACE_S", 30.0)
    pool = HelperPool(1)
    try:
        for then in ("handler", "ignored", "blocked"):
            assert pool.call(_own_alarm_handler, then) == then
            with pytest.raises(HelperTimeout, match="longer than 0.2 s; it was stopped"):
                pool.call(_spin, 60, timeout=0.2)
        # a call that takes its alarm for its own error and comes back past its limit is past it all the same
        with pytest.raises(HelperTimeout, match="longer than 0.2 s; it was stopped"):
            pool.call(_swallow_the_alarm, 0.6, timeout=0.2)
        assert pool.call(_echo_after, 0, "kept", timeout=1e7) == "kept"  # a limit past a pipe's longest wait
    finally:
        pool.close()
