"""Holding Ctrl-C and SIGTERM while state must not be left half-way (a container created but not recorded, a slot
of a pool taken but not counted).

While the main thread needs them held, SIGINT's and SIGTERM's Python handlers are :func:`_dispatch`, which writes
down what came while :data:`HELD` ``.depth`` is above 0 and otherwise passes the signal to the handler it stands
in for (or does the default action), so a dispatcher left in place is not noticed. Masking the main thread's
signals, as this did first, did not hold them: the kernel may hand a signal to any thread, and its handler still
runs in the main thread at its next Python call. Nor did swapping in a handler that only wrote signals down: a
Ctrl-C storm that cut the swap back half-way left SIGTERM written down for good.

``HELD.depth`` is raised with a plain attribute store, which gives Python no place to run a handler: code that must
not be interrupted from its first instruction (a ``finally`` giving back a slot) raises it inline, inside
:func:`handlers_ready`, before any call, and the region's end lowers it. Measured with a SIGINT every ~20 us from
another process (``tests/sandboxes/test_interrupts.py``'s storm): the write-down swap lost a pool's slot in 2
15-second storms of 5; this, in none of 5 such storms and 20 of 4 s. Left: an interrupt as ``__enter__`` of a
``with turns.turn()`` returns leaves its generator to give the slot back when it is collected, and a handler
installed inside a held region is the user's to keep.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import TracebackType
from typing import Any, Dict, List, Optional, Type

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class HELD:  # noqa: N801 (a namespace of state, read and written inline)
    depth = 0  # > 0: the main thread holds signals; _dispatch writes them down
    arrived: List[int] = []  # what came while held, raised again once nothing holds them
    standing_in_for: Dict[int, Any] = {}  # the handlers _dispatch passes signals to, by signal
    ready = 0  # how many handlers_ready regions are open (the dispatcher goes once none is)


def _dispatch(signum: int, frame: Any) -> None:
    if HELD.depth:
        HELD.arrived.append(signum)
        return
    handler = HELD.standing_in_for.get(signum, signal.SIG_DFL)
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:  # as if no handler were there: the kernel's action (SIGTERM ends the process)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


def _left_alone(handler: Any) -> bool:
    """A handler not set from Python (None), an ignored signal, and asyncio's ``add_signal_handler`` (its Python
    handler does nothing: the loop reads the signal from its wake-up pipe, and a signal raised again would reach the
    loop twice, which uvicorn reads as "exit now")."""
    asyncio_noop = getattr(sys.modules.get("asyncio.unix_events"), "_sighandler_noop", None)
    return handler is None or handler == signal.SIG_IGN or (asyncio_noop is not None and handler is asyncio_noop)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class handlers_ready:  # noqa: N801 (used as a function: ``with handlers_ready():``)
    """A region of the main thread in which the dispatcher stands in for SIGINT's and SIGTERM's handlers (each
    signal passed on at once while nothing holds them), so code in it can hold them with ``HELD.depth += 1`` alone.
    At its end, signals written down are raised again, in their own handlers, once nothing holds them. Elsewhere
    than the main thread a no-op: Python runs signal handlers in the main thread alone, so they interrupt no
    other."""

    __slots__ = ("_raised", "_main", "holds")
    _hold = False  # signals_deferred: the region holds signals from its start

    def __enter__(self) -> "handlers_ready":
        self.holds = 0
        self._main = _in_main_thread()
        if not self._main:
            return self
        # what handlers raised for signals pending before the dispatcher was in (signal.signal runs them, then
        # swaps; raised from it, it swapped nothing): raised once the region ends
        self._raised: List[BaseException] = []
        HELD.ready += 1
        try:
            for signum in _SIGNALS:
                while True:
                    try:
                        current = signal.getsignal(signum)
                        if current is not _dispatch and not _left_alone(current):
                            # first: the swap's call returns to a check for signals, which _dispatch then handles
                            HELD.standing_in_for[signum] = current
                            signal.signal(signum, _dispatch)
                        break
                    except BaseException as exc:
                        self._raised.append(exc)
        except BaseException:  # not entered: it holds nothing (a dispatcher already in stays, passing signals on)
            HELD.ready -= 1
            raise
        if self._hold:
            HELD.depth += 1
            self.holds = 1
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if not self._main:
            return
        # to the first call, plain stores: no place for a handler to run before the counts are right (the entry
        # of this method is such a place, held by the region's own holds where it has any)
        HELD.depth -= self.holds
        self.holds = 0
        HELD.ready -= 1
        arrived: List[int] = []
        if not HELD.depth:
            arrived, HELD.arrived = HELD.arrived, []
        raised = self._raised
        if not HELD.ready:  # the handlers back (one a Ctrl-C storm keeps from going back passes signals on)
            for signum in list(HELD.standing_in_for):
                try:
                    if signal.getsignal(signum) is _dispatch:
                        signal.signal(signum, HELD.standing_in_for[signum])
                    del HELD.standing_in_for[signum]
                except BaseException as exc:
                    raised.append(exc)
        for signum in dict.fromkeys(arrived):  # once each, as the kernel has it: a signal that came twice is one
            try:
                signal.raise_signal(signum)  # its handler runs here
            except BaseException as exc:
                raised.append(exc)
        if raised:
            raise raised[0]


class signals_deferred(handlers_ready):  # noqa: N801 (used as a function: ``with signals_deferred():``)
    """Hold Ctrl-C and SIGTERM until the block ends: their handlers (``KeyboardInterrupt``, or what was installed;
    the default action where none was) run once it is done. In the main thread only; elsewhere a no-op."""

    __slots__ = ()
    _hold = True


_forking_thread_is_main = [False]


def _before_fork() -> None:
    _forking_thread_is_main[0] = _in_main_thread()


def _after_fork_in_child() -> None:
    """A child forked by another thread while the main one held signals gets its handlers back and holds nothing:
    its main thread is the forking one, not in the block (a child of ``multiprocessing`` ended by ``terminate()``
    ignored SIGTERM otherwise). A child forked by the main thread goes on in its block, which ends as it would."""
    if _forking_thread_is_main[0]:
        return
    for signum, handler in HELD.standing_in_for.items():
        if signal.getsignal(signum) is _dispatch:
            signal.signal(signum, handler)
    HELD.depth, HELD.arrived, HELD.standing_in_for, HELD.ready = 0, [], {}, 0


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
