"""aiohttp sessions for engines that talk HTTP, one per event loop.

An aiohttp session belongs to the loop it was created on, and trainers and tests drive one engine from several
loops. :class:`LoopSessions` owns them: :meth:`get` returns the running loop's session (made on first use),
:meth:`aclose` closes the running loop's session, :meth:`forget` drops them all without awaiting (for a
synchronous ``close``). Sessions are keyed by the loop object itself in a weak mapping, so a loop that is
garbage-collected takes its entry with it and a new loop can never be handed a dead loop's session.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Optional


class LoopSessions:
    """The aiohttp session of each event loop that uses an engine."""

    def __init__(self, api_key: Optional[str], timeout_s: float, max_concurrency: int) -> None:
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._sessions: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]" = weakref.WeakKeyDictionary()

    def get(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=self.max_concurrency),
            )
            self._sessions[loop] = session
        return session

    async def aclose(self) -> None:
        """Close the running loop's session; sessions of loops that are closed are dropped."""
        loop = asyncio.get_running_loop()
        session = self._sessions.pop(loop, None)
        for other in [other for other in list(self._sessions.keys()) if other.is_closed()]:
            self._sessions.pop(other, None)
        if session is not None and not session.closed:
            await session.close()

    def forget(self) -> None:
        """Drop every session without awaiting (for a synchronous close)."""
        self._sessions = weakref.WeakKeyDictionary()
