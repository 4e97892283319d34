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
