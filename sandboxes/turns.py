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
wait given up (a time limit, Ctrl-C, a cancelled task) leaves nothing held.
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
        self._served: Dict[Hashable, int] = {}  # when each key holding or waiting last got a slot (a count)
        self._grants = 0

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

    def _forget_if_idle(self, key: Hashable) -> None:
        if not self._held.get(key) and key not in self._waiting:
            self._held.pop(key, None)
            self._served.pop(key, None)  # back later, it is as one never served: it holds nothing

    def _release(self, key: Hashable) -> None:
        with self._lock:
            self._held[key] -= 1
            self._forget_if_idle(key)
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
                    self._forget_if_idle(waiter.key)
                return
        self._release(waiter.key)

    @contextlib.contextmanager
    def turn(self, key: Hashable = _CURRENT, timeout: Optional[float] = None) -> Iterator[None]:
        """Hold a slot for the block, waiting in this thread for it (at most ``timeout`` seconds, then
        :class:`TimeoutError`); ``key`` defaults to :data:`turn_key`'s."""
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

    @contextlib.asynccontextmanager
    async def aturn(self, key: Hashable = _CURRENT) -> AsyncIterator[None]:
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
                await granted
            except BaseException:
                self._give_up(waiter)
                raise
        try:
            yield
        finally:
            self._release(key)


def _resolve(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)
