"""Which URL a credential may go to: the origin (scheme, host, port) the operator configured, and nothing that HTTP
clients could read as another host. Every token and key of the project is bound this way (the sandbox service's,
serve-env's, the retriever's, the LLM judge's)."""

from __future__ import annotations

import os
import re
import sys
import urllib.parse
from typing import Optional, Tuple

# Characters that HTTP clients read differently: `requests` (urllib3) ends the host at a backslash, as browsers
# do, where urllib.parse reads on to an `@` (user info) and takes the host after it; whitespace and control
# characters are dropped by some parsers and kept by others.
_AMBIGUOUS_IN_URL = re.compile(r"[\\\s\x00-\x1f\x7f]")


def origin(url: str) -> Optional[Tuple[str, str, Optional[int]]]:
    """``(scheme, host, port)`` of ``url``, the default port filled in: what a credential is bound to. None for a
    URL that clients may send to another host than the one read here (a backslash, whitespace or a control
    character; user info before the host) or whose port is not a number: such a URL is no one's origin."""
    if _AMBIGUOUS_IN_URL.search(url):
        return None
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        return None
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def same_origin(url: str, other: str) -> bool:
    """Whether ``url`` is ``other``'s origin (scheme, host, port), neither one a URL clients may read as
    another host: the test before a credential bound to ``other`` goes to ``url``."""
    ours = origin(url)
    return ours is not None and ours == origin(other)


def bound_token(
    url: str, token_env: str, url_env: str, default_url: Optional[str] = None
) -> Tuple[Optional[str], str]:
    """``($token_env, "")`` when ``url`` is the service the operator configured (``$url_env``, else
    ``default_url``; same scheme, host and port), else ``(None, hint)``: the hint, for a 401's message, says
    why no token went. A URL from a config, a row or a client never collects the environment's token."""
    token = os.environ.get(token_env)
    if not token:
        return None, ""
    bound_to = os.environ.get(url_env) or default_url or ""
    if bound_to and same_origin(url, bound_to):
        return token, ""
    return None, (
        f" (${token_env} is sent only to ${url_env}, {bound_to or 'unset'}, not to {url!r}: "
        f"pass token= for this service, or set {url_env})"
    )


def server_token(given: Optional[str], env_name: str) -> Optional[str]:
    """The token a server requires: ``--token``, else ``$env_name``, else None. One given on the command line can be
    read by every user of the machine (``ps``, ``/proc/<pid>/cmdline``): a warning on stderr says so."""
    if given:
        print(f"warning: --token is visible to every user of this machine in the process list (ps, "
              f"/proc/<pid>/cmdline); set {env_name} instead", file=sys.stderr)
        return given
    return os.environ.get(env_name) or None
