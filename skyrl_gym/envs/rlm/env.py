"""``BaseRLMEnv``: the multi-turn loop of a Recursive Language Model over a sandboxed :class:`PersistentREPL`.

Each turn the model writes a ```` ```repl ```` block; the env runs it in the REPL (variables persist) and
answers with the code and its output. The episode ends when the model gives a final answer, with
``FINAL(text)`` on a line of its response or ``FINAL_VAR(name)`` (in its text or called in the code), or at
``max_turns`` (reward 0). Subclasses supply the task through three hooks: ``_get_reward(final_answer)``,
``_get_system_prompt()`` and ``_get_repl_tools()``.

``extras`` (the dataset row and the generator's injections): ``max_turns`` (10), ``repl_timeout`` (180 s
per cell), ``lm_callback`` / ``subcall_fn`` (language-model calls for ``llm_query`` / ``rlm_query``),
``depth`` (position in a parent/child tree), ``extra_info.context_text`` (the context; JSON objects are
decoded; default: the prompt's text). ``env_config["sandbox"]`` picks the sandbox, as for the code envs.

The per-turn instruction is ephemeral, as in SkyRL-gym: ``init`` returns it as the last message and keeps a
reference to that list; ``step`` removes it from the end of that same list before answering, and sends the
next one as the last observation. The generator must keep using the list ``init`` returned.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym.core import ConversationType, StepOutput
from skyrl_gym.envs._common import row_turn_limit
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.rlm.repl import PersistentREPL, REPLResult, iter_tool_entries

DEFAULT_RLM_SYSTEM_PROMPT = """\
You answer a query using a large context that you explore with code. A Python REPL holds the context, and \
you will be asked again and again until you give a final answer.

The REPL starts with:
1. `context`: the information your query is about. Inspect it (its type, size and content) before answering; \
look through enough of it to be sure.
2. `SHOW_VARS()`: returns the variables you have created, so you can check one exists before FINAL_VAR.
3. `print()`: what you print is what you see of a run.
{custom_tools_section}
To run code, put it in a block marked as repl:
```repl
# your code
```
Variables persist between blocks: build your answer up in them.

When you are done, give the final answer in one of two ways, on a line of its own:
1. FINAL(the answer as text)
2. FINAL_VAR(variable_name) to answer with a variable already created in an earlier repl block

