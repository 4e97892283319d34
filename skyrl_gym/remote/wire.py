"""JSON on the wire, both ways: what envs put in observations and metadata (numpy scalars, sets, bytes) becomes
JSON instead of an error, and non-finite floats travel as they are (``NaN``), so a remote env's output is the local
env's and the client's checks see what the env did."""

from __future__ import annotations

import json
from typing import Any


def _jsonable(value: Any) -> Any:
    """``json.dumps``'s fallback for what envs put in metadata: numpy scalars and arrays, sets, bytes, objects."""
    for method in ("item", "tolist"):  # numpy scalars / arrays
        convert = getattr(value, method, None)
        if callable(convert):
            try:
                return convert()
            except Exception:
                pass
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)


def encode(payload: Any) -> bytes:
    # allow_nan: a NaN reward reaches the client as it is, so the client's checker reports it. A lone surrogate
    # (JSON's "\ud800", which a client may send and an env echo) has no UTF-8: it travels as that escape, not as
    # a 500 (backslashreplace writes it as JSON writes it)
    return json.dumps(payload, default=_jsonable, ensure_ascii=False).encode("utf-8", "backslashreplace")


__all__ = ["encode"]
