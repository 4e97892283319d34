"""Taking turns: a few slots (threads, helper processes, sandbox workers) shared by many callers, handed out so that
no one caller's queue holds up another's.

The pools that run env work served their waiters in arrival order, or in no order at all: a serve-env client that
queued a hundred slow steps or math checks made another client's single call wait behind every one of them. A
:class:`Turns` keeps its waiters in a line per *key* (whose work it is: :data:`turn_key`, which serve-env sets to
the client a request came from, None elsewhere) and gives a freed slot to the waiting key that holds the fewest
slots, the least recently served first among equals. A key's own waiters keep their order. So a key with one call
waiting gets the next slot that frees while another key holds them all, however many calls that one has queued;
with one key (a trainer, a script) it is a first-come, first-served queue.

``turn()`` waits in a thread and gives the slot back when its block ends; a wait given up (a time limit, Ctrl-C)
leaves nothing held. ``submit()`` is for async callers: it runs a function on an executor's thread once the key's
turn comes, and that thread gives the slot back, so neither taking nor returning a slot waits for an event loop
(when a loop handed them, a busy loop left workers idle: 512 sandbox runs took 21 s instead of 2.6). The pool's own
``turn()`` in that thread takes no second slot.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import threading
import weakref
from typing import Any, Callable, Deque, Dict, Hashable, Iterator, List, Optional, TypeVar

from skygym_sandboxes.interrupts import HELD, handlers_ready, signals_deferred

T = TypeVar("T")

turn_key: contextvars.ContextVar[Optional[Hashable]] = contextvars.ContextVar("skygym_turn_key", default=None)
"""Whose work the current code does, for the pools' turns: set it where a request's owner is known (serve-env sets
its client's name); threads started with a copy of the context (``asyncio.to_thread``, ``contextvars``) see it."""

_CURRENT = object()


class _Waiter:
    __slots__ = ("key", "wake", "granted", "refused", "entered", "left")

    def __init__(self, key: Hashable, wake: Callable[[], Optional[bool]],
                 refused: Optional[Callable[[], None]] = None) -> None:
        # wake: called once the waiter holds a slot; False when it cannot use it (the slot is passed on, then
        # refused() is called: what it tells its caller comes after the slot is back)
        self.key, self.wake, self.granted, self.refused = key, wake, False, refused
        self.entered = self.left = False  # for turn(): in line or holding; gone (its slot or place given back)


class Turns:
    """``slots`` holders at a time; waiters are served by key, the key holding the fewest slots first."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"Turns needs at least one slot, got {slots}")
        self.slots = slots
        self._forget()
        _every_turns.add(self)

    def _forget(self) -> None:
        """Every slot free (and, in a forked child, none held by its parent's threads, which it does not have)."""
        self._lock = threading.Lock()
        self._free = self.slots
        self._held: Dict[Hashable, int] = collections.Counter()
        self._waiting: Dict[Hashable, Deque[_Waiter]] = {}  # each waiting key's waiters, in arrival order
        self._served: Dict[Hashable, int] = {}  # when each key last got a slot (a count); pruned in _release
        self._grants = 0
        self._handed = threading.local()  # how many turns ``submit`` holds for the current thread

    def waiting(self) -> int:
        """How many calls wait for a slot now."""
        with self._lock:
            return sum(len(line) for line in self._waiting.values())

    def _join(self, key: Hashable, wake: Callable[[], Optional[bool]],
              refused: Optional[Callable[[], None]] = None) -> Optional[_Waiter]:
        """Take a free slot (None) or get in line (the waiter: see :class:`_Waiter`)."""
        waiter = _Waiter(key, wake, refused)
        self._enter(waiter)
        return None if waiter.granted else waiter

    def _enter(self, waiter: _Waiter) -> None:
        """``waiter`` takes a free slot (``granted``) or gets in line."""
        with self._lock:
            if self._free and not self._waiting:
                self._grant(waiter.key)  # first: a key that cannot be counted (unhashable) leaves the slot free
                self._free -= 1
                waiter.granted = True
            else:
                self._waiting.setdefault(waiter.key, collections.deque()).append(waiter)
            waiter.entered = True

    def _leave(self, waiter: _Waiter) -> None:
        """``waiter`` gives back its slot, or its place in line; once only, however often called."""
        with signals_deferred():
            with self._lock:
                if waiter.left:
                    return
                waiter.left = True
                if not waiter.entered:
                    return
                if not waiter.granted:
                    self._out_of_line(waiter)
                    return
            self._release(waiter.key)

    def _grant(self, key: Hashable) -> None:
        self._held[key] += 1
        self._grants += 1
        self._served[key] = self._grants

    def _prune(self) -> None:
        """Forget when idle keys were served once that no longer orders anyone: older than every holding or waiting
        key's. A key that sends one call at a time is idle between them; forgotten sooner, it came back as one
        never served, ahead of keys that keep calls waiting (it took 45 % of one slot beside two such keys)."""
        busy = [self._served.get(key, 0) for key in (*self._held, *self._waiting)]
        oldest = min(busy, default=self._grants + 1)
        idle = sorted(((when, key) for key, when in self._served.items()
                       if key not in self._held and key not in self._waiting), key=lambda pair: pair[0])
        # and when a key holds a slot for long while many others come and go, the idle ones served longest ago
        spare = max(0, len(self._served) - (2 * len(busy) + 32))
        for count, (when, key) in enumerate(idle):
            if when >= oldest and count >= spare:
                break
            del self._served[key]

    def _release(self, key: Hashable) -> None:
        """``key`` gives a slot back: to the next waiter, or free. A waiter that cannot take it (its ``wake`` says
        False: its executor was shut down) passes it on, in this loop: handed on by recursion, 2,000 waiters of a
        closed sandbox passed the interpreter's depth, and every one of them hung. Ctrl-C waits until the slot is
        counted and handed (in the main thread: an interrupt half-way lost slots and left waiters unwoken)."""
        refused: List[_Waiter] = []
        with signals_deferred():
            while True:
                with self._lock:
                    self._held[key] -= 1
                    if not self._held[key]:
                        del self._held[key]
                    if len(self._served) > 2 * (len(self._held) + len(self._waiting)) + 64:
                        self._prune()  # bounded by the keys in use, whatever number of keys ever came
                    if not self._waiting:
                        self._free += 1
                        break
                    # the waiting key holding the fewest slots; among equals, the one served longest ago (or never)
                    chosen = min(self._waiting,
                                 key=lambda waiting: (self._held.get(waiting, 0), self._served.get(waiting, 0)))
                    line = self._waiting[chosen]
                    waiter = line.popleft()
                    if not line:
                        del self._waiting[chosen]
                    waiter.granted = True
                    self._grant(chosen)
                if waiter.wake() is not False:
                    break
                refused.append(waiter)
                key = chosen
        for waiter in refused:  # told once their slots are back
            if waiter.refused is not None:
                waiter.refused()

    def _withdraw(self, waiter: _Waiter) -> bool:
        """Out of its line, unless the slot reached it already (False: its holder gives the slot back)."""
        with signals_deferred(), self._lock:
            if waiter.granted:
                return False
            self._out_of_line(waiter)
            return True

    def _out_of_line(self, waiter: _Waiter) -> None:  # with the lock held
        line = self._waiting[waiter.key]
        line.remove(waiter)
        if not line:
            del self._waiting[waiter.key]

    @contextlib.contextmanager
    def turn(self, key: Hashable = _CURRENT, timeout: Optional[float] = None) -> Iterator[None]:
        """Hold a slot for the block, waiting in this thread for it (at most ``timeout`` seconds, then
        :class:`TimeoutError`); ``key`` defaults to :data:`turn_key`'s."""
        if getattr(self._handed, "count", 0):  # this thread runs a submit()'s function, which holds its slot
            yield
            return
        key = turn_key.get() if key is _CURRENT else key
        hash(key)  # a key that cannot be a key fails here, before anything is taken
        # released once the slot is this waiter's: a lock's wait either takes it or not, where an interrupt in
        # threading.Event's wait broke its condition ("release unlocked lock") under a Ctrl-C storm
        granted = threading.Lock()
        granted.acquire()
        waiter = _Waiter(key, granted.release)
        in_main = threading.current_thread() is threading.main_thread()
        # In the main thread, Ctrl-C's handler runs at any call: the dispatcher stands in for the turn, so the slot
        # is given back, below, under signals held from the finally's first instruction (a plain store), not from a
        # call, which was itself such a place (a Ctrl-C storm lost slots there).
        with handlers_ready() as region:
            try:  # Ctrl-C at any point: the slot or the place in line is given back (an interrupt as __enter__
                # returns leaves this generator to be closed when it is dropped, which gives it back then)
                with signals_deferred():
                    self._enter(waiter)
                no_limit = timeout is None or timeout == float("inf")
                if not waiter.granted and not granted.acquire(timeout=-1 if no_limit else max(0.0, timeout)):
                    raise TimeoutError(f"no slot of {self.slots} became free within {timeout:g} s")  # (a slot
                    # that reached it meanwhile is passed on below)
                yield
            finally:
                if in_main:  # held until the region's end: its exit's entry is a place a handler runs, too
                    HELD.depth += 1
                    region.holds += 1
                self._leave(waiter)

    def submit(self, executor: concurrent.futures.Executor, fn: Callable[..., T], *args: Any,
               key: Hashable = _CURRENT) -> "concurrent.futures.Future[T]":
        """``fn(*args)`` on ``executor`` once ``key`` (default: :data:`turn_key`'s, read here) has a slot; the
        thread gives the slot back when ``fn`` returns (:meth:`run_in_thread` awaits it from a coroutine). A cancel before
        ``fn`` starts leaves nothing held or run, one after lets ``fn`` finish holding its slot, so no more than
        ``slots`` run at once. An executor that was shut down fails the future with its ``RuntimeError``, once the
        slot is back. ``fn`` must not wait for another ``submit`` to this Turns (with every slot held by such
        calls, none could start); ``turn()`` in it takes no second slot."""
        key = turn_key.get() if key is _CURRENT else key
        hash(key)  # a key that cannot be a key fails here, before anything is taken
        done: "concurrent.futures.Future[T]" = concurrent.futures.Future()
        started = []  # run() began: from then on it gives the slot back
        errors: List[BaseException] = []  # why start() could not hand the call to the executor

        def fail(error: BaseException) -> None:
            if done.set_running_or_notify_cancel():
                done.set_exception(error)

        def run() -> None:  # on the executor's thread, holding the slot
            started.append(True)
            if not done.set_running_or_notify_cancel():
                self._release(key)  # cancelled while it waited for a thread
                return
            self._handed.count = getattr(self._handed, "count", 0) + 1
            try:
                result = fn(*args)
            except BaseException as exc:
                self._handed.count -= 1
                self._release(key)  # back before the caller hears: its next call finds the slot free
                done.set_exception(exc)
            else:
                self._handed.count -= 1
                self._release(key)
                done.set_result(result)

        def start() -> bool:  # once the slot is held: by the caller here, or by whoever freed it
            # Not into a ThreadPoolExecutor shut down or broken: it fails its queued calls from inside its own lock
            # (shutdown(cancel_futures=True), an initializer that raised), which gives their slots back here, and a
            # submit there waited on that lock for ever.
            closed = getattr(executor, "_shutdown", False) or getattr(executor, "_broken", False)
            if closed:
                errors.append(RuntimeError(closed if isinstance(closed, str) else
                                           "cannot schedule new futures after shutdown"))
                return False  # the slot goes on, from the _release loop, and then the caller hears
            try:
                queued = executor.submit(run)
            except Exception as exc:
                errors.append(exc)
                return False
            queued.add_done_callback(dropped)
            return True

        def dropped(queued: "concurrent.futures.Future[None]") -> None:
            """Finished without run() (shutdown(cancel_futures=True), a broken executor): the slot comes back."""
            if started:
                return
            self._release(key)
            if queued.cancelled():
                done.cancel()
            else:
                fail(queued.exception() or RuntimeError("the executor finished the call without running it"))

        with signals_deferred():  # taken and started, or in line: never half-way
            waiter = self._join(key, start, lambda: fail(errors[-1]))
            if waiter is None and not start():
                self._release(key)
                fail(errors[-1])
        if waiter is not None:
            done.add_done_callback(lambda future: future.cancelled() and self._withdraw(waiter))
        return done

    async def run_in_thread(self, executor: concurrent.futures.Executor, fn: Callable[..., T], *args: Any,
                            start_by: Optional[float] = None) -> T:
        """``await`` ``fn(*args)`` run by :meth:`submit` on ``executor``, in the caller's turn and a copy of its
        context (whose work it is, for the turns of the pools ``fn`` reaches). With ``start_by`` (a
        ``time.monotonic()`` time), a call still waiting for its turn or a thread then raises :class:`NotStarted`
        and never runs (its place is given back); one a thread took by then is awaited to its end."""
        import asyncio
        import time

        call = self.submit(executor, functools.partial(contextvars.copy_context().run, fn, *args))
        answer = asyncio.wrap_future(call)
        if start_by is None:
            return await answer
        try:
            return await asyncio.wait_for(asyncio.shield(answer), max(0.0, start_by - time.monotonic()))
        except asyncio.TimeoutError:
            if call.cancel():  # still in line: it will not run
                raise NotStarted("the call was still waiting for its turn or a thread at its start-by time") from None
            return await answer  # a thread took it at the last moment
        except asyncio.CancelledError:
            call.cancel()  # the caller gave up: a call still in line never runs
            raise


class NotStarted(TimeoutError):
    """A :meth:`Turns.run_in_thread` call that had not started by its ``start_by`` time: it never runs."""


_every_turns: "weakref.WeakSet[Turns]" = weakref.WeakSet()


def _forget_after_fork() -> None:
    for turns in list(_every_turns):
        turns._forget()


os.register_at_fork(after_in_child=_forget_after_fork)
