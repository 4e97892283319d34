"""The problem statement of a built instance: the symptom a user would report, never the fix.

:func:`symptoms` reads what the failing tests saw from pytest's own failure messages: for an assertion, the
call and the value it returned (pytest's ``where`` lines) and the value the test expected; for an exception,
its type and message. :func:`template_issue` writes them as an issue (offline, the default);
:class:`IssueWriter` asks a language model behind any OpenAI-compatible endpoint to write it instead.
Whatever is written goes through :func:`leaks`: no hidden test id or name, no hidden test path, no line of
the gold patch (restored or removed), and no name of a changed function that the symptoms do not show. A
model's text that leaks is replaced by the template's.
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from skyrl_gym import threadsafe_ast

_ASSERT = re.compile(r"^(?:AssertionError: )?assert (?P<left>.+?) (?P<op>==|!=|is not|is) (?P<right>.+)$")
_WHERE = re.compile(r"^\s*\+\s+where (?P<value>.+?) = (?P<call>.+)$")
_EXCEPTION = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt))(?::\s*(?P<text>.*))?$"
)
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
MAX_SYMPTOMS = 3


@dataclass(frozen=True)
class Failure:
    """One failing test as the builder saw it: pytest's message, and the failing statement of the test's own code
    (empty when the failure was raised elsewhere)."""

    message: str
    statement: str = ""


@dataclass(frozen=True)
class Symptom:
    kind: str  # "value": a wrong result; "no_exception": an error that should have been raised; "exception"
    statement: str = ""  # the failing statement of the test's own code
    call: str = ""  # the expression that gave the wrong value ("" when it cannot be told)
    got: str = ""
    expected: str = ""
    operator: str = "=="
    shown: str = ""  # what pytest printed (first lines, addresses removed)

    def text(self) -> str:
        return "\n".join([self.statement, self.call, self.got, self.expected, self.shown])


def failure_kind(message: str) -> str:
    """``"value"`` for a failed check of a result (an assertion, or an exception that was expected but not
    raised): the code returned something wrong; else the type of the exception it raised."""
    first = (message.strip().splitlines() or [""])[0]
    if first.startswith(("AssertionError", "assert ", "Failed: DID NOT RAISE")) or not first:
        return "value"
    found = _EXCEPTION.match(first)
    return found.group("type") if found else "error"


def _sides(statement: str) -> Optional[Tuple[str, str, bool]]:
    """(left source, right source, whether the right side is the computed one) of ``assert left ==/!= right``
    where one side calls something (None otherwise: then nothing tells what was called)."""
    try:
        tree = threadsafe_ast.parse(statement.strip())
    except SyntaxError:
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare) or len(node.test.ops) != 1:
        return None
    left, right = node.test.left, node.test.comparators[0]
    calls = lambda side: any(isinstance(n, ast.Call) for n in ast.walk(side))
    if not calls(left) and not calls(right):
        return None
    source = statement.strip()
    return (
        ast.get_source_segment(source, left) or "",
        ast.get_source_segment(source, right) or "",
        calls(right) and not calls(left),
    )


def symptom(failure: Failure) -> Optional[Symptom]:
    """What one failing test saw; None when its message says nothing usable."""
    lines = [_ADDRESS.sub("", line.rstrip()) for line in failure.message.strip().splitlines() if line.strip()]
    if not lines:
        return None
    statement = failure.statement.strip()
    shown = "\n".join(lines[:4])
    kind = failure_kind(failure.message)
    if kind != "value":
        return Symptom("exception", statement=statement, shown=lines[0][:300])
    if lines[0].startswith("Failed: DID NOT RAISE"):
        return Symptom("no_exception", statement=statement, shown=lines[0])
    found = _ASSERT.match(lines[0])
    sides = _sides(statement) if statement else None
    if found and sides:
        left_source, right_source, right_computed = sides
        got, expected = (
            (found.group("right"), found.group("left"))
            if right_computed
            else (found.group("left"), found.group("right"))
        )
        call = right_source if right_computed else left_source
        return Symptom("value", statement, call, got, expected, found.group("op"), shown)
    if found:
        for line in lines[1:]:
            where = _WHERE.match(line)
            if where and where.group("value") == found.group("left"):
                return Symptom(
                    "value",
                    statement,
                    where.group("call"),
                    found.group("left"),
                    found.group("right"),
                    found.group("op"),
                    shown,
                )
    if not statement and len(lines) == 1 and lines[0] in ("assert False", "AssertionError"):
        return None
    return Symptom("value", statement=statement, shown=shown)


def symptoms(failures: Sequence[Failure], forbidden: "Forbidden") -> List[Symptom]:
    """Up to three distinct symptoms of the failures, each free of anything ``forbidden``."""
    chosen: List[Symptom] = []
    shown = set()
    for failure in failures:
        found = symptom(failure)
        if found is None or forbidden.hits(found.text()):
            continue
        # what the issue prints of it: two checks of the same call and values are one symptom
        printed = (found.kind, found.call, found.got, found.expected) if found.call else found
        if printed in shown:
            continue
        shown.add(printed)
        chosen.append(found)
        if len(chosen) == MAX_SYMPTOMS:
            break
    return chosen


@dataclass
class Forbidden:
    """What an issue must never hold: hidden test ids, names and paths, gold lines, and the names of changed
    functions that only the patch shows."""

    strings: List[str] = field(default_factory=list)
    words: List[str] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        fail_to_pass: Sequence[str],
        test_paths: Sequence[str],
        gold_patch: str,
        functions: Sequence[str],
        shown: Sequence[str],
    ) -> "Forbidden":
        """``shown``: what the failures show a user (messages, failing statements): a changed function named
        there may be named in the issue."""
        strings = list(fail_to_pass) + list(test_paths)
        for line in gold_patch.splitlines():
            if line[:1] in "+-" and not line.startswith(("+++", "---")) and len(line[1:].strip()) >= 8:
                strings.append(line[1:].strip())
        # a hidden test's name is a secret wherever it shows, in a dotted path too (`self.tests.test_decode(...)`,
        # `Test.test_x.<locals>.helper` in a message): matched as text, not as a word
        strings += [re.sub(r"\[.*$", "", test_id.split("::")[-1]) for test_id in fail_to_pass]
        seen = "\n".join(shown)
        # a changed function the failures themselves show (the API the user called) may be named; others not
        hidden_functions = {name for name in functions if not re.search(rf"\b{re.escape(name)}\b", seen)}
        return cls(strings=sorted(set(strings)), words=sorted(hidden_functions))

    def allowing(self, name: str) -> "Forbidden":
        """The same, but for ``name`` itself (the project's name, which every issue says, even where the project's
        main function, its namesake, is what the bug changed)."""
        return Forbidden(strings=[s for s in self.strings if s != name], words=[w for w in self.words if w != name])

    def hits(self, text: str) -> List[str]:
        found = [string for string in self.strings if string in text]
        found += [word for word in self.words if re.search(rf"(?<![\w.]){re.escape(word)}(?!\w)", text)]
        return found


def leaks(text: str, forbidden: Forbidden) -> List[str]:
    """What of ``forbidden`` the text holds ([] when none)."""
    return forbidden.hits(text)


def template_issue(project: str, version: str, found: Sequence[Symptom], failing: int) -> str:
    """An issue written from the symptoms alone, the way a user reports a regression."""
    where = f"`{project}` {version}".strip()
    if not found:
        return (
            f"Wrong results from {where}\n\nSince this revision, {failing} of the project's checks of its own "
            "behaviour fail: results that used to be right are now wrong.\n\n"
            "Expected: the behaviour of the previous release.\n"
        )
    first = found[0]
    if first.kind == "value" and first.call:
        title = f"`{_short(first.call)}` gives {_short(first.got, 40)}, expected {_short(first.expected, 40)}"
    elif first.kind == "no_exception":
        title = f"No error raised where {where} used to raise one"
    elif first.kind == "exception":
        title = f"{first.shown.split(':', 1)[0]} from {where}"
    else:
        title = f"Wrong result from {where}"
    parts = [title, "", f"With {where} (this checkout):", ""]
    for item in found:
        code = ["```python", item.statement, "```"] if item.statement else []
        if item.kind == "value" and item.call:
            verb = "Expected" if item.operator in ("==", "is") else "Expected anything but"
            parts += ["```python", f">>> {item.call}", item.got, "```", f"{verb} `{item.expected}`."]
            if (
                item.statement
                and item.call not in item.statement.split("==")[0] + item.statement.split("==")[-1]
            ):
                parts += ["This check fails:", *code]
        elif item.kind == "value":
            parts += ["This check fails:", *code, "with", "```", item.shown, "```"]
        elif item.kind == "no_exception":
            parts += [
                *(["This should raise an error but does not:"] + code if code else []),
                "```",
                item.shown,
                "```",
            ]
        else:
            parts += [
                *(["This now fails:"] + code if code else ["A call that used to work now raises:"]),
                "```",
                item.shown,
                "```",
            ]
        parts.append("")
    if failing > len(found):
        parts.append(
            f"Other calls go wrong the same way ({failing} checks of the project's behaviour fail in all)."
        )
    return "\n".join(parts).rstrip() + "\n"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


ISSUE_WRITER_PROMPT = """You write GitHub issues as a user of the Python library {project} would.
A change broke the library. Below is what the failing checks observed: the calls, what came back and what
was expected. Write a short issue (a title line, then a body with a minimal reproduction in a python code
block and the expected behaviour). Describe only the symptom. Do not guess the cause, do not suggest a fix,
and do not mention tests, test names or test files.

