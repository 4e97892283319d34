"""Run a loader once per process, safely from many threads (the registries read their plugins with it)."""

from __future__ import annotations

import threading
from typing import Callable, Optional


class LoadOnce:
    """Calling it runs ``load`` the first time only. Threads that call while another thread is loading wait
    until the load has finished, so none sees a half-filled registry; a call from inside ``load`` itself (a
    plugin module that reads the registry while it is imported) returns at once and sees what is loaded so
    far. ``done`` turns true when ``load`` has returned or raised (it is not retried: a loader records its own
    per-plugin errors)."""

    def __init__(self, load: Callable[[], None]) -> None:
        self._load = load
        self._lock = threading.RLock()
        self._loading_thread: Optional[int] = None
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        with self._lock:
            if self.done or self._loading_thread == threading.get_ident():
                return
            self._loading_thread = threading.get_ident()
            try:
                self._load()
            finally:
                self._loading_thread = None
                self.done = True
