"""The file editor SWE agents use (``str_replace_editor``): view, create, str_replace, insert, undo_edit.

It works on any :class:`Files` (the SWE runtime's container, or a folder in tests), keeps an undo
history per file, and answers every mistake with a message the model can act on, never an exception.

* ``view``: a file with line numbers (``cat -n`` style), optionally ``view_range=[start, end]``
  (1-based, ``end`` -1 for the last line); a folder lists its files two levels deep, hidden ones left out.
* ``create``: a new file with ``file_text`` (an existing file is not overwritten).
* ``str_replace``: replace ``old_str``, which must occur exactly once, with ``new_str`` (default empty).
* ``insert``: put ``new_str`` after line ``insert_line`` (0 inserts at the top).
* ``undo_edit``: go back to the file as it was before its last edit.

Long views, and the lines an edit shows, are cut at ``max_view_chars`` with a note saying how to see the rest.
The undo history keeps at most ``max_history_bytes`` of earlier versions in memory (``sys.getsizeof``: up to 4 bytes
a character), all files together, the oldest dropped first: each edit of a 10 MB file kept another 10 MB, and 100
calls of one line each took a runner to 1 GB.
"""

from __future__ import annotations

import collections
import sys
from typing import Deque, Optional, Protocol, Sequence, Set, Tuple

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
SNIPPET_LINES = 4
LISTED_MATCHES = 10  # the lines named when old_str occurs more than once


class Files(Protocol):
    def read(self, path: str) -> bytes: ...  # FileNotFoundError / IsADirectoryError
    def write(self, path: str, data: bytes) -> None: ...
    def kind(self, path: str) -> str: ...  # "file", "dir" or "missing"
    def listing(self, path: str) -> str: ...


def numbered(text: str, first_line: int = 1) -> str:
    return "\n".join(f"{number:6}\t{line}" for number, line in enumerate(text.split("\n"), first_line))


