"""Actions that replay a patch through the SWE tools: one ``str_replace_editor`` call per hunk, then
``submit``. A scripted policy with these actions resolves an instance with its gold patch, which is
what the examples, the golden case and the tests use to exercise the whole tool path."""

from __future__ import annotations

import json
from typing import List, Tuple

from skyrl_gym.envs.swe.runtime import TESTBED


def hunks(patch: str) -> List[Tuple[str, str, str]]:
    """``(path, old_text, new_text)`` for every hunk of a unified diff (text files)."""
    found: List[Tuple[str, str, str]] = []
    path = ""
    old: List[str] = []
    new: List[str] = []
    in_hunk = False

    def flush() -> None:
        if in_hunk and (old or new):
            found.append((path, "\n".join(old), "\n".join(new)))

    for line in patch.split("\n"):
        if line.startswith("diff --git ") or line.startswith("--- "):
            flush()
            in_hunk, old, new = False, [], []
        elif line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else line[4:]
        elif line.startswith("@@"):
            flush()
            in_hunk, old, new = True, [], []
        elif in_hunk and line.startswith(" "):
            old.append(line[1:])
            new.append(line[1:])
        elif in_hunk and line.startswith("-"):
            old.append(line[1:])
        elif in_hunk and line.startswith("+"):
            new.append(line[1:])
    flush()
    return found


def tool_call(name: str, **arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def replay_actions(patch: str) -> List[str]:
    actions = [
        tool_call("str_replace_editor", command="str_replace", path=f"{TESTBED}/{path}", old_str=old, new_str=new)
        for path, old, new in hunks(patch)
    ]
    return actions + [tool_call("submit")]
