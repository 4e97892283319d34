"""Helper processes: fresh Python interpreters that run this package's functions outside the caller's process.

Two kinds of work leave the process: CPU-bound tool work (SQL parsing and queries, see :mod:`skyrl_gym.tools.blocking`),
whose Python would hold the GIL and starve an event loop, and math-verify (:mod:`skyrl_gym.rewards.math`), which can
hang and whose own time limits need a main thread. Both go to a :class:`HelperPool`: up to ``size`` helpers, each
serving one call at a time. A call that outlives its ``timeout`` raises :class:`HelperTimeout`: the helper stops it
with an alarm in its main thread and goes on serving, and a call that does not come back to Python to be stopped
(C code that does not check for signals) has its helper killed :data:`KILL_GRACE_S` later (the next call starts a
fresh one). A helper that died before it answered gets the call once more, on a fresh helper, and a second death
raises :class:`HelperDied`.

A helper is ``python -c`` with the caller's ``sys.path``, not a :mod:`multiprocessing` process: those import the
caller's main script again, and a script without an ``if __name__ == "__main__":`` guard ran again in each of them
(the math reward scored a right answer 0.0, the SQL tools' pool broke). So the function must be importable by name
(one defined in the main script is not), and it and its arguments must pickle. A helper ignores Ctrl-C (the caller
decides when to stop, and may need the helper to finish its step) and ends with the process that started it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection
from typing import Any, Callable, List, Optional, Sequence, TypeVar

from skygym_sandboxes.turns import Turns

T = TypeVar("T")

# One helper per CPU, 4 at most, plus one: a helper whose answer waits for its caller's thread to take it (and send
# the next call) leaves the CPU to another helper. With 2 on 2 CPUs, text2sql ran 10-20 % slower at 64 episodes
# than with 3 (docs/tool_envs.md).
DEFAULT_SIZE = min(4, os.cpu_count() or 1) + 1
START_TIMEOUT_S = 120.0  # starting Python and importing the pool's modules (sympy takes seconds on a loaded machine)
# How long past its time limit a call may take to be stopped inside its helper before the helper is killed. A kill
# costs the next call a fresh helper (0.3-0.6 s for math-verify's); the alarm, a call's Python interrupted.
KILL_GRACE_S = 1.0
_LONGEST_WAIT_S = 2_000_000.0  # 23 days: a pipe's wait takes no more (its limit is 2**31 ms)
_READY = b"ready"


class HelperTimeout(TimeoutError):
    """A call ran past its time limit; its helper was killed."""


class HelperDied(RuntimeError):
    """A helper ended before it answered, twice in a row (or the pool was closed under the call)."""


class _Died(Exception):
    """A helper ended before it answered (internal: the call is tried once more)."""


class _Helper:
    """One helper process and its two pipes: requests in, answers out."""

    def __init__(self, preload: Sequence[str]) -> None:
        self._preload = tuple(preload)
        self.process: Optional[subprocess.Popen] = None
        self._requests: Optional[Connection] = None
        self._answers: Optional[Connection] = None
        self.ended = False  # set by HelperPool.close(): the call in progress gets HelperDied, not a second try
        self._calls = 0

    def _start(self) -> None:
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        # Only the pipes' numbers go in the command line: the caller's sys.path comes down the pipe (as text in the
        # command line, a pathlib entry did not parse and a long one passed the kernel's limit of one argument).
        code = (f"import pickle, sys; from multiprocessing.connection import Connection; "
                f"requests = Connection({request_read}, writable=False); "
                f"sys.path[:0] = pickle.loads(requests.recv_bytes()); "
                f"from {__name__} import serve; serve(requests, {answer_write})")
        try:
            self.process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                            pass_fds=(request_read, answer_write))
        except BaseException:
            os.close(request_write)
            os.close(answer_read)
            raise
        finally:  # the helper's ends: the helper alone holds them, so either side sees the other end
            os.close(request_read)
            os.close(answer_write)
        self._requests = Connection(request_write, readable=False)
        self._answers = Connection(answer_read, writable=False)
        try:
            path = [os.fspath(entry) for entry in sys.path if isinstance(entry, (str, os.PathLike))]
            self._requests.send_bytes(pickle.dumps(path))
            self._requests.send_bytes(pickle.dumps((os.getpid(), self._preload)))
            started = self._answers.poll(START_TIMEOUT_S)
            ready = self._answers.recv_bytes() if started else b""
        except (EOFError, OSError):
            raise _Died("ended as it started") from None
        except BaseException:  # interrupted (Ctrl-C) as it started: its ready signal must not pose as an answer
            self.kill()
            raise
        if not started:
            self.kill()
            raise HelperTimeout(f"a helper process did not start within {START_TIMEOUT_S:.0f} s")
        if ready != _READY:
            raise _Died(f"started with {ready[:40]!r}, not its ready signal")

    def kill(self) -> Optional[int]:
        """Stops the helper; returns the exit status it had ended with by itself, if it had."""
        process, self.process = self.process, None
        for connection in (self._requests, self._answers):
            if connection is not None:
                connection.close()
        self._requests = self._answers = None
        if process is None:
            return None
        status = process.poll()
        process.kill()
        process.wait(timeout=30)
        return status

    def _call_once(self, payload: bytes, timeout: Optional[float]) -> Any:
        if self.process is None or self.process.poll() is not None:
            self.kill()
            self._start()
        self._calls += 1
        tag = self._calls.to_bytes(8, "little")  # the answer names its call: none can be taken for another's
        try:
            self._requests.send_bytes(tag + payload)
            answered_in_time = self._answers.poll(
                None if timeout is None else min(timeout + KILL_GRACE_S, _LONGEST_WAIT_S))
            answer = self._answers.recv_bytes() if answered_in_time else b""
        except (EOFError, OSError):
            raise _Died("ended before it answered") from None
        except BaseException:  # interrupted (Ctrl-C) while its answer was due: no later call may read that answer
            self.kill()
            raise
        if not answered_in_time:
            self.kill()
            raise HelperTimeout(f"the call ran longer than {timeout:g} s and did not stop; its helper was killed")
        if answer[:8] != tag:  # never seen since interrupted calls stop their helper; a fresh one gets the call
            raise _Died(f"answered call {int.from_bytes(answer[:8], 'little')}, not call {self._calls}")
        try:
            answered, value = pickle.loads(answer[8:])
        except Exception as exc:  # say, an exception class whose arguments do not rebuild it
            raise RuntimeError(f"a helper's answer could not be read: {type(exc).__name__}: {exc}") from None
        if not answered:
            raise value
        return value

    def call(self, payload: bytes, timeout: Optional[float]) -> Any:
        """A helper that died before answering (it can look alive for a moment after it died, say once it has sent
        its last answer) gets the call again on a fresh one, once: a reference answer scored 0 with "helper died" in a
        loaded test run."""
        for attempt in (1, 2):
            try:
                return self._call_once(payload, timeout)
            except _Died as died:
                if self.process is not None:
                    try:  # a helper that ended by itself has its exit status at once
                        self.process.wait(timeout=0.2)
                    except subprocess.TimeoutExpired:
                        pass
                status = self.kill()
                if self.ended or attempt == 2:
                    said = f" (exit status {status})" if status is not None else ""
                    closed = "; its pool was closed" if self.ended else "; its error output, if any, is above"
                    raise HelperDied(f"a helper process {died}{said}{closed}") from None
        raise AssertionError("unreachable")


class HelperPool:
    """Up to ``size`` helper processes, each serving one call at a time: a call takes a free helper (starting one
    while fewer than ``size`` exist) and waits only when all are busy, so one caller's slow calls hold one helper,
    not everyone's. Waiting calls take turns by whose work they are (:mod:`skygym_sandboxes.turns`: serve-env's
    clients), so one client's queue of calls does not hold up another's. ``preload`` names modules a helper imports
    as it starts, before any call's time limit runs."""

    def __init__(self, size: int, preload: Sequence[str] = ()) -> None:
        self.size = max(1, size)
        self._preload = tuple(preload)
        self._forget()
        _pools.add(self)
        os.register_at_fork(after_in_child=functools.partial(_forget_after_fork, weakref.ref(self)))

    def _forget(self) -> None:
        """No helpers (and, in a forked child, none of the parent's: their pipes are the parent's)."""
        self._helpers: List[_Helper] = []
        self._free: List[_Helper] = []
        self._changed = threading.Condition()
        self._turns = Turns(self.size)  # a forked child's threads hold none of its parent's turns
        self._waiters: Optional[concurrent.futures.ThreadPoolExecutor] = None

    def call(self, func: Callable[..., T], *args: Any, timeout: Optional[float] = None) -> T:
        """``func(*args)`` run in a helper; what it raises is raised here. Raises :class:`HelperTimeout` past
        ``timeout`` seconds (``None``: no limit) and :class:`HelperDied` when helpers die under it twice."""
        payload, timeout = self._request(func, args, timeout)
        with self._turns.turn():
            return self._call_in_turn(payload, timeout)

    @staticmethod
    def _request(func: Callable[..., Any], args: Sequence[Any], timeout: Optional[float]) -> "tuple[bytes, Optional[float]]":
        """The pickled call and its time limit, or the error a caller gets for them."""
        if getattr(func, "__module__", None) == "__main__":
            raise ValueError(f"{getattr(func, '__qualname__', func)!r} is defined in the main script, which a helper "
                             "process does not import: move it into a module")
        if timeout is not None:
            if math.isnan(timeout):
                raise ValueError("timeout must be a number of seconds, or None for no limit; got NaN")
            timeout = None if timeout == math.inf else float(timeout)
        return pickle.dumps((func, tuple(args), timeout)), timeout  # a function or argument that cannot go fails here

    def _call_in_turn(self, payload: bytes, timeout: Optional[float]) -> Any:
        # At most ``size`` calls hold a turn: this waits only while close() stops idle helpers.
        with self._changed:
            while not self._free and len(self._helpers) >= self.size:
                self._changed.wait()
            if self._free:
                helper = self._free.pop()
            else:
                helper = _Helper(self._preload)
                self._helpers.append(helper)
        try:
            helper.ended = False
            return helper.call(payload, timeout)
        finally:
            with self._changed:
                self._free.append(helper)
                self._changed.notify()

    async def acall(self, func: Callable[..., T], *args: Any, timeout: Optional[float] = None) -> T:
        """:meth:`call`, awaited: one waiting thread per busy helper, so waiting callers take no thread."""
        payload, timeout = self._request(func, args, timeout)
        with self._changed:
            if self._waiters is None:
                self._waiters = concurrent.futures.ThreadPoolExecutor(self.size, thread_name_prefix="skyrl-helper")
            waiters = self._waiters
        # the wait for a turn takes no thread; a turn is one of ``size`` threads, which gives it back itself
        return await self._turns.run_in_thread(waiters, self._call_in_turn, payload, timeout)

    def pids(self) -> List[int]:
        """The running helpers' process ids."""
        with self._changed:
            return [helper.process.pid for helper in self._helpers if helper.process is not None]

    def close(self) -> None:
        """Ends every helper now, busy ones included (their calls raise :class:`HelperDied`); the next call starts
        one again."""
        with self._changed:  # the idle ones are taken out while they are stopped, so no call can take one meanwhile
            idle, self._free = self._free, []
            busy = [helper for helper in self._helpers if helper not in idle]
        for helper in busy:
            helper.ended = True
            process = helper.process
            if process is not None:
                process.kill()  # its caller sees its pipe close, and cleans up
        for helper in idle:
            helper.kill()
        with self._changed:
            self._free.extend(idle)
            self._changed.notify_all()