Observed:
{observed}
"""


class IssueWriter:
    """Issue text from a language model behind an OpenAI-compatible endpoint (``--issue-writer URL MODEL``)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: Optional[str] = None,
        timeout_s: float = 120.0,
        attempts: int = 3,
    ) -> None:
        # the judge's client: one HTTP path (retries, limits on the reply) for every OpenAI-compatible call
        from skyrl_gym.rewards.judge import JudgeClient, JudgeEndpoint

        self.endpoint = JudgeEndpoint(
            base_url=base_url,
            model=model,
            api_key=api_key,
            timeout_s=timeout_s,
            attempts=attempts,
            max_tokens=700,
            temperature=0.0,
        )
        self.client = JudgeClient(self.endpoint)

    def write(self, project: str, found: Sequence[Symptom], failures: Sequence[Failure]) -> str:
        observed = "\n\n".join(item.text().strip() for item in found) or "\n".join(
            f"- {failure.message[:300]}" for failure in failures[:3]
        )
        prompt = ISSUE_WRITER_PROMPT.format(project=project, observed=observed)
        deadline = time.monotonic() + self.endpoint.verdict_deadline_s
        text, _, _ = self.client._post([{"role": "user", "content": prompt}], deadline)
        return str(text).strip()

    def close(self) -> None:
        self.client.close()


