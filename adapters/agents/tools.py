"""The agent's tools and the env that runs them.

Tools are :class:`skyrl_gym.tools.ToolGroup` classes (``@tool`` methods; their OpenAI schemas come from the
signatures and docstrings), registered by name: ``finish`` (ends the trajectory with its ``answer``) and
``code_interpreter`` (Python in the hub's sandbox). ``register_tool("name")`` adds yours.

:class:`AgentToolEnv` puts a set of tools behind the env API, so a ReAct agent whose task has no env of its own
(``GeneralReactTask``) still plays its episode through the one episode driver: each assistant message is an
action; its tool calls, in JSON (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) or XML form
(``<code_interpreter>print(1)</code_interpreter>``, ``<finish>42</finish>``: the body fills the tool's first
parameter), are parsed by :mod:`skyrl_gym.tools.parsers` and run; their output comes back as observations.
A tool that raises, an unknown tool, a malformed call or a message without any call becomes an observation
telling the model what went wrong; calling ``finish`` ends the episode.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Sequence

from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.tools.core import ToolGroup, tool
from skyrl_gym.tools.parsers import parse_tool_calls

from skygym_adapters.agents.config import AgentConfigError


class FinishTool(ToolGroup):
    def __init__(self) -> None:
        super().__init__("finish")

    @tool
    def finish(self, answer: str) -> str:
        """Finish the task and give the final answer.

        Args:
            answer: the final answer (for math, inside \\boxed{} when the question asks for it)
        """
        return str(answer)


class CodeInterpreterTool(ToolGroup):
    """Python in the hub's sandbox (the shared warm local sandbox unless ``sandbox_config`` says otherwise)."""

    def __init__(self, timeout: float = 10.0, sandbox_config: Optional[Dict[str, Any]] = None) -> None:
        from skyrl_gym.tools.python import PythonCodeExecutorToolGroup

        self._python = PythonCodeExecutorToolGroup(timeout=timeout, sandbox_config=sandbox_config)
        super().__init__("code_interpreter")

    def start_message(self) -> None:
        self._python.start_message()

    @tool
    def code_interpreter(self, code: str) -> str:
        """Run a Python program in a sandbox and return what it printed (or the error).

        Args:
            code: a complete Python program; print() what you want to see
        """
        return self._python.python(code)


TOOL_REGISTRY: Dict[str, Callable[[], ToolGroup]] = {
    "finish": FinishTool,
    "code_interpreter": CodeInterpreterTool,
}


def register_tool(name: str) -> Callable[[Any], Any]:
    """Class decorator: ``@register_tool("calculator") class Calculator(ToolGroup): ...`` (built with no arguments)."""

    def decorator(cls: Any) -> Any:
        TOOL_REGISTRY[name] = cls
        return cls

    return decorator


def build_tools(names: Sequence[str]) -> List[ToolGroup]:
    unknown = [name for name in names if name not in TOOL_REGISTRY]
    if unknown:
        raise AgentConfigError(
            f"unknown tool(s) {unknown} in tools; registered tools: {sorted(TOOL_REGISTRY)} "
            "(add one with skygym_adapters.agents.register_tool)"
        )
    return [TOOL_REGISTRY[name]() for name in names]


NO_TOOL_CALL = (
    "No tool call was found in your message. Call one of the tools {names} with "
    '<tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>, or call finish with your answer.'
)