def _forget_after_fork(pool_ref: "weakref.ref[HelperPool]") -> None:
    pool = pool_ref()
    if pool is not None:
        pool._forget()


_pools: "weakref.WeakSet[HelperPool]" = weakref.WeakSet()


def _watch_owner(owner: int) -> None:
    """Ends this helper once ``owner`` has ended, even if a fork of the owner still holds the request pipe open."""

    def watch() -> None:
        try:  # a pidfd is readable once the owner has ended, and no pid can be reused meanwhile
            select.select([os.pidfd_open(owner)], [], [])
        except ProcessLookupError:  # ended already
            pass
        except (AttributeError, OSError):  # no pidfd (not Linux 5.3 or later): ask every second
            while os.getppid() == owner:
                time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="skyrl-helper-owner", daemon=True).start()


class _OutOfTime(BaseException):
    """Raised in a call's Python by its alarm. Not an Exception: a function's ``except Exception`` (math-verify has
    many) would take it for its own error and go on, or answer as if it had finished."""


def _out_of_time(signum: int, frame: Any) -> None:
    if _alarm_set:
        raise _OutOfTime


_alarm_set = False


def _run(func: Callable[..., Any], args: Sequence[Any], timeout: Optional[float]) -> Any:
    """``func(*args)``, stopped by an alarm after ``timeout`` seconds (:class:`_OutOfTime`). The alarm's handler
    and mask are set for each call (a call before may have set its own, ignored or blocked it), and a call that
    comes back past its limit (one that took its alarm with a bare ``except``, say) is past it all the same."""
    global _alarm_set
    if timeout is None:
        return func(*args)
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    started = time.monotonic()
    try:
        _alarm_set = True
        signal.setitimer(signal.ITIMER_REAL, max(timeout, 1e-6))  # 0 would be no alarm at all
        value = func(*args)
    finally:  # the alarm is off before the answer is written: it cannot cut the answer in the pipe
        signal.setitimer(signal.ITIMER_REAL, 0)
        _alarm_set = False
    if time.monotonic() - started > timeout:
        raise _OutOfTime
    return value


