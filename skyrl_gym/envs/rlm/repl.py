"""``PersistentREPL``: a Python REPL whose variables persist across ``execute`` calls, with the model's code
run in a sandbox (:mod:`skygym_sandboxes`), never in this process.

SkyRL-gym's REPL (same name, arguments and results) ``exec``s the model's code in the trainer's own
process behind a reduced set of builtins. Here every ``execute`` is one or more sandboxed runs of a small
program (:mod:`._program`):

* **State** carries over as a pickle that the sandboxed program writes at the end of a cell and reads at
  the start of the next. The host keeps it as opaque bytes and never unpickles it. Functions and classes
  the model defines are pickled by value (code objects), so they persist too. A value that cannot be
  pickled (a generator, a frame, an open file) is not carried to the next cell; the cell's result says so
  on stderr. A cell that raises or times out leaves the state as it was before the cell (SkyRL-gym also
  keeps no new variable from a failed cell).
* **Host functions** (``llm_query``, ``llm_query_batched``, ``rlm_query``, ``rlm_query_batched`` and the
  callables of ``custom_tools``) run here, in the host, where the model and the env's data are. In the
  sandbox they are stubs: a call whose answer is not known yet stops the cell, the host computes the
  answer, and the cell runs again from its starting state with the answers so far, replaying up to that
  call and going on. Calls are matched by position and by their arguments, so a cell is replayed
  faithfully when it is deterministic, which code without ``__import__`` nearly always is. Arguments and
  answers cross as Python literals (``repr``/``ast.literal_eval``) towards the host and as pickles from it.
* **Builtins**: all of Python's, except ``__import__``, ``open``, ``input``, ``eval``, ``exec``,
  ``compile``, ``globals``, ``locals`` and ``breakpoint``, which are ``None`` as in SkyRL-gym (so
  ``import x`` fails with the same ``TypeError``). SkyRL-gym allows a shorter list of names.
* **Time**: ``timeout`` bounds a whole ``execute`` (sandboxed runs and host calls together).

``locals`` is a snapshot: values that are Python literals (up to ``max_literal_chars`` of ``repr``) come
back as themselves, other values as :class:`SandboxValue` (their type name and a short ``repr``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from skyrl_gym import threadsafe_ast
from skyrl_gym.envs.rlm._program import PROGRAM

# Names restored in the REPL before and after every cell, so the model cannot rebind them for good.
RESERVED_TOOL_NAMES: frozenset = frozenset(
    {"FINAL_VAR", "SHOW_VARS", "context", "llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched"}
)
BLOCKED_BUILTINS: Tuple[str, ...] = (
    "__import__", "open", "input", "eval", "exec", "compile", "globals", "locals", "breakpoint",
)
LM_FUNCTIONS: Tuple[str, ...] = ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched")
MAX_STATE_BYTES = 48 * 1024 * 1024


@dataclass
class SandboxValue:
    """A REPL variable that is not a Python literal: it stays in the sandbox; here are its type and repr."""

    type_name: str
    preview: str = ""

    def __repr__(self) -> str:
        return f"<{self.type_name} in the REPL sandbox>"


@dataclass
class REPLResult:
    stdout: str
    stderr: str
    locals: Dict[str, Any]  # snapshot of the REPL's variables after the cell
    final_answer: Optional[str]  # set when the cell called FINAL_VAR
    var_types: Dict[str, str] = field(default_factory=dict)  # every user variable's type name


def iter_tool_entries(custom_tools: Optional[Mapping[str, Any]]) -> Iterator[Tuple[str, Any, Optional[str]]]:
    """``(name, callable_or_value, description)`` of each custom tool, given as ``{name: value}`` or
    ``{name: {"tool": value, "description": "..."}}``."""
    for name, entry in (custom_tools or {}).items():
        if isinstance(entry, dict) and "tool" in entry:
            description = entry.get("description")
            yield name, entry["tool"], description if isinstance(description, str) else None
        else:
            yield name, entry, None


_iter_tool_entries = iter_tool_entries  # SkyRL-gym's name


def _encode(value: Any) -> Tuple[Optional[bytes], str]:
    """A value for the sandbox: its pickle (made here, trusted) and its text, used when unpickling fails there."""
    if isinstance(value, str):
        return None, value
    try:
        blob: Optional[bytes] = pickle.dumps(value, protocol=4)
    except Exception:
        blob = None
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return blob, text


def _decode(text: Any) -> Any:
    """A Python literal sent by the sandbox (untrusted): ``ast.literal_eval`` only; otherwise the text itself."""
    if not isinstance(text, str):
        return text
    try:
        return threadsafe_ast.literal_eval(text)
    except Exception:  # not a literal (an object's repr), too deep, ...
        return text


def parse_child_result(result: Any) -> Any:
    """A child agent's answer (a string) as a Python object when it is a literal (``"[1, 2]"`` -> list)."""
    if not isinstance(result, str):
        return result
    try:
        return threadsafe_ast.literal_eval(result)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return result


