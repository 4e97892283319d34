"""Tool groups: ``@tool`` methods on a ``ToolGroup``, each with an OpenAI function-calling schema.

The schema is derived from the method's signature (type hints give JSON types, parameters without a
default are required) and its docstring (the first paragraph describes the tool; an ``Args:`` section
describes the parameters). The same tool thus serves XML-tag prompts and native tool calling.
"""

from __future__ import annotations

import inspect
import math
import re
import time
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from skyrl_gym.errors import ToolError

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def _json_schema_for(annotation: Any) -> Dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    if origin is Union:
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_schema_for(options[0]) if len(options) == 1 else {"anyOf": [_json_schema_for(a) for a in options]}
    if origin is typing.Literal:
        values = list(typing.get_args(annotation))
        return {"type": _JSON_TYPES.get(type(values[0]), "string"), "enum": values}
    if origin in (list, List, tuple):
        args = typing.get_args(annotation)
        return {"type": "array", "items": _json_schema_for(args[0]) if args else {}}
    if origin in (dict, Dict):
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    return {}


def _parse_docstring(doc: str) -> tuple[str, Dict[str, str]]:
    """Split a Google-style docstring into (summary, {param: description})."""
    doc = inspect.cleandoc(doc or "")
    summary_part, _, rest = doc.partition("\nArgs:")
    summary = " ".join(summary_part.split("\n\n")[0].split())
    params: Dict[str, str] = {}
    current = None
    for line in rest.splitlines():
        if line.strip() and not line.startswith((" ", "\t")):
            break  # next section (Returns:, Raises:)
        match = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$", line)
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
    return summary, params


class tool:
    """Marks a ``ToolGroup`` method as a tool: ``@tool`` or ``@tool(name="...", description="...")``."""

    def __init__(self, func: Optional[Callable] = None, *, name: Optional[str] = None, description: Optional[str] = None):
        self._name = name
        self._description = description
        self.func: Optional[Callable] = None
        if func is not None:
            self._bind(func)

    def _bind(self, func: Callable) -> None:
        self.func = func
        self.name = self._name or func.__name__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.func is None:  # used as @tool(...): the first call receives the function
            (func,) = args
            self._bind(func)
            return self
        return self.func(*args, **kwargs)

    def __get__(self, instance: Any, owner: Any) -> Any:
        if instance is None:
            return self
        func = self.func

        def bound(*args: Any, **kwargs: Any) -> Any:
            return func(instance, *args, **kwargs)

        bound.__name__ = self.name
        bound.__doc__ = func.__doc__
        return bound

    def schema(self) -> Dict[str, Any]:
        """The OpenAI function-calling schema of this tool."""
        assert self.func is not None
        summary, param_docs = _parse_docstring(self.func.__doc__ or "")
        signature = inspect.signature(self.func)
        try:
            hints = typing.get_type_hints(self.func)
        except Exception:
            hints = {}
        properties: Dict[str, Any] = {}
        required: List[str] = []
        for index, (pname, param) in enumerate(signature.parameters.items()):
            if index == 0 and pname == "self":
                continue
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            prop = _json_schema_for(hints.get(pname, param.annotation))
            if pname in param_docs:
                prop["description"] = param_docs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif isinstance(param.default, (str, int, float, bool)):
                prop["default"] = param.default
            properties[pname] = prop
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self._description or summary,
                "parameters": {"type": "object", "properties": properties, "required": required},
            },
        }


MIN_CALL_S = 1.0  # a message with less time left than this (or half a call's own limit) runs no more calls


class ToolGroup:
    """A named set of tools sharing state (a database connection, an HTTP session, a sandbox).

    A group whose calls take time can bound what one model message's calls take together: it sets
    ``message_timeout_s``, each of its calls takes at most :meth:`message_time_left`, and its env calls
    :meth:`start_message` as each step begins. A message of ten ``sleep 100`` calls held its episode, and its
    batch, for ten time limits."""

    message_timeout_s: Optional[float] = None  # what one message's calls may take together; None: no bound
    _message_deadline: Optional[float] = None

    def start_message(self) -> None:
        """The calls to come are one message's: they share ``message_timeout_s`` from now."""
        if self.message_timeout_s is not None:
            self._message_deadline = time.monotonic() + self.message_timeout_s

    def message_time_left(self) -> float:
        """What is left of the message's time (no end without a bound, or before the first :meth:`start_message`)."""
        return math.inf if self._message_deadline is None else self._message_deadline - time.monotonic()

    def message_time_spent(self, call_limit: float) -> Optional[str]:
        """The observation of a call (whose own limit is ``call_limit``) its message has no time left for, else None."""
        if self.message_time_left() >= min(MIN_CALL_S, call_limit / 2):
            return None
        return (f"Not run: this message's calls used up their {self.message_timeout_s:g} s. Send one call, read "
                "its output, then the next.")

    def __init__(self, name: str):
        self.name = name
        self._tool_registry: Dict[str, Callable] = {}
        self._tool_specs: Dict[str, tool] = {}
        self._register_tools()

    def _register_tools(self) -> None:
        for attr_name, spec in self.tools_of_class().items():
            self._tool_specs[spec.name] = spec
            self._tool_registry[spec.name] = getattr(self, attr_name)

    @classmethod
    def tools_of_class(cls) -> Dict[str, "tool"]:
        """The class's tools by attribute name, base classes first (a subclass's method of the same name wins);
        what a group offers, known without making one (an env can describe its tools before ``init``)."""
        by_name: Dict[str, Tuple[str, tool]] = {}
        for klass in reversed(cls.__mro__):
            for attr_name, raw in vars(klass).items():
                if isinstance(raw, tool):
                    existing = by_name.get(raw.name)
                    if existing is not None and existing[1].func is not raw.func and attr_name != existing[0]:
                        raise ToolError(f"tool name {raw.name!r} is defined twice in tool group {cls.__name__}")
                    by_name[raw.name] = (attr_name, raw)
        return {attr_name: spec for attr_name, spec in by_name.values()}

    def get_name(self) -> str:
        return self.name

    def get_tool(self, name: str) -> Optional[Callable]:
        return self._tool_registry.get(name)

    def get_tool_names(self) -> List[str]:
        return list(self._tool_registry)

    def execute_tool(self, name: str, *args: Any, **kwargs: Any) -> Any:
        func = self.get_tool(name)
        if func is None:
            raise ToolError(f"tool {name!r} not found in group {self.name!r}; it has {self.get_tool_names()}")
        return func(*args, **kwargs)

    def get_tool_to_group_mapping(self) -> Dict[str, str]:
        return {name: self.name for name in self._tool_registry}

    def get_tool_schemas(self) -> List[Dict[str, Any]]:
        """OpenAI function-calling schemas of the group's tools."""
        return [spec.schema() for spec in self._tool_specs.values()]
