"""Tools for envs: ``ToolGroup`` / ``@tool`` and the parsers that find tool calls in model text."""

from skyrl_gym.tools.core import ToolGroup, tool
from skyrl_gym.tools.parsers import ParsedToolCalls, ToolCall, parse_json_tool_calls, parse_tool_calls, parse_xml_tool_calls

__all__ = [
    "ToolGroup",
    "tool",
    "ToolCall",
    "ParsedToolCalls",
    "parse_tool_calls",
    "parse_xml_tool_calls",
    "parse_json_tool_calls",
]

# SkyRL-gym's tool groups, imported on first use (``from skyrl_gym.tools import SearchToolGroup``).
_LAZY_TOOL_GROUPS = {
    "SQLToolGroup": "skyrl_gym.tools.sql",
    "SQLCodeExecutorToolGroup": "skyrl_gym.tools.sql",
    "SearchToolGroup": "skyrl_gym.tools.search",
    "PythonCodeExecutorToolGroup": "skyrl_gym.tools.python",
}


def __getattr__(name):
    if name in _LAZY_TOOL_GROUPS:
        import importlib

        return getattr(importlib.import_module(_LAZY_TOOL_GROUPS[name]), name)
    raise AttributeError(f"module 'skyrl_gym.tools' has no attribute {name!r}")