@dataclass
class _PendingCall:
    index: int
    name: str
    key: str
    args: List[Any]
    kwargs: Dict[str, Any]


def _pending_call(call: Any, answered: int) -> Optional[_PendingCall]:
    """The host-function call a cell's report asks for, or ``None`` when the report is malformed. The
    report is the sandbox's, so the cell's code may have written it: its fields are checked, never trusted."""
    if not isinstance(call, dict):
        return None
    index, args, kwargs = call.get("index", answered), call.get("args", []), call.get("kwargs") or {}
    if type(index) is not int or not 0 <= index <= answered:
        return None
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    return _PendingCall(
        index=index, name=str(call.get("name")), key=str(call.get("key")), args=[_decode(a) for a in args],
        kwargs={str(k): _decode(v) for k, v in kwargs.items()},
    )


class PersistentREPL:
    """A REPL whose variables persist across :meth:`execute` calls; the code runs in a sandbox.

    ``lm_callback(prompts) -> responses`` enables ``llm_query``/``llm_query_batched`` (and ``rlm_query``,
    which uses ``subcall_fn(prompt, context=...)`` when given, else ``llm_query``). ``custom_tools``:
    callables run on the host when the REPL calls them; other values become REPL variables.
    ``sandbox``: any :class:`skygym_sandboxes.Sandbox`; by default the shared warm local one
    (``sandbox_config`` picks another, as an env's ``env_config["sandbox"]`` does).
    """

    def __init__(
        self,
        timeout: float = 15.0,
        custom_tools: Optional[Dict[str, Any]] = None,
        lm_callback: Optional[Callable[[List[str]], List[str]]] = None,
        subcall_fn: Optional[Callable[..., str]] = None,
        sandbox: Any = None,
        sandbox_config: Optional[Mapping[str, Any]] = None,
        max_host_calls: int = 256,
        max_literal_chars: int = 65536,
        max_parallel_subcalls: int = 2,
    ) -> None:
        self.timeout = float(timeout)
        self.custom_tools: Dict[str, Any] = dict(custom_tools or {})
        self.lm_callback = lm_callback
        self.subcall_fn = subcall_fn
        self.max_host_calls = int(max_host_calls)
        self.max_literal_chars = int(max_literal_chars)
        self.max_parallel_subcalls = max(1, int(max_parallel_subcalls))
        self._sandbox = sandbox
        self._sandbox_config = dict(sandbox_config) if sandbox_config else None
        self._validate_custom_tools()
        self.setup()

    # ----- setup / teardown -------------------------------------------------------------------------
    def setup(self) -> None:
        """Fresh state: the scaffold in ``globals``, the custom tool values in ``locals``."""
        self.globals: Dict[str, Any] = {"FINAL_VAR": self._final_var, "SHOW_VARS": self._show_vars}
        if self.lm_callback is not None:
            self.globals.update(
                llm_query=self._llm_query, llm_query_batched=self._llm_query_batched,
                rlm_query=self._rlm_query, rlm_query_batched=self._rlm_query_batched,
            )
        self.locals: Dict[str, Any] = {}
        self._values: Dict[str, Any] = {}
        for name, value, _ in iter_tool_entries(self.custom_tools):
            if callable(value):
                self.globals[name] = value
            else:
                self._values[name] = value
                self.locals[name] = value
        self._contexts: Dict[str, Any] = {}
        self._state: Optional[bytes] = None
        self._var_types: Dict[str, str] = {}

    def cleanup(self) -> None:
        self._state = None
        for attr in ("globals", "locals", "_contexts", "_values"):
            if hasattr(self, attr):
                getattr(self, attr).clear()

    def __del__(self) -> None:
        self.cleanup()

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            from skygym_sandboxes import shared_sandbox

            self._sandbox = shared_sandbox(self._sandbox_config)
        return self._sandbox

    def _validate_custom_tools(self) -> None:
        clashes = sorted(set(self.custom_tools) & RESERVED_TOOL_NAMES)
        if clashes:
            raise ValueError(
                f"Custom tools cannot override reserved REPL names: {clashes}. Reserved: {sorted(RESERVED_TOOL_NAMES)}"
            )

    # ----- context ------------------------------------------------------------------------------------
    def add_context(self, context_payload: Any, context_index: int = 0) -> None:
        """Bind ``context_<index>`` (and ``context`` for index 0) in the REPL."""
        name = f"context_{context_index}"
        self._contexts[name] = context_payload
        self.locals[name] = context_payload
        if context_index == 0:
            self.locals["context"] = context_payload

    # ----- scaffold functions, as the host sees them ----------------------------------------------------
    def _final_var(self, variable_name: Any) -> str:
        """The host-side view of ``FINAL_VAR`` (the REPL's own runs in the sandbox): a variable's value as text."""
        if not isinstance(variable_name, str):
            return str(variable_name)
        name = variable_name.strip().strip("\"'")
        if name in self.locals:
            return str(self.locals[name])
        return f"Error: Variable '{name}' not found. Available variables: {sorted(self._var_types)}."

    def _show_vars(self) -> str:
        if not self._var_types:
            return "No variables created yet. Use ```repl``` blocks to create variables."
        return f"Available variables: {self._var_types}"

    def _llm_query(self, prompt: str, model: Optional[str] = None) -> str:
        try:
            return self.lm_callback([prompt])[0]  # type: ignore[misc]
        except Exception as exc:
            return f"Error: LM query failed - {exc}"

    def _llm_query_batched(self, prompts: List[str], model: Optional[str] = None) -> List[str]:
        try:
            return list(self.lm_callback(list(prompts)))  # type: ignore[misc]
        except Exception as exc:
            return [f"Error: LM query failed - {exc}"] * len(prompts)

    def _rlm_query(self, prompt: str, model: Optional[str] = None, context: Any = None) -> Any:
        if self.subcall_fn is None:
            return self._llm_query(prompt, model)
        try:
            return parse_child_result(self.subcall_fn(prompt, context=context))
        except Exception as exc:
            return f"Error: RLM query failed - {exc}"

    def _rlm_query_batched(
        self, prompts: List[str], model: Optional[str] = None, context_list: Optional[List[Any]] = None
    ) -> List[Any]:
        if self.subcall_fn is None:
            return self._llm_query_batched(prompts, model)
        contexts = list(context_list) if context_list is not None else [None] * len(prompts)
        if len(contexts) != len(prompts):
            return [f"Error: RLM query failed - context_list has {len(contexts)} items for {len(prompts)} prompts"] * len(prompts)
        if len(prompts) <= 1:
            return [self._rlm_query(p, model, context=c) for p, c in zip(prompts, contexts)]
        with ThreadPoolExecutor(max_workers=min(self.max_parallel_subcalls, len(prompts))) as pool:
            return list(pool.map(lambda pc: self._rlm_query(pc[0], model, context=pc[1]), zip(prompts, contexts)))

    def _restore_scaffold(self) -> None:
        """Kept for SkyRL-gym's callers: the host-side names never change (the sandbox rebinds its own)."""

    # ----- execution -----------------------------------------------------------------------------------
    def execute(self, code: str) -> REPLResult:
        """Run one cell; its variables are there for the next. Never raises for what the code does."""
        deadline = time.monotonic() + self.timeout
        answers: List[Tuple[str, Tuple[Optional[bytes], str]]] = []
        for _ in range(self.max_host_calls + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._failed("", f"Timeout after {int(self.timeout)} seconds\n")
            outcome = self._run_round(code, answers, remaining)
            if isinstance(outcome, REPLResult):
                return outcome
            del answers[outcome.index:]  # a replay that called differently from here on: answer afresh
            answers.append((outcome.key, _encode(self._answer(outcome))))
        return self._failed("", f"Error: the cell made more than {self.max_host_calls} calls to host functions\n")

    def _answer(self, call: _PendingCall) -> Any:
        function = self.globals.get(call.name)
        if function is None or call.name in ("FINAL_VAR", "SHOW_VARS"):
            return f"Error: {call.name} is not available in this REPL"
        try:
            return function(*call.args, **call.kwargs)
        except Exception as exc:  # a custom tool that raised: the REPL code gets the error text
            return f"Error: {call.name} failed - {type(exc).__name__}: {exc}"

    def _host_payload(self, answers: List[Any]) -> bytes:
        return pickle.dumps(
            {
                "blocked": list(BLOCKED_BUILTINS),
                "reserved": sorted(RESERVED_TOOL_NAMES),
                "callables": sorted(n for n in self.globals if n not in ("FINAL_VAR", "SHOW_VARS")),
                "values": {name: _encode(value) for name, value in self._values.items()},
                "contexts": {name: _encode(value) for name, value in self._contexts.items()},
                "answers": answers,
                "max_literal_chars": self.max_literal_chars,
            },
            protocol=4,
        )

    def _run_round(self, code: str, answers: List[Any], remaining: float) -> Any:
        from skygym_sandboxes import RunRequest

        files: Dict[str, Any] = {"cell.py": code, "host.pkl": self._host_payload(answers)}
        if self._state is not None:
            files["state.pkl"] = self._state
        sandbox = self.sandbox
        limits = sandbox.limits.replace(
            wall_s=max(remaining, 0.5), cpu_s=max(remaining, 0.5), output_bytes=64 * 1024 * 1024, file_size_mb=64
        )
        request = RunRequest(code=PROGRAM, files=files, fetch_files=["result.json", "state.pkl"], limits=limits)
        try:
            run = sandbox.run(request)
        except Exception as exc:  # a sandbox that cannot start is reported, not raised
            return self._failed("", f"Error: the REPL sandbox is unavailable ({type(exc).__name__}: {exc})\n")
        status = str(run.status)
        if status == "timeout":
            return self._failed(run.stdout, f"Timeout after {int(self.timeout)} seconds\n")
        report = self._report(run)
        if report is None:
            detail = run.message or f"exit code {run.exit_code}"
            return self._failed(run.stdout, (run.stderr or "") + f"\nError: the REPL process ended ({status}: {detail})\n")
        final_answer = report.get("final_answer")
        final_answer = final_answer if isinstance(final_answer, str) else None
        if report.get("status") == "call":
            call = _pending_call(report.get("call"), len(answers))
            if call is None:
                stderr = (run.stderr or "") + "\nError: the REPL process sent a malformed call\n"
                return self._failed(run.stdout, stderr)
            return call
        if report.get("status") != "done":
            return self._failed(run.stdout, run.stderr, final_answer)
        stderr = run.stderr or ""
        state = self._fetched(run, "state.pkl")
        digest = report.get("state_sha256")
        if state is None or hashlib.sha256(state).hexdigest() != digest or len(state) > MAX_STATE_BYTES:
            size = report.get("state_bytes")
            return self._failed(
                run.stdout, stderr + f"Error: the REPL variables ({size} bytes pickled) are too large to keep; "
                f"the limit is {MAX_STATE_BYTES} bytes. Delete large variables you no longer need.\n", final_answer,
            )
        self._state = state
        variables, dropped = report.get("vars") or {}, report.get("dropped") or []
        self._update_locals(variables if isinstance(variables, dict) else {})
        if isinstance(dropped, list) and dropped:
            kept_out = ", ".join(map(str, dropped))
            stderr += f"Note: these variables cannot be kept for the next cell (not picklable): {kept_out}\n"
        return REPLResult(stdout=run.stdout, stderr=stderr, locals=dict(self.locals), final_answer=final_answer,
                          var_types=dict(self._var_types))

    @staticmethod
    def _fetched(run: Any, name: str) -> Optional[bytes]:
        encoded = (run.files or {}).get(name)
        if encoded is None:
            return None
        try:
            return base64.b64decode(encoded)
        except ValueError:
            return None

    def _report(self, run: Any) -> Optional[Dict[str, Any]]:
        raw = self._fetched(run, "result.json")
        if raw is None:
            return None
        try:
            report = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):  # the cell's code may write the file itself
            return None
        return report if isinstance(report, dict) else None

    def _update_locals(self, variables: Mapping[str, Any]) -> None:
        snapshot: Dict[str, Any] = {}
        types: Dict[str, str] = {}
        for name, info in variables.items():
            if not isinstance(info, dict):
                continue
            types[name] = str(info.get("type"))
            snapshot[name] = SandboxValue(types[name])
            literal = info.get("literal")
            if isinstance(literal, str):
                try:
                    snapshot[name] = threadsafe_ast.literal_eval(literal)  # untrusted text: literals only
                except Exception:
                    pass
        self._var_types = types
        contexts = dict(self._contexts)
        if "context_0" in contexts:
            contexts["context"] = contexts["context_0"]
        self.locals = {**contexts, **snapshot}

    def _failed(self, stdout: str, stderr: str, final_answer: Optional[str] = None) -> REPLResult:
        """A cell that raised, timed out or could not run: the variables stay as before it."""
        return REPLResult(stdout=stdout or "", stderr=stderr or "", locals=dict(self.locals), final_answer=final_answer,
                          var_types=dict(self._var_types))

