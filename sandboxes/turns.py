"""Taking turns: a few slots (threads, helper processes, sandbox workers) shared by many callers, handed out so that
no one caller's queue holds up another's.

The pools that run env work served their waiters in arrival order, or in no order at all: a serve-env client that
queued a hundred slow steps or math checks made another client's single call wait behind every one of them. A
:class:`Turns` keeps its waiters in a line per *key* (whose work it is: :data:`turn_key`, which serve-env sets to
the client a request came from, None elsewhere) and gives a freed slot to the waiting key that holds the fewest
slots, the least recently served first among equals. A key's own waiters keep their order. So a key with one call
waiting gets the next slot that frees while another key holds them all, however many calls that one has queued;
with one key (a trainer, a script) it is a first-come, first-served queue.

``turn()`` waits in a thread, ``aturn()`` on an event loop; both give the slot back when their block ends, and a
wait given up (a time limit, Ctrl-C, a cancelled task) leaves nothing held. A coroutine that took its turn on the
loop and hands the work to a thread marks that thread with ``held_by_caller()``: the pool's own ``turn()`` there
then takes no second slot.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import threading
from typing import AsyncIterator, Callable, Deque, Dict, Hashable, Iterator, Optional

turn_key: contextvars.ContextVar[Optional[Hashable]] = contextvars.ContextVar("skygym_turn_key", default=None)
"""Whose work the current code does, for the pools' turns: set it where a request's owner is known (serve-env sets
its client's name); threads started with a copy of the context (``asyncio.to_thread``, ``contextvars``) see it."""

_CURRENT = object()


class _Waiter:
    __slots__ = ("key", "wake", "granted")

    def __init__(self, key: Hashable, wake: Callable[[], None]) -> None:
        self.key, self.wake, self.granted = key, wake, False


class Turns:
    """``slots`` holders at a time; waiters are served by key, the key holding the fewest slots first."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"Turns needs at least one slot, got {slots}")
        self.slots = slots
        self._lock = threading.Lock()
        self._free = slots
        self._held: Dict[Hashable, int] = collections.Counter()
        self._waiting: Dict[Hashable, Deque[_Waiter]] = {}  # each waiting key's waiters, in arrival order
        self._served: Dict[Hashable, int] = {}  # when each key last got a slot (a count); pruned in _release
        self._grants = 0
        self._handed = threading.local()  # how many turns a caller holds for the current thread

    def waiting(self) -> int:
        """How many calls wait for a slot now."""
        with self._lock:
            return sum(len(line) for line in self._waiting.values())

    def _join(self, key: Hashable, wake: Callable[[], None]) -> Optional[_Waiter]:
        """Take a free slot (None) or get in line (the waiter, woken once it holds a slot)."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                self._grant(key)
                return None
            waiter = _Waiter(key, wake)
            self._waiting.setdefault(key, collections.deque()).append(waiter)
            return waiter

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
        with self._lock:
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]
            if len(self._served) > 2 * (len(self._held) + len(self._waiting)) + 64:
                self._prune()  # bounded by the keys in use, whatever number of keys ever came
            if not self._waiting:
                self._free += 1
                return
            # the waiting key holding the fewest slots; among equals, the one served longest ago (or never)
            chosen = min(self._waiting, key=lambda waiting: (self._held.get(waiting, 0), self._served.get(waiting, 0)))
            line = self._waiting[chosen]
            waiter = line.popleft()
            if not line:
                del self._waiting[chosen]
            waiter.granted = True
            self._grant(chosen)
        waiter.wake()

    def _give_up(self, waiter: _Waiter) -> None:
        """A waiter stops waiting: out of its line, or, when the slot reached it meanwhile, the slot is passed on."""
        with self._lock:
            if not waiter.granted:
                line = self._waiting[waiter.key]
                line.remove(waiter)
                if not line:
                    del self._waiting[waiter.key]
                return
        self._release(waiter.key)

    @contextlib.contextmanager
    def turn(self, key: Hashable = _CURRENT, timeout: Optional[float] = None) -> Iterator[None]:
        """Hold a slot for the block, waiting in this thread for it (at most ``timeout`` seconds, then
        :class:`TimeoutError`); ``key`` defaults to :data:`turn_key`'s."""
        if getattr(self._handed, "count", 0):  # the caller took this thread's turn on its loop (held_by_caller)
            yield
            return
        key = turn_key.get() if key is _CURRENT else key
        granted = threading.Event()
        waiter = self._join(key, granted.set)
        if waiter is not None:
            try:
                reached = granted.wait(timeout)
            except BaseException:
                self._give_up(waiter)
                raise
            if not reached:
                self._give_up(waiter)
                raise TimeoutError(f"no slot of {self.slots} became free within {timeout:g} s")
        try:
            yield
        finally:
            self._release(key)

    @contextlib.contextmanager
    def held_by_caller(self) -> Iterator[None]:
        """For a thread doing the work of a coroutine that holds a turn (:meth:`aturn`): ``turn()`` in this thread
        takes no slot of its own meanwhile."""
        self._handed.count = getattr(self._handed, "count", 0) + 1
        try:
            yield
        finally:
            self._handed.count -= 1

    @contextlib.asynccontextmanager
    async def aturn(self, key: Hashable = _CURRENT, timeout: Optional[float] = None) -> AsyncIterator[None]:
        """:meth:`turn` for a coroutine: it waits on the event loop, taking no thread."""
        key = turn_key.get() if key is _CURRENT else key
        loop = asyncio.get_running_loop()
        granted: "asyncio.Future[None]" = loop.create_future()

        def wake() -> None:  # called by whoever frees the slot, from any thread
            try:
                loop.call_soon_threadsafe(_resolve, granted)
            except RuntimeError:  # the loop is closed: nobody will take this slot
                self._release(key)

        waiter = self._join(key, wake)
        if waiter is not None:
            try:
                await asyncio.wait_for(granted, timeout)
            except BaseException as exc:
                self._give_up(waiter)
                if isinstance(exc, asyncio.TimeoutError):  # asyncio's own class before Python 3.11
                    raise TimeoutError(f"no slot of {self.slots} became free within {timeout:g} s") from None
                raise
        try:
            yield
        finally:
            self._release(key)


def _resolve(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)