def serve(requests: Connection, answer_fd: int) -> None:
    """A helper's main loop (run by ``python -c``, which has read the caller's ``sys.path`` from ``requests``): the
    owner's pid and the modules to preload, then per call an 8-byte tag and a pickled ``(func, args, timeout)`` in,
    the tag and a pickled ``(answered, value)`` out, until the request pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    owner, preload = pickle.loads(requests.recv_bytes())
    _watch_owner(owner)
    sys.stdout = sys.stderr  # what a called function prints cannot reach the answers (they have their own pipe)
    answers = Connection(answer_fd, readable=False)
    import importlib

    for module in preload:
        importlib.import_module(module)
    answers.send_bytes(_READY)
    while True:
        try:
            request = requests.recv_bytes()
        except EOFError:
            return
        tag = request[:8]
        timeout = None
        try:
            func, args, timeout = pickle.loads(request[8:])
            outcome = (True, _run(func, args, timeout))
        except _OutOfTime:
            outcome = (False, HelperTimeout(f"the call ran longer than {timeout:g} s; it was stopped"))
        except Exception as exc:
            outcome = (False, exc)
        try:
            answer = pickle.dumps(outcome)
        except Exception as exc:  # an answer or an exception that cannot go back says so
            answer = pickle.dumps((False, RuntimeError(f"a helper's answer could not be sent back: "
                                                       f"{type(exc).__name__}: {exc}")))
        answers.send_bytes(tag + answer)


atexit.register(lambda: [pool.close() for pool in list(_pools)])
