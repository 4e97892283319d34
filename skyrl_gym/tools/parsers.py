"""Find tool calls in model text. Malformed or unclosed calls are reported, never raised.

Two syntaxes, shared by every env:

* XML tags: ``<sql>SELECT 1</sql>``, ``<search>query</search>``, ``<tool><python>print(1)</python></tool>``;
* JSON calls: ``<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>``
  (the Hermes / Qwen format that native tool-calling chat templates produce).

The scanners use ``str.find`` rather than regular expressions, so a 10 MB action costs linear time.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union


@dataclasses.dataclass
class ToolCall:
    """One call: the tool ``name``, its ``arguments`` (JSON calls) and the raw ``content`` between the tags."""

    name: str
    arguments: Dict[str, Any]
    content: str
    syntax: str  # "xml" or "json"


@dataclasses.dataclass
class ParsedToolCalls:
    calls: List[ToolCall] = dataclasses.field(default_factory=list)
    errors: List[str] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.calls)


def find_tag_blocks(text: str, tag: str) -> Tuple[List[str], List[str]]:
    """Every ``<tag>...</tag>`` body in order, and errors for openings left unclosed."""
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    bodies: List[str] = []
    errors: List[str] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            break
        body_start = start + len(open_tag)
        end = text.find(close_tag, body_start)
        if end < 0:
            errors.append(f"unclosed <{tag}> tag: add </{tag}> after the {tag} content")
            break
        bodies.append(text[body_start:end])
        pos = end + len(close_tag)
    return bodies, errors


def extract_tag(text: str, tag: str, which: str = "last") -> Optional[str]:
    """The body of the first or last complete ``<tag>...</tag>`` block, stripped; ``None`` if absent."""
    bodies, _ = find_tag_blocks(text, tag)
    if not bodies:
        return None
    return (bodies[-1] if which == "last" else bodies[0]).strip()


def has_look_alike_digits(text: str) -> bool:
    """Whether ``text`` writes digits other than ASCII 0-9 (fullwidth, Arabic-Indic, math bold...). Python's
    ``int()``, ``float()`` and ``str.isdigit()`` accept them, so a parser that does not ask would pay a reply
    in spoofed digits as if it wrote the number (found by ``skyrl-gym audit``)."""
    return not text.isascii() and any(
        not char.isascii() and unicodedata.category(char) == "Nd" for char in text)


def parse_xml_tool_calls(text: str, tags: Iterable[str], wrapper: Optional[str] = None) -> ParsedToolCalls:
    """Calls written as ``<tag>content</tag>`` for each of ``tags``, in the order they appear.

    With ``wrapper="tool"``, only tags inside ``<tool>...</tool>`` count (``<tool><python>..</python></tool>``).
    """
    result = ParsedToolCalls()
    regions = [text]
    if wrapper is not None:
        regions, wrap_errors = find_tag_blocks(text, wrapper)
        result.errors.extend(wrap_errors)
    found: List[Tuple[int, int, ToolCall]] = []
    for region_index, region in enumerate(regions):
        for tag in tags:
            bodies, errors = find_tag_blocks(region, tag)
            result.errors.extend(errors)
            offset = 0
            for body in bodies:
                offset = region.find(f"<{tag}>", offset)
                found.append((region_index, offset, ToolCall(name=tag, arguments={}, content=body.strip(), syntax="xml")))
                offset += 1
    result.calls = [call for _, _, call in sorted(found, key=lambda item: (item[0], item[1]))]
    return result


def _load_json(text: str) -> Any:
    """``json.loads`` for model text: every way it fails is a ``ValueError`` saying why. The decoder raises
    ``RecursionError`` past about 1000 nested ``[`` and a bare ``ValueError`` for an integer of more than 4300
    digits; either escaped the parser and failed the env's step."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:  # an integer too long to convert
        raise ValueError(str(exc).split(";")[0]) from None


def parse_json_tool_calls(text: str, tag: str = "tool_call") -> ParsedToolCalls:
    """Calls written as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""
    result = ParsedToolCalls()
    bodies, errors = find_tag_blocks(text, tag)
    result.errors.extend(errors)
    for index, body in enumerate(bodies, start=1):
        call = _json_call(body, index)
        if isinstance(call, str):
            result.errors.append(call)
        else:
            result.calls.append(call)
    return result


def _json_call(body: str, index: int) -> Union[ToolCall, str]:
    """The call a ``<tool_call>`` block's JSON body writes, or why it is not one."""
    try:
        payload = _load_json(body)
    except ValueError as exc:
        return f"tool call {index} is not valid JSON ({exc})"
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return f'tool call {index} must be an object with a "name" string and an "arguments" object'
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):  # some models emit arguments as a JSON string
        try:
            arguments = _load_json(arguments)
        except ValueError:
            return f'tool call {index}: "arguments" is a string that is not valid JSON'
    if not isinstance(arguments, dict):
        return f'tool call {index}: "arguments" must be an object, got {type(arguments).__name__}'
    return ToolCall(name=payload["name"], arguments=arguments, content=body.strip(), syntax="json")


def tag_or_json_call(action: str, tool: str, argument: str) -> Optional[str]:
    """The body of the first complete ``<tool>`` block of ``action``, else the string ``argument`` of its first
    JSON call of ``tool`` (``<tool_call>{"name": tool, "arguments": {argument: ...}}</tool_call>``: what a
    function-calling agent's call becomes), else None. For envs whose tool is a tag (``<search>``, ``<sql>``)."""
    bodies, _ = find_tag_blocks(action, tool)
    if bodies:
        return bodies[0]
    if "<tool_call>" not in action:
        return None
    calls, _ = find_tag_blocks(action, "tool_call")
    for index, body in enumerate(calls[:MAX_CALLS_PER_MESSAGE], start=1):  # as many as a tool env would run
        call = _json_call(body, index)
        if not isinstance(call, str) and call.name == tool and isinstance(call.arguments.get(argument), str):
            return call.arguments[argument]
    return None


MAX_CALLS_PER_MESSAGE = 8
"""The calls of one message that run: a 740-character message of ten ``sleep 100`` calls held its episode (and its
batch) for ten tool time limits, and a 16 KB reply holds 220 of them."""


def parse_tool_calls(text: str, xml_tags: Sequence[str] = (), wrapper: Optional[str] = None,
                     max_calls: int = MAX_CALLS_PER_MESSAGE) -> ParsedToolCalls:
    """JSON calls if the text has any ``<tool_call>`` block, else XML calls for ``xml_tags``; the first
    ``max_calls`` of them, with an error saying how many more were left out (and at most ``max_calls`` errors, with
    how many more there were)."""
    parsed = parse_json_tool_calls(text) if "<tool_call>" in text else parse_xml_tool_calls(text, xml_tags, wrapper=wrapper)
    if len(parsed.errors) > max_calls:  # each is an observation: 700 empty calls in 16 KB made 700 of them
        more = len(parsed.errors) - max_calls
        del parsed.errors[max_calls:]
        parsed.errors.append(f"and {more} more calls that could not be parsed")
    if len(parsed.calls) > max_calls:
        parsed.errors.append(f"only the first {max_calls} tool calls of a message run; the other "
                             f"{len(parsed.calls) - max_calls} did not (call a tool, read its answer, then the next)")
        del parsed.calls[max_calls:]
    return parsed
