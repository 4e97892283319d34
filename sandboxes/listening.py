"""Whether a server command can listen where it was asked to, told before it starts (or builds an index): the
three servers' commands (``skygym-sandboxes serve``, ``skyrl-gym serve-env``, ``skyrl-gym serve-retriever``) say
a port in use or out of range in one line, as any bad argument, not with a bind traceback."""

from __future__ import annotations

import argparse
import errno
import socket

_NOT_HERE = {errno.EADDRINUSE: "is in use (another server there? pick another --port, or --port 0 for a free one)",
             errno.EADDRNOTAVAIL: "is not an address of this machine",
             errno.EACCES: "needs privileges (ports below 1024 do; pick another --port)"}


def port_number(value: str) -> int:
    """argparse's ``type`` for ``--port``: a whole number from 0 (a free port) to 65535."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 (a free one) to 65535, got {port}")
    return port


def check_can_listen(host: str, port: int) -> None:
    """``ValueError`` naming ``host:port`` when a server could not listen there now (port 0 always can)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(f"--host {host}: not an address this machine can listen on ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is no conflict
        try:
            probe.bind(address)
            probe.listen(1)
        except OSError as exc:
            why = _NOT_HERE.get(exc.errno, exc.strerror or str(exc))
            raise ValueError(f"cannot listen on {host}:{port}: the address {why}") from None
