"""Holding Ctrl-C and SIGTERM while state must not be left half-way (a container created but not recorded, a slot
of a pool taken but not counted)."""

from __future__ import annotations

import signal
import sys
import threading
from types import TracebackType
from typing import Any, List, Optional, Tuple, Type

_HELD = (signal.SIGINT, signal.SIGTERM)
_MAIN = threading.main_thread()


def _left_alone(handler: Any) -> bool:
    """A handler not set from Python (None), an ignored signal, and asyncio's ``add_signal_handler`` (its Python
    handler does nothing: the loop reads the signal from its wake-up pipe, and a signal raised again would reach the
    loop twice, which uvicorn reads as "exit now")."""
    asyncio_noop = getattr(sys.modules.get("asyncio.unix_events"), "_sighandler_noop", None)
    return handler is None or handler == signal.SIG_IGN or (asyncio_noop is not None and handler is asyncio_noop)


class _Deferred:
    """The state of the outermost :func:`signals_deferred` block of the main thread (blocks inside it hold nothing
    more, and cost nothing)."""

    depth = 0
    arrived: List[int] = []
    previous: List[Tuple[int, Any]] = []

    @classmethod
    def write_down(cls, signum: int, frame: Any) -> None:
        cls.arrived.append(signum)


class signals_deferred:  # noqa: N801 (used as a function: ``with signals_deferred():``)
    """Hold Ctrl-C and SIGTERM until the block ends: their handlers (``KeyboardInterrupt``, or what was installed;
    the default action where none was) run once it is done. In the main thread only; elsewhere a no-op (Python runs
    signal handlers in the main thread alone, so they interrupt no other thread).

    For the block the handlers only write down what came; the ones before are put back at its end and the signals
    raised again. Masking the main thread's signals, as this did before, did not hold them: the kernel may hand a
    signal to any thread, and its handler still runs in the main thread at its next Python call. Under a SIGINT
    every few tens of microseconds, a pool's turns broke in 7 runs of 8 with the mask and in none of 48 with this."""

    __slots__ = ("_raised",)

    def __enter__(self) -> None:
        if threading.current_thread() is not _MAIN:
            return
        if _Deferred.depth:
            _Deferred.depth += 1
            return
        # by the handlers of signals that came before theirs was swapped: signal.signal runs them, then swaps (raised
        # from it, it has swapped nothing)
        self._raised: List[BaseException] = []
        _Deferred.arrived, _Deferred.previous = [], []
        try:
            for signum in _HELD:
                while True:
                    try:
                        handler = signal.signal(signum, _Deferred.write_down)
                        break
                    except BaseException as exc:
                        self._raised.append(exc)
                _Deferred.previous.append((signum, handler))
                if _left_alone(handler):
                    signal.signal(signum, handler)  # as it was (what came meanwhile is written down)
                    _Deferred.previous.pop()
        except BaseException:  # not a signal's: the handlers go back, and nothing is held
            self._put_back()
            raise
        _Deferred.depth = 1

    def __exit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if threading.current_thread() is not _MAIN:
            return
        _Deferred.depth -= 1
        if _Deferred.depth:
            return
        self._put_back()

    def _put_back(self) -> None:
        raised = self._raised
        for signum, handler in _Deferred.previous:
            while True:  # a signal that comes as its handler is put back runs it; the handler is still put back
                try:
                    signal.signal(signum, handler)
                    break
                except BaseException as exc:
                    raised.append(exc)
        _Deferred.previous = []
        arrived, _Deferred.arrived = _Deferred.arrived, []
        for signum in dict.fromkeys(arrived):  # once each, as the kernel has it: a signal that came twice is one
            try:
                signal.raise_signal(signum)  # its handler runs here
            except BaseException as exc:
                raised.append(exc)
        if raised:
            raise raised[0]
