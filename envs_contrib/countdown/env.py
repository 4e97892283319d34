"""The Countdown numbers game as a single-turn env.

The model answers with an arithmetic expression in ``<answer>…</answer>`` that uses each given
number exactly once. The expression is evaluated with a small AST walker (never ``eval``).
"""

from __future__ import annotations

import ast
import operator
from fractions import Fraction
from typing import Any, Dict, List, Optional

from skyrl_gym import BaseTextEnv, StepOutput, threadsafe_ast
from skyrl_gym.errors import DataError
from skyrl_gym.tools.parsers import extract_tag

FORMAT_REWARD = 0.1  # a well-formed expression that misses the target
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
MAX_EXPRESSION_CHARS = 200


class ExpressionError(ValueError):
    pass


def evaluate(expression: str) -> tuple[Fraction, List[int]]:
    """Exact value of an expression of integers, + - * / and parentheses, and the integers it uses."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ExpressionError("expression too long")
    try:
        tree = threadsafe_ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not an arithmetic expression: {exc.msg}") from exc
    numbers: List[int] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            numbers.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ExpressionError("division by zero")
            return _OPERATORS[type(node.op)](left, right)
        raise ExpressionError(f"only integers, + - * / and parentheses are allowed, not {type(node).__name__}")

    return walk(tree), numbers


class CountdownEnv(BaseTextEnv):
    """Countdown numbers game: 1.0 for an expression hitting the target with each number once."""

    config_defaults: Dict[str, Any] = {}  # it reads no env_config key

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        spec = (extras or {}).get("reward_spec") or {}
        truth = spec.get("ground_truth")
        if not isinstance(truth, dict) or "target" not in truth or "numbers" not in truth:
            raise DataError("env 'countdown': reward_spec.ground_truth must be {'target': int, 'numbers': [int, ...]}")
        self.target = int(truth["target"])
        self.numbers = sorted(int(n) for n in truth["numbers"])

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        expression = extract_tag(action if isinstance(action, str) else "", "answer")
        metadata: Dict[str, Any] = {"expression": expression}
        reward = 0.0
        if expression is None:
            metadata["reason"] = "no <answer>…</answer> block"
        else:
            try:
                value, used = evaluate(expression)
            except ExpressionError as exc:
                metadata["reason"] = str(exc)
            else:
                metadata["value"] = str(value)
                if sorted(used) != self.numbers:
                    metadata["reason"] = f"must use each of {self.numbers} exactly once, used {sorted(used)}"
                    reward = FORMAT_REWARD
                elif value != self.target:
                    metadata["reason"] = f"evaluates to {value}, not {self.target}"
                    reward = FORMAT_REWARD
                else:
                    reward = 1.0
        return StepOutput(observations=[], reward=reward, done=True, metadata=metadata)