class IssueLeak(ValueError):
    """No issue text can be written without naming a hidden test, path, gold line or changed function."""


def write_issue(
    project: str,
    version: str,
    failures: Sequence[Failure],
    forbidden: Forbidden,
    writer: Optional[IssueWriter] = None,
) -> Tuple[str, Dict[str, Any]]:
    """The problem statement and how it was written (``{"source": "template" | "model", ...}``)."""
    forbidden = forbidden.allowing(project)
    found = symptoms(failures, forbidden)
    template = template_issue(project, version, found, len(failures))
    info: Dict[str, Any] = {"source": "template", "symptoms": len(found)}
    if writer is not None:
        try:
            text = writer.write(project, found, failures)
        except Exception as exc:  # the endpoint failed: the template stands, and the card says why
            info["writer_error"] = f"{type(exc).__name__}: {exc}"[:300]
        else:
            leaked = leaks(text, forbidden)
            if text and not leaked:
                return text + ("\n" if not text.endswith("\n") else ""), {**info, "source": "model"}
            info["writer_rejected"] = (
                f"the model's text held {leaked[:3]}" if leaked else "the model wrote nothing"
            )
    leaked = leaks(template, forbidden)
    if leaked:  # the symptoms are filtered above: the last guard, which drops the bug rather than show it
        raise IssueLeak(f"the issue text would name what is hidden ({len(leaked)} item(s))")
    return template, info


__all__ = [
    "Failure",
    "Forbidden",
    "IssueLeak",
    "IssueWriter",
    "Symptom",
    "failure_kind",
    "leaks",
    "symptom",
    "symptoms",
    "template_issue",
    "write_issue",
]
