"""A global round budget on any agent: ``react_agent(limits=Limits(budget=GlobalBudget(...)))``.

Each model turn is a decision round, each tool call counts, and a turn that
calls tools spends a round of their strategy (explore, exploit or render; the
`GlobalBudget` says which tool is which). At the hard gate (no decision round
or no tool call left) the agent may go on with exploit-only rounds while
exploit rounds remain (the exploit overdraft); a non-exploit call then is
blocked (``exploit_overdraft_blocked``). Then comes one wrap-up turn without
tools, whose reply is the answer (``StopReason.BUDGET_EXHAUSTED``). The model
sees a ``BUDGET_STATE`` line every turn; the counters live in the
state (``state.decisions``), so they survive a resume and replay exactly.

Offline it runs two scenarios on a scripted model (an overdraft used well,
and one blocked); with ``OPENAI_BASE_URL`` set, the first asks that server.
Run it with ``python examples/budgeted_decision_agent.py [asyncio|trio]``. A
whole decision machine (contract slots, artifacts, every exit reason), built by
hand, is examples/decision_agent.py.
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
from arkhon_rheo.protocols import ModelClient, SystemMessage, ToolCall, ToolMessage
from arkhon_rheo.react import GlobalBudget, Limits, ReactState, RoundBudget, react_agent
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import tool

PAGES = {"https://example.org/paris": "Paris has 2102650 inhabitants (2023)."}


@tool
async def web_search(query: str) -> list[str]:
    """Search the web; the URLs of the pages found."""
    return [url for url in PAGES if any(w in url for w in query.lower().split())]


@tool
async def fetch_page(url: str) -> str:
    """The text of a page."""
    return PAGES.get(url, "404")


@tool
async def calculate(a: int, b: int) -> int:
    """a divided by b, rounded down."""
    return a // b


BUDGET = GlobalBudget(
    RoundBudget(
        max_decision_rounds=3,
        max_tool_calls=5,
        max_explore_rounds=3,
        max_exploit_rounds=2,
        max_render_rounds=1,
        max_decision_reruns=1,
        ctx_reads=2,
    ),
    strategies={"web_search": "explore", "fetch_page": "explore", "calculate": "exploit"},
)
TOOLS = [web_search, fetch_page, calculate]
TASK = "How many thousands of people live in Paris?"


def _call(name: str, n: int, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c{n}", name=name, arguments=json.dumps(arguments))


SCENARIOS: dict[str, list[Any]] = {
    "overdraft": [
        _call("web_search", 1, query="paris"),
        _call("fetch_page", 2, url="https://example.org/paris"),
        _call("calculate", 3, a=2102650, b=1000),  # the last decision round
        _call("calculate", 4, a=2102650, b=10000),  # an exploit overdraft round
        "About 2102 thousand people live in Paris.",  # the wrap-up turn
    ],
    "blocked": [
        _call("web_search", 1, query="paris"),
        _call("fetch_page", 2, url="https://example.org/paris"),
        _call("calculate", 3, a=2102650, b=1000),
        _call("web_search", 4, query="paris suburbs"),  # explore in the overdraft: blocked
        "About 2102 thousand (Paris proper).",
    ],
}


async def run(system: AgentSystem, scenario: str, model: ModelClient) -> None:
    agent = react_agent(model, TOOLS, limits=Limits(budget=BUDGET))
    result = await system.run(agent, ReactState(task=TASK), session_id=scenario)
    state = result.state
    print(f"{scenario}:")
    for request in getattr(model, "requests", ()):
        line = request.messages[-1]
        if isinstance(line, SystemMessage) and line.content:
            tools = ", ".join(spec.name for spec in request.tools) or "none"
            print(f"  tools: {tools}\n      {line.content}")
    for message in state.messages:
        if isinstance(message, ToolMessage):
            print(f"  {message.name}: {message.content}")
    exit = state.exit.value if state.exit else None
    print(f"  exit: {exit}; answer: {state.answer}")
    offline = react_agent(ScriptedModel([]), TOOLS, limits=Limits(budget=BUDGET))
    report = await system.stored(offline, scenario).replay(reexecute=True)
    print(f"  replay without the model: {'ok' if report.ok else report.divergence}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with AgentSystem(path=Path(folder) / "budget.db") as system:
            if os.environ.get("OPENAI_BASE_URL"):
                from arkhon_rheo.models import OpenAIChatClient

                await run(system, "overdraft", OpenAIChatClient())
                return
            for scenario, script in SCENARIOS.items():
                await run(system, scenario, ScriptedModel(script))


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
