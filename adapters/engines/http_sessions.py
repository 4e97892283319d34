"""aiohttp sessions for engines that talk HTTP: one per event loop, because a session cannot cross loops
(trainers and tests drive the same engine from several loops)."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Optional


class LoopSessions:
    """Hands out the aiohttp session of the running loop, creating it on first use."""

    def __init__(self, api_key: Optional[str], timeout_s: float, max_concurrency: int) -> None:
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._sessions: Dict[int, Any] = {}

    def get(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(id(loop))
        if session is None or session.closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=self.max_concurrency),
            )
            self._sessions[id(loop)] = session
        return session

    async def aclose(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for session in sessions.values():
            if not session.closed:
                await session.close()

    def forget(self) -> None:
        """Drop the sessions without awaiting (for a synchronous close)."""
        self._sessions = {}
