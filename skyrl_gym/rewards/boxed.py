"""Extraction of ``\\boxed{...}`` answers, with nested braces and unfinished boxes handled."""

from __future__ import annotations

from typing import Optional

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def _matching_brace(text: str, open_index: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_index``, or -1 if it never closes."""
    depth = 0
    for index in range(open_index, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
    return -1


def last_boxed_only_string(text: str) -> Optional[str]:
    """The last complete ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed N``) in ``text``, box included.

    A box left unfinished at the end of the text (a common failure of sampling with a length cap)
    is skipped in favour of the last complete one before it.
    """
    search_end = len(text)
    while True:
        start = max(text.rfind(command, 0, search_end) for command in _BOX_COMMANDS)
        if start < 0:
            return None
        command = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
        after = start + len(command)
        if text.startswith("{", after):
            close = _matching_brace(text, after)
            if close >= 0:
                return text[start : close + 1]
        elif text.startswith(" ", after):  # "\boxed 5": the answer runs to the next "$" or space
            rest = text[after + 1 :]
            token = rest.split("$")[0].split()[0] if rest.split() else ""
            if token:
                return f"{command} {token}"
        search_end = start  # unfinished box: look further back


def remove_boxed(boxed: str) -> str:
    """``"\\boxed{x}" -> "x"``; raises ``ValueError`` if ``boxed`` is not a box."""
    for command in _BOX_COMMANDS:
        if boxed.startswith(command + " "):
            return boxed[len(command) + 1 :]
        if boxed.startswith(command + "{") and boxed.endswith("}"):
            return boxed[len(command) + 1 : -1]
    raise ValueError(f"not a boxed expression: {boxed[:60]!r}")


def last_boxed_content(text: str) -> Optional[str]:
    """The content of the last complete box, stripped; ``None`` if there is none or it is empty."""
    boxed = last_boxed_only_string(text)
    if boxed is None:
        return None
    content = remove_boxed(boxed).strip()
    return content or None
