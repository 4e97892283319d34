"""A started ``docker exec``'s attached stream, read without losing its first bytes.

docker-py's ``exec_start`` reads the HTTP response's headers through a buffered reader and then
reads the stream from the raw socket underneath. Output that reached the client together with the
headers (a command that finished quickly, a client thread that ran late on a loaded machine) sits
in that buffer and is never returned: ``exec_start`` then gives empty or cut output. On a busy
2-core machine about one exec in a hundred lost its output this way, so a SWE instance whose
``git apply`` said nothing read as "does not apply". :class:`ExecStream` takes the bytes the
reader already holds before it reads the socket.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
from typing import Any, Optional

FRAME = struct.Struct(">BxxxI")  # docker's multiplexed stream header: stream id, 3 pad bytes, size
STDOUT, STDERR = 1, 2


class ExecStream:
    """The connection of a started, attached, non-tty exec: ``send`` writes to its stdin; ``pump``
    reads what arrived and splits docker's frames into ``stdout`` and ``stderr``."""

    def __init__(self, client: Any, exec_id: str) -> None:
        api = client.api
        response = api._post_json(  # the request docker-py's exec_start makes, kept to reach its reader
            api._url("/exec/{0}/start", exec_id),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            data={"Tty": False, "Detach": False},
            stream=True,
        )
        self._response = response  # keeps the connection open (and, for TLS, its socket alive)
        try:
            wrapped = api._get_raw_response_socket(response)  # raises for an error status
        except BaseException:
            response.close()
            raise
        self.sock: socket.socket = getattr(wrapped, "_sock", wrapped)
        self._pending = _buffered_bytes(response, self.sock)
        self._raw = bytearray()  # bytes read but not yet split into whole frames
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.ended = False
        self.overflowed = False  # read_to_end stopped at its max_bytes

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def pump(self, timeout_s: Optional[float] = None) -> bool:
        """Wait up to ``timeout_s`` (None: no limit) for bytes and take them in. False once the stream
        has ended (the command exited and the engine closed the connection)."""
        if self.ended:
            return False
        if self._pending:
            chunk, self._pending = self._pending, b""
        else:
            readable, _, _ = select.select([self.sock], [], [], timeout_s)
            if not readable:
                return True
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                self.ended = True
                return False
        self._raw.extend(chunk)
        while len(self._raw) >= FRAME.size:
            stream, size = FRAME.unpack_from(self._raw)
            if len(self._raw) < FRAME.size + size:
                break
            (self.stderr if stream == STDERR else self.stdout).extend(self._raw[FRAME.size : FRAME.size + size])
            del self._raw[: FRAME.size + size]
        return True

    def read_to_end(self, max_bytes: Optional[int] = None) -> bytes:
        """Everything the command writes until it exits: stdout, then stderr. Past ``max_bytes`` taken in it
        stops reading and sets ``overflowed``: the command is still running, and its caller stops it. A cap
        inside the container (``head -c``) does not bound this: a process there may write to the exec's stream
        itself (``/proc/<pid>/fd/1`` of the exec's shell), 300 MB in under 3 s."""
        while self.pump():
            if max_bytes is not None and len(self.stdout) + len(self.stderr) + len(self._raw) > max_bytes:
                self.overflowed = True
                break
        return bytes(self.stdout + self.stderr)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        self._response.close()


def _buffered_bytes(response: Any, sock: socket.socket) -> bytes:
    """The bytes past the headers that the HTTP reader took off ``sock`` while parsing them."""
    reader = getattr(getattr(getattr(response.raw, "_fp", None), "fp", None), "read1", None)
    if reader is None:  # not the urllib3 -> http.client layout docker-py itself relies on
        return b""
    timeout = sock.gettimeout()
    sock.setblocking(False)  # read1 hands over its buffer, or one non-blocking read: never waits
    try:
        return reader(1 << 20) or b""
    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):  # nothing buffered, nothing arrived
        return b""
    finally:
        sock.settimeout(timeout)
