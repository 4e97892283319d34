"""Procedural bug injection: small, local edits of a function's source, found with :mod:`ast`.

Each :class:`Mutation` replaces one span of a file's bytes (ast positions are UTF-8 byte offsets),
so the rest of the file, comments and formatting included, is untouched and the gold patch (the
reversal) is a one-hunk diff. The kinds, in the spirit of SWE-smith's procedural modifiers:

====================  ============================================================
``flip_compare``      ``<`` and ``<=``, ``>`` and ``>=``, ``==`` and ``!=``, ``in`` and ``not in``, ``is`` and ``is not``
``flip_boolean``      ``and`` and ``or``
``drop_condition``    ``a and b`` or ``a or b`` becomes ``a`` (a condition dropped)
``flip_arith``        ``+`` and ``-``, ``*`` and ``//`` (in binary operations)
``off_by_one``        an integer in an index, a slice, ``range()`` or arithmetic, plus or minus one
``change_constant``   ``True`` and ``False``; an integer compared against, plus one
``remove_statement``  an assignment, augmented assignment or call statement deleted from a block of several
``remove_branch``     an ``if`` without ``else`` deleted from a block of several
``remove_loop``       a ``for`` or ``while`` loop deleted from a block of several
``remove_wrapper``    ``list(x)``, ``sorted(x)``, ``int(x)``, ... of one argument becomes ``x``
``swallow_exception``  a ``raise`` becomes ``pass``
``swap_arguments``    the first two positional arguments of a call
``negate_if``         an ``if`` condition negated
``wrong_variable``    a local variable read where the function reads another one
====================  ============================================================

Each mutation records the size of its function (statements in it): :data:`MIN_FUNCTION_SIZE` keeps each
operator to functions with enough code that finding the changed line takes reading.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from skyrl_gym import threadsafe_ast

COMPARE_FLIPS = {
    ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"), ast.NotIn: ("not in", "in"),
    ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"),
}
ARITH_FLIPS = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"), ast.FloorDiv: ("//", "*")}
BOOL_FLIPS = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
KINDS = (
    "flip_compare", "flip_boolean", "drop_condition", "flip_arith", "off_by_one", "change_constant",
    "remove_statement", "remove_branch", "remove_loop", "remove_wrapper", "swallow_exception",
    "swap_arguments", "negate_if", "wrong_variable",
)
MIN_STATEMENTS = 4  # statements in the function, for every operator
# Removing code from a function of a few statements leaves too little to read: those need more.
MIN_FUNCTION_SIZE = {"remove_statement": 6, "remove_branch": 6, "remove_loop": 6}
WRAPPERS = {"list", "tuple", "sorted", "reversed", "set", "frozenset", "int", "str", "float", "abs", "bool", "dict"}


@dataclass(frozen=True)
class Mutation:
    path: str  # relative to the project root
    function: str  # qualified name of the enclosing function
    function_lines: Tuple[int, int]  # first line (decorators included) and the def line
    lineno: int
    kind: str
    start: int  # byte offsets of the replaced span
    end: int
    replacement: bytes
    description: str
    function_size: int = 0  # statements in the enclosing function

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.replacement + source[self.end :]

    @property
    def key(self) -> str:
        return f"{self.path}:{self.function}:{self.kind}:{self.start}"


class _Offsets:
    def __init__(self, source: bytes) -> None:
        self.source = source
        self.line_starts = [0]
        for index, byte in enumerate(source):
            if byte == 10:
                self.line_starts.append(index + 1)

    def at(self, lineno: int, col: int) -> int:
        return self.line_starts[lineno - 1] + col

    def span(self, node: ast.AST) -> Tuple[int, int]:
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def _between(offsets: _Offsets, left: ast.AST, right: ast.AST, token: str) -> Optional[Tuple[int, int]]:
    """The span of ``token`` (an operator) between two nodes, skipping parentheses and spaces."""
    start, end = offsets.span(left)[1], offsets.span(right)[0]
    gap = offsets.source[start:end]
    words = token.encode()
    position = gap.find(words)
    if position < 0 or b"#" in gap:
        return None
    if token.isalpha() or " " in token:  # a keyword: it must stand alone
        before = gap[position - 1 : position] if position else b" "
        after = gap[position + len(words) : position + len(words) + 1]
        if not (before in (b" ", b")", b"\n") and after in (b" ", b"(", b"\n")):
            return None
    if token in ("<", ">") and gap[position + 1 : position + 2] == b"=":
        return None
    if token == "*" and gap[position + 1 : position + 2] == b"*":
        return None
    return start + position, start + position + len(words)


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, source: bytes) -> None:
        self.path = path
        self.offsets = _Offsets(source)
        self.source = source
        self.stack: List[ast.AST] = []
        self.found: List[Mutation] = []
        self._local_names: Dict[int, frozenset] = {}

    # Only code inside functions: module-level code runs at import and breaks every test at once.
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.stack.append(node)
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stack.append(node)
        self.generic_visit(node)
        self.stack.pop()

    def _function(self) -> Optional[ast.AST]:
        for node in reversed(self.stack):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None

    def _add(self, node: ast.AST, kind: str, span: Optional[Tuple[int, int]], replacement: str, description: str) -> None:
        function = self._function()
        if function is None or span is None:
            return
        qualname = ".".join(getattr(item, "name", "?") for item in self.stack)
        first = min([function.lineno, *(d.lineno for d in function.decorator_list)])  # type: ignore[attr-defined]
        size = sum(isinstance(child, ast.stmt) for child in ast.walk(function)) - 1
        self.found.append(
            Mutation(
                self.path, qualname, (first, function.lineno), node.lineno, kind,  # type: ignore[attr-defined]
                span[0], span[1], replacement.encode(), description, size,
            )
        )

    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) == 1 and type(node.ops[0]) in COMPARE_FLIPS:
            old, new = COMPARE_FLIPS[type(node.ops[0])]
            span = _between(self.offsets, node.left, node.comparators[0], old)
            self._add(node, "flip_compare", span, new, f"`{old}` became `{new}`")
        for side in (node.left, *node.comparators):
            if _is_int(side):
                value = side.value  # type: ignore[attr-defined]
                self._add(side, "change_constant", self.offsets.span(side), str(value + 1), f"`{value}` became `{value + 1}`")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        if len(node.values) == 2:
            old, new = BOOL_FLIPS[type(node.op)]
            span = _between(self.offsets, node.values[0], node.values[1], old)
            self._add(node, "flip_boolean", span, new, f"`{old}` became `{new}`")
            first = self.offsets.span(node.values[0])
            text = self.source[first[0] : first[1]].decode()
            if "\n" not in text:
                self._add(node, "drop_condition", self.offsets.span(node), text, f"`{old}` and its right side were dropped")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) in ARITH_FLIPS and not _is_string_like(node):
            old, new = ARITH_FLIPS[type(node.op)]
            span = _between(self.offsets, node.left, node.right, old)
            self._add(node, "flip_arith", span, new, f"`{old}` became `{new}`")
        for side in (node.left, node.right):
            if _is_int(side):
                self._off_by_one(side)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        targets = [index] if _is_int(index) else [part for part in (getattr(index, "lower", None), getattr(index, "upper", None)) if _is_int(part)]
        for target in targets:
            self._off_by_one(target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in WRAPPERS and len(node.args) == 1 and not node.keywords \
                and not isinstance(node.args[0], ast.Starred):
            inner = self.offsets.span(node.args[0])
            text = self.source[inner[0] : inner[1]].decode()
            if "\n" not in text:
                self._add(node, "remove_wrapper", self.offsets.span(node), f"({text})", f"`{node.func.id}(...)` was dropped")
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            for arg in node.args:
                if _is_int(arg):
                    self._off_by_one(arg)
        positional = [arg for arg in node.args if not isinstance(arg, ast.Starred)]
        if len(node.args) >= 2 and len(positional) == len(node.args):
            first, second = node.args[0], node.args[1]
            a, b = self.offsets.span(first), self.offsets.span(second)
            text_a, text_b = self.source[a[0] : a[1]], self.source[b[0] : b[1]]
            if text_a != text_b and b"\n" not in self.source[a[0] : b[1]]:
                middle = self.source[a[1] : b[0]]
                replacement = (text_b + middle + text_a).decode()
                self._add(node, "swap_arguments", (a[0], b[1]), replacement, "the first two arguments were swapped")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, bool):
            self._add(node, "change_constant", self.offsets.span(node), str(not node.value), f"`{node.value}` became `{not node.value}`")
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        span = self.offsets.span(node.test)
        text = self.source[span[0] : span[1]]
        if b"\n" not in text:
            self._add(node, "negate_if", span, f"not ({text.decode()})", "an `if` condition was negated")
        self._remove_from(node.body)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        start, end = self.offsets.span(node)
        if node.exc is not None and b"\n" not in self.source[start:end]:
            self._add(node, "swallow_exception", (start, end), "pass", "a `raise` became `pass`")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        function = self._function()
        if function is not None and isinstance(node.ctx, ast.Load) and node.id in self._locals(function):
            others = sorted(self._locals(function) - {node.id})
            if others:
                other = others[sum(node.id.encode()) % len(others)]
                self._add(node, "wrong_variable", self.offsets.span(node), other, f"`{node.id}` became `{other}`")
        self.generic_visit(node)

    def _locals(self, function: ast.AST) -> frozenset:
        cached = self._local_names.get(id(function))
        if cached is None:
            args = function.args  # type: ignore[attr-defined]
            names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} - {"self", "cls"}
            names |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            cached = self._local_names[id(function)] = frozenset(names)
        return cached

    def generic_visit(self, node: ast.AST) -> None:
        body = getattr(node, "body", None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.While, ast.With)) and isinstance(body, list):
            self._remove_from(body)
        super().generic_visit(node)

    def _off_by_one(self, node: ast.AST) -> None:
        value = node.value  # type: ignore[attr-defined]
        new = value + 1 if value in (0, 1) or value < 0 else value - 1
        self._add(node, "off_by_one", self.offsets.span(node), str(new), f"`{value}` became `{new}`")

    def _remove_from(self, body: Sequence[ast.stmt]) -> None:
        if len(body) < 2 or self._function() is None:
            return
        for statement in body:
            if isinstance(statement, ast.If) and not statement.orelse:
                kind, what = "remove_branch", "an `if` block was removed"
            elif isinstance(statement, (ast.For, ast.While)) and not statement.orelse:
                kind, what = "remove_loop", "a loop was removed"
            elif isinstance(statement, (ast.Assign, ast.AugAssign)) or (
                isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)  # not docstrings or bare names
            ):
                kind, what = "remove_statement", "a statement was removed"
            else:
                continue
            start, end = self.offsets.span(statement)
            line_start = self.offsets.line_starts[statement.lineno - 1]
            if self.source[line_start:start].strip() or self.source[end : end + 1] not in (b"\n", b""):
                continue  # not alone on its lines (a `;` or a comment follows)
            self._add(statement, kind, (line_start, end + 1), "", what)


def _is_int(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < 10_000


def _is_string_like(node: ast.BinOp) -> bool:
    return any(isinstance(side, (ast.JoinedStr,)) or (isinstance(side, ast.Constant) and isinstance(side.value, (str, bytes))) for side in (node.left, node.right))


def find_mutations(path: str, source: bytes, validate: bool = True) -> List[Mutation]:
    """Every mutation of the kinds above in one file's functions, in source order; [] if it does not parse.
    ``validate`` parses each mutated file and keeps only those that parse (a full parse per mutation: the
    mechanical solver, which only compares bytes, skips it)."""
    try:
        tree = threadsafe_ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    finder = _Finder(path, source)
    finder.visit(tree)
    valid = []
    for mutation in sorted(finder.found, key=lambda m: (m.start, m.kind)):
        if not validate:
            valid.append(mutation)
            continue
        mutated = mutation.apply(source)
        if mutated == source:
            continue
        try:
            threadsafe_ast.parse(mutated)
        except (SyntaxError, ValueError):
            continue
        valid.append(mutation)
    return valid


def sample_mutations(mutations: Sequence[Mutation], seed: int, per_function: int = 1) -> Iterator[Mutation]:
    """Mutations in a seeded order that visits each function once before any function twice, so a
    limited build spreads over the code instead of piling up in the first file."""
    rng = random.Random(seed)
    by_function: Dict[Tuple[str, str], List[Mutation]] = {}
    for mutation in mutations:
        by_function.setdefault((mutation.path, mutation.function), []).append(mutation)
    groups = list(by_function.values())
    for group in groups:
        rng.shuffle(group)
    rng.shuffle(groups)
    for round_index in range(per_function):
        for group in groups:
            if round_index < len(group):
                yield group[round_index]


def balanced_mutations(
    mutations: Sequence[Mutation], seed: int, kept: Dict[str, int], per_function: int = 1
) -> Iterator[Mutation]:
    """Mutations one at a time, each of the operator ``kept`` least so far (ties: the one tried least), so the
    operators' shares are balanced after filtering rather than by how often each survives. Within an operator,
    the order of :func:`sample_mutations`. ``kept`` is read at every step (the caller updates it)."""
    queues: Dict[str, List[Mutation]] = {}
    for mutation in sample_mutations(mutations, seed, per_function):
        queues.setdefault(mutation.kind, []).append(mutation)
    for queue in queues.values():
        queue.reverse()  # pop() from the end gives the sampled order
    tried: Dict[str, int] = {kind: 0 for kind in queues}
    while any(queues.values()):
        kind = min((k for k, q in queues.items() if q), key=lambda k: (kept.get(k, 0), tried[k], KINDS.index(k)))
        tried[kind] += 1
        yield queues[kind].pop()
