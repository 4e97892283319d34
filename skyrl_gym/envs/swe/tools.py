"""The SWE tools, as SWE agents know them: ``bash``, ``str_replace_editor`` and ``submit``.

``bash`` runs one command with bash in ``/testbed`` (each call starts there: ``cd`` does not carry
over; chain commands with ``&&``). Its output (stdout and stderr together) is cut after
``output_cap`` bytes with a note ``[output truncated: N more bytes]``; a command that runs past
``timeout_s`` is killed with everything it started, and the observation says so. The ``bash`` calls of one
message (and its editor actions) share ``message_timeout_s`` (default twice ``timeout_s``, never under it): once
it is spent, the message's later calls are not run, and say so. Without it, a message of eight ``sleep 100``
calls held its episode, and its batch, for eight time limits.
"""

from __future__ import annotations

import shlex
from typing import Callable, List, Optional

from skygym_sandboxes.containers import Container

from skyrl_gym.envs.swe.editor import Editor
from skyrl_gym.tools.core import ToolGroup, tool


EDITOR_EXEC_S = 30.0  # each container command of an editor action (its file's mode, a path's kind, a listing)


class ContainerFiles:
    """The editor's view of a container's files (modes of existing files are kept). ``time_limit()`` gives each
    container command's limit (the SWE tools give what is left of the message's time, at most EDITOR_EXEC_S)."""

    def __init__(self, container: Container, time_limit: Callable[[], float] = lambda: EDITOR_EXEC_S) -> None:
        self.container = container
        self.time_limit = time_limit

    def read(self, path: str) -> bytes:
        return self.container.read_file(path)

    def write(self, path: str, data: bytes) -> None:
        mode = self.container.exec(f"stat -c %a -- {shlex.quote(path)} 2>/dev/null",
                                   timeout_s=self.time_limit()).output.strip()
        self.container.write_file(path, data, mode=int(mode, 8) if mode.isdigit() else 0o644)

    def kind(self, path: str) -> str:
        quoted = shlex.quote(path)
        done = self.container.exec(
            f"if [ -d {quoted} ]; then echo dir; elif [ -e {quoted} ]; then echo file; else echo missing; fi",
            timeout_s=self.time_limit(),
        )
        return done.output.strip() or "missing"

    def listing(self, path: str) -> str:
        done = self.container.exec(
            f"find {shlex.quote(path)} -maxdepth 2 -not -path '*/.*' | sort | head -n 400", timeout_s=self.time_limit()
        )
        return done.output.rstrip()


class SWEToolGroup(ToolGroup):
    def __init__(self, container: Container, timeout_s: float = 60.0, output_cap: int = 16_000,
                 message_timeout_s: Optional[float] = None) -> None:
        super().__init__("swe")
        self.container = container
        self.timeout_s = timeout_s
        self.message_timeout_s = max(timeout_s, 2 * timeout_s if message_timeout_s is None else message_timeout_s)
        self.output_cap = output_cap
        files = ContainerFiles(container, time_limit=lambda: min(EDITOR_EXEC_S, self.message_time_left()))
        self.editor = Editor(files, max_view_chars=output_cap)
        self.submitted = False

    @tool
    def bash(self, command: str) -> str:
        """Run a bash command in the repository (/testbed) and see its output.

        Args:
            command: the command line; each call starts in /testbed, so chain steps with &&.
        """
        if not isinstance(command, str) or not command.strip():
            return "Error: bash needs a non-empty command."
        spent = self.message_time_spent(self.timeout_s)
        if spent:
            return spent
        limit = min(self.timeout_s, self.message_time_left())
        result = self.container.exec(command, timeout_s=limit, output_cap=self.output_cap)
        notes: List[str] = []
        if result.timed_out and limit < self.timeout_s:
            notes.append(f"[the command ran past the {limit:.3g} s left of this message's "
                         f"{self.message_timeout_s:g} s for its commands and was killed]")
        elif result.timed_out:
            notes.append(f"[the command ran past {self.timeout_s:g} s and was killed]")
        elif result.exit_code != 0:
            notes.append(f"[exit code {result.exit_code}]")
        text = result.output if result.output.strip() else "(no output)"
        return "\n".join([text.rstrip("\n"), *notes])

    @tool
    def str_replace_editor(
        self,
        command: str,
        path: str,
        file_text: Optional[str] = None,
        old_str: Optional[str] = None,
        new_str: Optional[str] = None,
        insert_line: Optional[int] = None,
        view_range: Optional[List[int]] = None,
    ) -> str:
        """View, create and edit files: view, create, str_replace, insert, undo_edit.

        Args:
            command: one of view, create, str_replace, insert, undo_edit.
            path: an absolute path, such as /testbed/pkg/module.py.
            file_text: the content of a new file (create).
            old_str: the exact text to replace; it must occur once (str_replace).
            new_str: the replacement (str_replace) or the text to insert (insert).
            insert_line: insert after this line; 0 inserts at the top (insert).
            view_range: [start, end] lines to view, 1-based; end -1 means the last line (view).
        """
        spent = self.message_time_spent(self.timeout_s)
        return spent or self.editor.run(command, path, file_text, old_str, new_str, insert_line, view_range)

    @tool
    def submit(self) -> str:
        """Submit the changes in /testbed as the fix; this ends the episode."""
        self.submitted = True
        return "Submitted."
