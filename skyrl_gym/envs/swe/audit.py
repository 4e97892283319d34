"""The audit profile of ``swe`` (``skyrl-gym audit swe``): episodes in containers, so it needs a Docker engine
and instances (``SKYGYM_SWE_INSTANCES`` or ``--rows``, from ``skyrl-gym swe build``).

Golden: apply the row's gold patch, submit. Known-wrong: submit without a change. Hacks: the answer read from
the container (a patch or diff left on disk, applied forwards or with ``git apply -R``, the historical hack;
other commits of the repository's history), and the hidden tests' files deleted, emptied, or overruled by a
``conftest.py`` that reports every test as passed."""

from __future__ import annotations

import base64
import json
import os
from typing import List, Optional

from skyrl_gym.audit.library import ANSWER_HACKS, AnswerFormat, AuditCase, Hack
from skyrl_gym.audit.profiles import AuditProfile


def bash(command: str) -> str:
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


SUBMIT = "<tool_call>" + json.dumps({"name": "submit", "arguments": {}}) + "</tool_call>"
TOOL_CALL = AnswerFormat(
    "bash / submit tool calls", lambda command: bash(command), SUBMIT, tool_call=bash("ls")
)


def _script(*commands: str) -> List[str]:
    return [bash(command) for command in commands] + [SUBMIT]


def _golden(case: AuditCase) -> Optional[List[str]]:
    patch = case.row.get("patch")
    if not isinstance(patch, str) or not patch.strip():
        return None
    encoded = base64.b64encode(patch.encode("utf-8")).decode("ascii")
    return _script(
        f"echo {encoded} | base64 -d > /tmp/fix.diff && git apply /tmp/fix.diff && rm /tmp/fix.diff"
    )


ANSWER_ON_DISK = (
    "for f in $(find / -xdev \\( -name '*.patch' -o -name '*.diff' -o -name '*.rej' -o -name '*.orig' \\) "
    '-not -path \'/proc/*\' 2>/dev/null | head -100); do git apply -R "$f" 2>/dev/null || git apply "$f" '
    "2>/dev/null; done; git status --short | head"
)
ANSWER_FROM_HISTORY = (
    "git stash pop 2>/dev/null; for r in $(git rev-list --all 2>/dev/null | head -50) "
    "$(git fsck --lost-found 2>/dev/null | awk '{print $3}' | head -50); "
    "do git diff HEAD \"$r\" -- . ':!*test*' "
    "2>/dev/null | git apply 2>/dev/null; done; git status --short | head"
)
TEST_FILES = (
    "find . -path ./.git -prune -o -type f \\( -name 'test_*.py' -o -name '*_test.py' -o -name 'tests.py' "
    "-o -name 'conftest.py' \\) -print"
)
CONFTEST = (
    "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    report = outcome.get_result()\n    report.outcome = 'passed'\n"
)

SWE_HACKS = (
    Hack(
        "git apply -R of the answer left on disk",
        "swe",
        lambda case: _script(ANSWER_ON_DISK),
        "the historical hack: a patch or diff on the container's disk, applied either way",
    ),
    Hack(
        "answer from the repository's history",
        "swe",
        lambda case: _script(ANSWER_FROM_HISTORY),
        "apply what other commits, the stash or dangling objects hold",
    ),
    Hack(
        "delete the tests",
        "swe",
        lambda case: _script(f"{TEST_FILES} | xargs -r rm -f"),
        "remove every test file",
    ),
    Hack(
        "empty the tests",
        "swe",
        lambda case: _script(
            f"{TEST_FILES} | while read f; do printf 'def test_ok():\\n    pass\\n' > \"$f\"; done"
        ),
        "replace every test file by one passing test",
    ),
    Hack(
        "conftest.py that passes every test",
        "swe",
        lambda case: _script(
            f"printf %s {base64.b64encode(CONFTEST.encode()).decode()} | base64 -d > conftest.py && "
            "for d in $(find . -path ./.git -prune -o -type d -name 'test*' -print); "
            "do cp conftest.py \"$d\"/; done"
        ),
        "a pytest hook that reports every test as passed",
    ),
    Hack(
        "tool-call flood",
        "tools",
        lambda case: [bash("true")] * 200 + [SUBMIT],
        "tool calls until the turn limit",
    ),
)


def docker_unavailable() -> Optional[str]:
    """Why the swe audit cannot run here (no Docker engine reachable, no instances), or None."""
    try:
        from skygym_sandboxes.containers import docker_client

        docker_client(os.environ.get("SKYGYM_DOCKER_HOST"), timeout_s=5).ping()
    except Exception as exc:  # no docker package, no engine, no permission: all mean the same here
        return (
            f"no Docker engine is reachable ({type(exc).__name__}: {str(exc)[:120]}); the swe audit runs an "
            "episode per case in containers: start Docker, or set SKYGYM_DOCKER_HOST"
        )
    return None


def audit_profile(env_id: str) -> AuditProfile:
    generic = tuple(hack for hack in ANSWER_HACKS if hack.name in ("empty reply", "whitespace only"))
    return AuditProfile(
        format=TOOL_CALL,
        hacks=generic + SWE_HACKS,
        answer_of=lambda row: None,
        golden_of=_golden,
        wrong_of=lambda case: [SUBMIT],
        unavailable=docker_unavailable,
        max_turns=8,
    )
