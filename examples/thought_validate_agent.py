"""A Validate step on any agent: ``react_agent(checks=Checks(rules=...))``.

Every proposal of the model (its thought with its tool calls, or its answer)
goes through the rules before it is committed: a `Retryable` violation goes
back to the model as the observation of each call it made (or, for an answer,
as a message), at most three times in a row; a `Terminal` one ends the agent
(``StopReason.VIOLATION``) with nothing run. Each rule's result is in the
step's recorded patch (``state.checks``), so a re-executing replay checks
them again.

Offline it runs two scenarios on a scripted model: a retry that the model
corrects, and a blocked function that ends the run; with ``OPENAI_BASE_URL``
set, the first asks that server. Run it with
``python examples/thought_validate_agent.py [asyncio|trio]``. The
machine built by hand is tests/scenarios/thought_validate_machine.py.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from arkhon_rheo import AgentSystem
from arkhon_rheo.protocols import ModelClient, ToolCall, ToolMessage, UserMessage
from arkhon_rheo.react import Checks, Proposal, ReactState, react_agent
from arkhon_rheo.rules import PASS, Retryable, RuleSet, Terminal, Verdict, rule
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Toolbox, tool

FACTS = {"speed of light": "299792 km/s", "moon distance": "384400 km"}


@tool
def search(query: str) -> str:
    """Look a fact up."""
    return FACTS.get(query.lower(), f"no result for {query!r}")


@tool
def calculator(expression: str) -> str:
    """Add, subtract, multiply and divide numbers, like ``384400 / 299792``."""
    if not set(expression) <= set("0123456789.+-*/() "):
        raise ValueError(f"only numbers and + - * / ( ) are allowed, got {expression!r}")
    return f"{eval(expression, {'__builtins__': {}}):.4g}"  # checked: arithmetic only


TOOLS = Toolbox(search, calculator)
BLOCKED = ("eval", "exec", "__import__")


# -- the rules (invalid input → retry; rule violation → terminate) ----


@rule
def known_tool(step: Proposal) -> Verdict:
    names = [spec.name for spec in TOOLS.specs]
    unknown = [c.name for c in step.tool_calls if c.name not in names]
    return Retryable(f"unknown tool {unknown[0]!r}; use one of {names}") if unknown else PASS


@rule
def no_blocked_functions(step: Proposal) -> Verdict:
    for call in step.tool_calls:
        for name in BLOCKED:
            if name in call.arguments:
                return Terminal(f"blocked function {name!r} in the tool input")
    return PASS


@rule
def answer_has_units(step: Proposal) -> Verdict:
    if step.answer is not None and "second" not in step.answer:
        return Retryable("say the answer in seconds")
    return PASS


RULES = RuleSet(known_tool, no_blocked_functions, answer_has_units)
GOAL = "How long does light take to reach the moon?"


def _call(name: str, n: int, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c{n}", name=name, arguments=json.dumps(arguments))


SCENARIOS: dict[str, list[Any]] = {
    "retry": [
        _call("wikipedia", 1, query="moon distance"),  # unknown: retryable
        [_call("search", 2, query="moon distance"), _call("search", 3, query="speed of light")],
        _call("calculator", 4, expression="384400 / 299792"),
        "About 1.28.",  # no unit: retryable
        "About 1.28 seconds.",
    ],
    "terminal": [_call("calculator", 1, expression="__import__('os').getcwd()")],
}


async def run(system: AgentSystem, scenario: str, model: ModelClient) -> None:
    agent = react_agent(model, TOOLS, checks=Checks(rules=RULES))
    result = await system.run(agent, ReactState(task=GOAL), session_id=scenario)
    state = result.state
    print(f"{scenario}:")
    for message in state.messages[2:]:
        if isinstance(message, ToolMessage):
            print(f"  {message.name}: {message.content}")
        elif isinstance(message, UserMessage):
            print(f"  told: {message.content}")
    checks = ", ".join(f"{r.rule} {r.outcome}" for r in state.checks)
    print(f"  last checks: {checks}")
    violation = f"; violation: {state.violation.reason}" if state.violation else ""
    exit = state.exit.value if state.exit else None
    print(f"  exit: {exit}; answer: {state.answer}{violation}")
    offline = react_agent(ScriptedModel([]), TOOLS, checks=Checks(rules=RULES))
    report = await system.stored(offline, scenario).replay(reexecute=True)
    print(f"  replay without the model: {'ok' if report.ok else report.divergence}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with AgentSystem(path=Path(folder) / "validate.db") as system:
            if os.environ.get("OPENAI_BASE_URL"):
                from arkhon_rheo.models import OpenAIChatClient

                await run(system, "retry", OpenAIChatClient())
                return
            for scenario, script in SCENARIOS.items():
                await run(system, scenario, ScriptedModel(script))


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