class AgentToolEnv(BaseTextEnv):
    """The agent's tools as an env (see the module docstring). ``answer`` holds what ``finish`` returned;
    ``finished`` says whether it was called. With no tools at all, the first message is the answer."""

    def __init__(self, tools: Sequence[ToolGroup], max_turns: Optional[int] = None) -> None:
        super().__init__({}, {})
        self.init_tool_groups(list(tools))
        if max_turns is not None:
            self.max_turns = max_turns
        self.answer: Optional[str] = None
        self.finished = False
        self.tool_calls = 0

    @property
    def tool_names(self) -> List[str]:
        return list(self.tool_to_toolgroup)

    def _arguments(self, name: str, call: Any) -> Dict[str, Any]:
        if call.syntax == "json":
            return dict(call.arguments)
        schema = next(s for s in self.tool_schemas() if s["function"]["name"] == name)
        params = list(schema["function"]["parameters"].get("properties", {}))
        return {params[0]: call.content} if params else {}

    def step(self, action: str) -> Dict[str, Any]:  # type: ignore[override]
        self.turns += 1
        if not self.tool_to_toolgroup:  # no tools: the message is the answer
            self.answer, self.finished = action, False
            return {"observations": [], "reward": 0.0, "done": True, "metadata": {"answer": action}}
        parsed = parse_tool_calls(action, xml_tags=self.tool_names)
        self._start_tool_calls()
        observations: List[Dict[str, Any]] = []
        for error in parsed.errors:
            observations.append({"role": "user", "content": f"Your tool call could not be parsed: {error}"})
        for call in parsed.calls:
            name = call.name
            if name not in self.tool_to_toolgroup:
                observations.append(
                    {
                        "role": "user",
                        "content": f"Tool {name!r} does not exist; the tools are {self.tool_names}.",
                    }
                )
                continue
            self.tool_calls += 1
            try:
                output = self._execute_tool(self.tool_to_toolgroup[name], name, self._arguments(name, call))
            except Exception as exc:  # a failing tool is something the model should hear about, not a crash
                observations.append(
                    {"role": "user", "content": f"Tool {name!r} failed: {type(exc).__name__}: {exc}"}
                )
                continue
            if name == "finish":
                self.answer, self.finished = str(output), True
                return {"observations": [], "reward": 0.0, "done": True, "metadata": {"answer": self.answer}}
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)
            observations.append({"role": "user", "content": text})
        if not parsed.calls and not parsed.errors:
            observations.append({"role": "user", "content": NO_TOOL_CALL.format(names=self.tool_names)})
        return {"observations": observations, "reward": 0.0, "done": False, "metadata": {}}

    def get_metrics(self) -> Dict[str, Any]:
        return {"tool_calls": self.tool_calls, "finished": self.finished}


CODEACT_NO_ACTION = (
    "No code was found in your message. Write Python in a ```python code block to run it, or call "
    "finish with your answer."
)


class CodeActToolEnv(AgentToolEnv):
    """CodeAct's action space: a fenced ```python block in the message is code to run (in the sandbox, stateful:
    variables and imports carry over between turns); tool calls (``finish`` and the others) work as in
    :class:`AgentToolEnv`."""

    def __init__(self, tools: Sequence[ToolGroup], max_turns: Optional[int] = None) -> None:
        from skyrl_gym.tools.python import PythonCodeExecutorToolGroup

        super().__init__(tools, max_turns)
        self.python = PythonCodeExecutorToolGroup(stateful=True)

    def step(self, action: str) -> Dict[str, Any]:  # type: ignore[override]
        from skyrl_gym.envs.lcb.grading import extract_last_code_block

        parsed = parse_tool_calls(action, xml_tags=self.tool_names)
        code = None if parsed.calls else extract_last_code_block(action)
        if code is None:
            out = super().step(action)
            if out["observations"] and out["observations"][-1]["content"].startswith(
                "No tool call was found"
            ):
                out["observations"][-1] = {"role": "user", "content": CODEACT_NO_ACTION}
            return out
        self.turns += 1
        self.tool_calls += 1
        output = self.python.python(code)
        return {
            "observations": [{"role": "user", "content": f"Execution output:\n{output}"}],
            "reward": 0.0,
            "done": False,
            "metadata": {},
        }


__all__ = [
    "AgentToolEnv",
    "CodeActToolEnv",
    "CodeInterpreterTool",
    "FinishTool",
    "TOOL_REGISTRY",
    "build_tools",
    "register_tool",
]