FINAL_VAR only reads a variable that exists: create it in one response, and call FINAL_VAR in a later one.
Plan, then act at once in each response: run code rather than describe what you would do.\
"""

_NEXT_ACTION = (
    "Use the REPL (it holds the `context` variable) to work out the answer{target}. Write your next "
    "```repl``` block, or give your final answer."
)
_FIRST_TURN = (
    "You have not used the REPL or looked at the context yet: look through it and work out how to answer "
    "before giving a final answer.\n\n"
)
_LATER_TURN = "Above are your earlier steps in the REPL. "
NO_CODE_BLOCK_MESSAGE = "[No ```repl``` code block found. Wrap your code in ```repl\\n...\\n``` blocks.]"
MAX_OBSERVATION_CHARS = 20_000

# What SkyRL-gym reads with the regular expressions r"```repl[ \t]*\n(.*?)\n```",
# r"^\s*FINAL_VAR\((.*?)\)" and r"^\s*FINAL\((.*)\)\s*$" (MULTILINE, DOTALL), found in linear time: those
# searched from every opening to the end of the text, and their ^\s* from every line start over every blank
# line after it, so 100,000 newlines took 20 s and 1 MB hours of one core (holding the GIL) in every step.
# The scanners below give the same matches.
_REPL_OPEN = re.compile(r"```repl[ \t]*\n")
_LINE_START = r"^[^\S\n]*"  # ^\s* reaches a FINAL only from the start of its own line
_FINAL_VAR_OPEN = re.compile(_LINE_START + r"FINAL_VAR\(", re.MULTILINE)
_FINAL_OPEN = re.compile(_LINE_START + r"FINAL\(", re.MULTILINE)
_FINAL_CLOSE = re.compile(r"\)[^\S\n]*(?:\n|\Z)")  # a ")" with only spaces after it up to its line's end


def _blocks(text: str, opening: "re.Pattern[str]", closing: str) -> List[str]:
    """The bodies between each match of ``opening`` and the next ``closing`` after it, in order, as a lazy
    ``opening(.*?)closing`` (DOTALL) finds them, in linear time."""
    bodies: List[str] = []
    pos = 0
    while True:
        start = opening.search(text, pos)
        if start is None:
            return bodies
        end = text.find(closing, start.end())
        if end < 0:  # no later opening closes either
            return bodies
        bodies.append(text[start.end() : end])
        pos = end + len(closing)


def _final_text(text: str) -> Optional[str]:
    """The ``FINAL(...)`` answer: from the first ``FINAL(`` at a line's start to the last ``)`` that ends a
    line."""
    opening = _FINAL_OPEN.search(text)
    if opening is None:
        return None
    last_close = None
    for last_close in _FINAL_CLOSE.finditer(text, opening.end()):
        pass
    return None if last_close is None else text[opening.end() : last_close.start()]
_LISTED_TYPES = {"str", "int", "float", "bool", "list", "dict", "tuple"}


def build_user_prompt(root_prompt: Optional[str], iteration: int) -> Dict[str, str]:
    """The ephemeral instruction before the model's next turn."""
    target = f' to the original prompt: "{root_prompt}"' if root_prompt else ""
    lead = _FIRST_TURN if iteration == 0 else _LATER_TURN
    return {"role": "user", "content": lead + _NEXT_ACTION.format(target=target)}


def find_code_block(text: str) -> Optional[str]:
    """The last ```` ```repl ```` block of a response, stripped; ``None`` when there is none."""
    blocks = _blocks(text or "", _REPL_OPEN, "\n```")
    return blocks[-1].strip() if blocks else None


def find_final_answer(text: str, repl: Optional[PersistentREPL]) -> Optional[str]:
    """The answer given by the last ``FINAL_VAR(name)`` (read from the REPL) or, without one, ``FINAL(text)``."""
    names = _blocks(text or "", _FINAL_VAR_OPEN, ")")
    if names:
        if repl is None:
            return None
        name = names[-1].strip().strip("\"'")
        answer = repl.execute(f"print(FINAL_VAR({name!r}))").stdout.strip()
        if not answer or ("Variable '" in answer and "' not found" in answer and "FINAL_VAR" in answer):
            return None
        return answer
    final = _final_text(text or "")
    return final.strip() if final is not None else None


def format_execution_result(result: REPLResult) -> str:
    """What the model reads of a cell: stdout, stderr, and the names of its plain variables."""
    parts = []
    if result.stdout:
        parts.append("\n" + result.stdout)
    if result.stderr:
        parts.append("\n" + result.stderr)
    listed = [name for name, kind in result.var_types.items() if kind in _LISTED_TYPES and not name.startswith("_")]
    if not result.var_types:  # a cell that failed: list what the snapshot holds
        listed = [n for n, v in result.locals.items() if not n.startswith("_") and isinstance(v, (str, int, float, bool, list, dict, tuple))]
    if listed:
        parts.append(f"REPL variables: {listed}\n")
    return "\n\n".join(parts) if parts else "No output"


def format_context_metadata(context_payload: Any) -> str:
    """The first user message: the context's type, total size and the size of each chunk."""
    if isinstance(context_payload, str):
        kind, lengths = "str", [len(context_payload)]
    elif isinstance(context_payload, dict):
        kind, lengths = "dict", []
        for chunk in context_payload.values():
            if isinstance(chunk, str):
                lengths.append(len(chunk))
            else:
                try:
                    lengths.append(len(json.dumps(chunk, default=str)))
                except (TypeError, ValueError):
                    lengths.append(len(repr(chunk)))
    elif isinstance(context_payload, list):
        kind, lengths = "list", [len(str(chunk)) for chunk in context_payload]
    else:
        kind, lengths = type(context_payload).__name__, [len(repr(context_payload))]
    return (
        f"Your context is a {kind} with {sum(lengths)} total characters, "
        f"and is broken up into chunks of char lengths: {lengths}."
    )


def format_tools_for_prompt(custom_tools: Optional[Dict[str, Any]]) -> Optional[str]:
    lines = []
    for name, value, description in iter_tool_entries(custom_tools):
        default = "A custom function" if callable(value) else f"A custom {type(value).__name__} value"
        lines.append(f"- `{name}`: {description or default}")
    return "\n".join(lines) or None


# SkyRL-gym's names of the helpers above.
_build_user_prompt = build_user_prompt
_find_code_block = find_code_block
_find_final_answer = find_final_answer
_format_execution_result = format_execution_result
_format_context_metadata = format_context_metadata
_format_tools_for_prompt = format_tools_for_prompt


class BaseRLMEnv(BaseTextEnv):
    """Base class of RLM environments. Override ``_get_reward(final_answer)`` (default: 1.0 for any
    non-empty answer), ``_get_system_prompt()`` (may contain ``{custom_tools_section}``) and
    ``_get_repl_tools()`` (``{name: callable_or_value}``, called once ``self._context`` is set)."""

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        extras = self.extras
        self.max_turns = row_turn_limit(extras, 10, "rlm")
        self.lm_callback = extras.get("lm_callback")
        self.subcall_fn = extras.get("subcall_fn")
        self.depth = int(extras.get("depth", 0) or 0)
        self.repl: Optional[PersistentREPL] = None
        self._context: Any = None
        self._root_prompt: Optional[str] = None
        self._tools: Dict[str, Any] = {}
        self._final_answer: Optional[str] = None
        self._reward = 0.0
        self._turn_index = 0
        self._chat_history_ref: Optional[ConversationType] = None

    # ----- hooks ------------------------------------------------------------------------------------------
    def _get_reward(self, final_answer: str) -> float:
        """Score a final answer (called only when there is one). Subclasses should override."""
        return 1.0 if final_answer else 0.0

    def _get_system_prompt(self) -> str:
        return DEFAULT_RLM_SYSTEM_PROMPT

    def _get_repl_tools(self) -> Dict[str, Any]:
        return {}

    # ----- episode ----------------------------------------------------------------------------------------
    def _sandbox_config(self) -> Optional[Dict[str, Any]]:
        from skyrl_gym.envs._code_sandbox import config_dict

        settings = config_dict(self.env_config).get("sandbox")
        return dict(settings) if isinstance(settings, dict) else None

    def init(self, prompt: ConversationType = None) -> Tuple[ConversationType, Dict[str, Any]]:  # type: ignore[override]
        prompt = prompt or []
        root_prompt = "\n".join(str(m["content"]) for m in prompt if m.get("content"))
        extra_info = self.extras.get("extra_info") or {}
        context_payload = (extra_info.get("context_text") if isinstance(extra_info, dict) else None) or root_prompt
        if isinstance(context_payload, str):
            try:
                decoded = json.loads(context_payload)
            except ValueError:
                decoded = None
            if isinstance(decoded, dict):
                context_payload = decoded
        self._root_prompt = root_prompt
        self._context = context_payload
        self._tools = self._get_repl_tools() or {}
        self.close()
        self.repl = PersistentREPL(
            timeout=float(self.extras.get("repl_timeout", 180.0)),
            custom_tools=self._tools,
            lm_callback=self.lm_callback,
            subcall_fn=self.subcall_fn,
            sandbox_config=self._sandbox_config(),
        )
        self.repl.add_context(context_payload, context_index=0)
        self._turn_index = 0
        messages = [
            {"role": "system", "content": self._build_system_prompt()},
            {"role": "user", "content": format_context_metadata(context_payload)},
            build_user_prompt(root_prompt, iteration=0),
        ]
        self._chat_history_ref = messages
        return messages, {}

    def _build_system_prompt(self) -> str:
        section = ""
        if self.lm_callback is not None:
            section += (
                "\n4. Language-model functions in the REPL:\n"
                "- `llm_query(prompt)`: one direct LLM call, returns str\n"
                "- `llm_query_batched(prompts)`: several LLM calls at once, returns list[str]\n"
                "- `rlm_query(prompt)`: a recursive call that starts a child agent with its own REPL, returns str\n"
                "- `rlm_query_batched(prompts)`: several recursive calls run in parallel, returns list[str]"
            )
        tools = format_tools_for_prompt(self._tools) if self._tools else None
        if tools:
            number = 5 if self.lm_callback is not None else 4
            section += f"\n{number}. Custom tools and data in the REPL:\n{tools}"
        return self._get_system_prompt().replace("{custom_tools_section}", section)

    def step(self, action: str) -> StepOutput:
        if self.repl is None:
            raise RuntimeError(f"{type(self).__name__}.step() was called before init(prompt)")
        if not isinstance(action, str):
            action = "" if action is None else str(action)
        self.turns += 1
        self._turn_index += 1
        if self._chat_history_ref:  # drop the previous turn's ephemeral instruction
            self._chat_history_ref.pop()
        done = self.turns >= self.max_turns
        code = find_code_block(action)
        if code is None:
            return self._output([{"role": "user", "content": NO_CODE_BLOCK_MESSAGE}], done)
        result = self.repl.execute(code)
        final_answer = result.final_answer or find_final_answer(action, self.repl)
        if final_answer is not None:
            self._final_answer = final_answer
            self._reward = float(self._get_reward(final_answer))
            return self._output([], True)
        if done:
            return self._output([], True)
        text = format_execution_result(result)
        if len(text) > MAX_OBSERVATION_CHARS:
            text = text[:MAX_OBSERVATION_CHARS] + f"... + [{len(text) - MAX_OBSERVATION_CHARS} chars...]"
        observation = f"Code executed:\n```python\n{code}\n```\n\nREPL output:\n{text}"
        return self._output([{"role": "user", "content": observation}], False)

    def _output(self, observations: List[Dict[str, str]], done: bool) -> StepOutput:
        if not done:
            observations = observations + [build_user_prompt(self._root_prompt, self._turn_index)]
        return StepOutput(observations=observations, reward=self._reward if done else 0.0, done=done, metadata={})

    def get_metrics(self) -> Dict[str, Any]:
        return {
            "turns_used": self.turns,
            "final_value_set": self._final_answer is not None,
            "final_answer": self._final_answer,
            "reward": self._reward,
        }

    def close(self) -> None:
        if self.repl is not None:
            self.repl.cleanup()
            self.repl = None
