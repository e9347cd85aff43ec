"""Tools for the ReAct example: a calculator, and a word counter that runs sandboxed.

A sandboxed tool runs in a child process that imports it by ``module:qualname``,
so it lives at the top level of an importable module like this package (next to
``examples/react_agent.py``, which imports it).
"""

from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING

from arkhon_rheo.tools import Sandbox, Toolbox, tool

if TYPE_CHECKING:
    from collections.abc import Callable

_OPERATORS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.operand)))
    raise ValueError("only numbers and + - * / ** are allowed")


@tool
async def calculate(expression: str) -> float:
    """Evaluate an arithmetic expression.

    Args:
        expression: Numbers with + - * / ** and parentheses, like "(2 + 3) * 4".
    """
    return _evaluate(ast.parse(expression, mode="eval"))


@tool(sandbox=Sandbox(cpu_seconds=5, memory_bytes=512 << 20), timeout=30)
def count_words(text: str) -> int:
    """Count the words of a text (runs in a sandboxed subprocess).

    Args:
        text: The text.
    """
    return len(text.split())


TOOLS = Toolbox(calculate, count_words)