class Editor:
    def __init__(self, files: Files, root: str = "/testbed", max_view_chars: int = 16_000,
                 max_history_bytes: int = 8_000_000) -> None:
        self.files = files
        self.root = root
        self.max_view_chars = max_view_chars
        self.max_history_bytes = max_history_bytes
        self.history: Deque[Tuple[str, str]] = collections.deque()  # (path, its text before an edit), oldest first
        self.history_bytes = 0
        self.forgotten: Set[str] = set()  # paths whose earlier versions the bound dropped

    def run(
        self,
        command: str,
        path: str,
        file_text: Optional[str] = None,
        old_str: Optional[str] = None,
        new_str: Optional[str] = None,
        insert_line: Optional[int] = None,
        view_range: Optional[Sequence[int]] = None,
    ) -> str:
        try:
            return self._run(command, path, file_text, old_str, new_str, insert_line, view_range)
        except (OSError, ValueError) as exc:  # not a regular file (a link, a pipe), too large, gone meanwhile
            return f"Error: {path} cannot be read or written here ({exc}); use bash for it."

    def _run(
        self,
        command: str,
        path: str,
        file_text: Optional[str],
        old_str: Optional[str],
        new_str: Optional[str],
        insert_line: Optional[int],
        view_range: Optional[Sequence[int]],
    ) -> str:
        if command not in COMMANDS:
            return f"Error: unknown command {command!r}; the commands are {', '.join(COMMANDS)}."
        for name, value in (("file_text", file_text), ("old_str", old_str), ("new_str", new_str)):
            if value is not None and not isinstance(value, str):
                return f"Error: {name} must be a string, got {type(value).__name__}."
        if not isinstance(path, str) or not path.startswith("/"):
            hint = f" Maybe you meant {self.root}/{str(path).lstrip('./')}?" if isinstance(path, str) and path else ""
            return f"Error: the path {path!r} is not absolute; it must start with /.{hint}"
        kind = self.files.kind(path)
        if command == "create":
            if file_text is None:
                return "Error: create needs file_text."
            if kind != "missing":
                return f"Error: {path} already exists; create never overwrites (use str_replace, or view it first)."
            self._write(path, file_text, previous=None)
            return f"File created: {path}"
        if kind == "missing":
            return f"Error: {path} does not exist."
        if command == "view":
            return self._view(path, kind, view_range)
        if kind == "dir":
            return f"Error: {path} is a folder; only view works on folders."
        text = self._read(path)
        if text is None:
            return f"Error: {path} is not a UTF-8 text file."
        if command == "str_replace":
            return self._str_replace(path, text, old_str, new_str or "")
        if command == "insert":
            return self._insert(path, text, insert_line, new_str)
        return self._undo(path)

    # ----- commands -----------------------------------------------------------------------------------
    def _view(self, path: str, kind: str, view_range: Optional[Sequence[int]]) -> str:
        if kind == "dir":
            if view_range:
                return "Error: view_range only applies to files."
            return f"Files and folders in {path}, two levels deep (hidden ones left out):\n{self.files.listing(path)}"
        text = self._read(path)
        if text is None:
            return f"Error: {path} is not a UTF-8 text file."
        lines = text.split("\n")
        first = 1
        if view_range is not None:
            if (
                not isinstance(view_range, (list, tuple))
                or len(view_range) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
            ):
                return "Error: view_range must be two integers [start, end] (end -1 means the last line)."
            start, end = view_range
            end = len(lines) if end == -1 else end
            if not 1 <= start <= len(lines) or end < start or end > len(lines):
                return f"Error: view_range {list(view_range)} is outside the file's lines 1-{len(lines)}."
            first, lines = start, lines[start - 1 : end]
        shown = numbered("\n".join(lines), first)
        if len(shown) > self.max_view_chars:
            cut = shown[: self.max_view_chars].rsplit("\n", 1)[0]
            last = first + cut.count("\n")
            return (
                f"{cut}\n[the view stops at line {last} of {first + len(lines) - 1}: "
                f"view_range=[{last + 1}, -1] shows the rest]"
            )
        return f"Here is {path} (line numbers added):\n{shown}"

    def _str_replace(self, path: str, text: str, old_str: Optional[str], new_str: str) -> str:
        if not old_str:
            return "Error: str_replace needs a non-empty old_str."
        count = text.count(old_str)
        if count == 0:
            return f"Error: old_str does not occur in {path} (it must match exactly, whitespace included)."
        if count > 1:  # the lines of the first few, counted in one pass (a line count per match took hours)
            lines, line, counted, position = [], 1, 0, text.find(old_str)
            while position >= 0 and len(lines) < LISTED_MATCHES:
                line += text.count("\n", counted, position)
                counted = position
                lines.append(line)
                position = text.find(old_str, position + len(old_str))
            listed = ", ".join(map(str, lines)) + (", ..." if count > len(lines) else "")
            return f"Error: old_str occurs {count} times in {path} (lines {listed}); make it unique."
        updated = text.replace(old_str, new_str, 1)
        self._write(path, updated, previous=text)
        changed_line = text[: text.find(old_str)].count("\n") + 1
        return f"The file {path} was edited. {self._snippet(updated, changed_line, new_str.count(chr(10)) + 1)}"

    def _insert(self, path: str, text: str, insert_line: Optional[int], new_str: Optional[str]) -> str:
        if new_str is None:
            return "Error: insert needs new_str."
        lines = text.split("\n")
        if not isinstance(insert_line, int) or isinstance(insert_line, bool) or not 0 <= insert_line <= len(lines):
            return f"Error: insert_line must be an integer from 0 to {len(lines)}, got {insert_line!r}."
        updated = "\n".join(lines[:insert_line] + new_str.split("\n") + lines[insert_line:])
        self._write(path, updated, previous=text)
        return f"The file {path} was edited. {self._snippet(updated, insert_line + 1, new_str.count(chr(10)) + 1)}"

    def _undo(self, path: str) -> str:
        for index in range(len(self.history) - 1, -1, -1):
            if self.history[index][0] == path:
                previous = self.history[index][1]
                del self.history[index]
                self.history_bytes -= sys.getsizeof(previous)
                self.files.write(path, previous.encode("utf-8"))
                return f"The last edit of {path} was undone."
        if path in self.forgotten:
            return (f"Error: the earlier versions of {path} are no longer kept (the editor keeps "
                    f"{self.max_history_bytes} bytes of them, all files together); use git to restore it.")
        return f"Error: there is no edit of {path} to undo."

    # ----- helpers ------------------------------------------------------------------------------------
    def _read(self, path: str) -> Optional[str]:
        try:
            return self.files.read(path).decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _write(self, path: str, text: str, previous: Optional[str]) -> None:
        self.files.write(path, text.encode("utf-8"))
        if previous is None:
            return
        self.history.append((path, previous))
        self.history_bytes += sys.getsizeof(previous)
        while self.history_bytes > self.max_history_bytes:
            dropped_path, dropped = self.history.popleft()
            self.history_bytes -= sys.getsizeof(dropped)
            self.forgotten.add(dropped_path)

    def _snippet(self, text: str, line: int, height: int) -> str:
        lines = text.split("\n")
        start = max(1, line - SNIPPET_LINES)
        end = min(len(lines), line + height - 1 + SNIPPET_LINES)
        shown = numbered(chr(10).join(lines[start - 1 : end]), start)
        if len(shown) > self.max_view_chars:
            shown = (f"{shown[: self.max_view_chars]}\n[cut at {self.max_view_chars} characters: view_range="
                     f"[{start}, {end}] shows these lines]")
        return f"Lines {start}-{end} now read:\n{shown}"
