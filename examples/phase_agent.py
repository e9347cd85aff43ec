"""Phases and stuck detection on any agent: ``react_agent(checks=Checks(stuck=...))``.

The agent moves INIT → SEARCHING → ANALYZING → DECIDING → FINISHING by the
action its model chooses (a search, the ``analyze`` and ``decide`` control
actions the engine offers, another tool, an answer). A move `PHASE_TRANSITIONS` forbids
(SEARCHING → DECIDING: analyse first) is not made: by the policy, the model is
told the moves it may make (``soft``), sent to the STUCK_* phase where it may
only answer (``hard``), or the agent finishes at once with its best answer so
far (``auto_finish``). The same tool three times in a row is stuck too. The
model sees an ``agent_state`` block every turn.

Offline it runs its scenarios on a scripted model; with
``OPENAI_BASE_URL`` set, the searcher scenario asks that server. Every run is
stored and replayed, re-executing each step without the model. Run it with
``python examples/phase_agent.py [asyncio|trio] [soft|hard|auto_finish]``.
A phase machine built by hand is tests/scenarios/phase_machine.py.
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
from arkhon_rheo.protocols import ModelClient, ToolCall, ToolMessage
from arkhon_rheo.react import Checks, ReactState, StuckPolicy, react_agent
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import tool

DOCUMENTS = {
    "savant-1": "Savant Framework: a Ruby framework for building agents.",
    "savant-2": "The Savant Framework architecture: runtime, reasoning API, MCP tools.",
}


@tool(name="context_fts_search")
async def search(query: str) -> str:
    """Full-text search over the project's documents."""
    words = [w for w in query.lower().split() if len(w) > 2]
    hits = [k for k, text in DOCUMENTS.items() if any(w in text.lower() for w in words)]
    return json.dumps({"query": query, "results": hits})


@tool
async def calculator(a: float, b: float, op: str) -> float:
    """Apply op (one of + - * /) to a and b."""
    ops = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else float("nan")}
    return ops[op]


def _call(name: str, n: int, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c{n}", name=name, arguments=json.dumps(arguments))


SCENARIOS: dict[str, tuple[str, list[Any]]] = {
    # §7 scenario 1: INIT → SEARCHING → ANALYZING → DECIDING → FINISHING.
    "normal": (
        "What is the Savant Framework?",
        [
            _call("context_fts_search", 1, query="Savant Framework"),
            _call("analyze", 2, notes="Savant is a Ruby framework for agents."),
            _call("decide", 3, decision="The documents answer the question."),
            "Savant is a Ruby framework for building agents.",
        ],
    ),
    # §7 scenario 2: three searches in a row are stuck.
    "stuck_search": (
        "Find the Savant quantum module.",
        [
            _call("context_fts_search", 1, query="Savant quantum module"),
            _call("context_fts_search", 2, query="Savant quantum"),
            _call("context_fts_search", 3, query="quantum module"),
            "No quantum module is documented.",
            "No quantum module is documented.",
        ],
    ),
    # Appendix B: the math agent decides at once.
    "math": ("What is 12 divided by 4?", [_call("calculator", 1, a=12, b=4, op="/"), "3"]),
    # §2.3: SEARCHING → DECIDING is forbidden (analyse first).
    "forbidden_move": (
        "How many Savant documents are there, times two?",
        [
            _call("context_fts_search", 1, query="Savant"),
            _call("calculator", 2, a=2, b=2, op="*"),
            _call("analyze", 3, notes="Two documents mention Savant."),
            _call("calculator", 4, a=2, b=2, op="*"),
            "4",
        ],
    ),
}


async def run(system: AgentSystem, scenario: str, policy: StuckPolicy, model: ModelClient) -> None:
    task, _ = SCENARIOS[scenario]
    agent = react_agent(model, [search, calculator], checks=Checks(stuck=policy))
    session_id = f"{scenario}-{policy.value}"
    result = await system.run(agent, ReactState(task=task), session_id=session_id)
    state = result.state
    moves = " -> ".join(k for k in state.track.transitions)
    print(f"{scenario} ({policy.value}): {moves}")
    for message in state.messages:
        if isinstance(message, ToolMessage):
            print(f"  {message.name}: {message.content}")
    reason = f", stuck: {state.stuck_reason.value}" if state.stuck_reason else ""
    print(f"  exit: {state.exit.value if state.exit else None}{reason}; answer: {state.answer}")
    offline = react_agent(
        ScriptedModel([]),
        [search, calculator],
        checks=Checks(stuck=policy),
    )
    report = await system.stored(offline, session_id).replay(reexecute=True)
    print(f"  replay without the model: {'ok' if report.ok else report.divergence}")


async def main(policy: StuckPolicy) -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with AgentSystem(path=Path(folder) / "phases.db") as system:
            if os.environ.get("OPENAI_BASE_URL"):
                from arkhon_rheo.models import OpenAIChatClient

                await run(system, "normal", policy, OpenAIChatClient())
                return
            for scenario, (_, script) in SCENARIOS.items():
                await run(system, scenario, policy, ScriptedModel(script))


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    chosen = StuckPolicy(sys.argv[2]) if len(sys.argv) > 2 else StuckPolicy.HARD
    anyio.run(main, chosen, backend=backend)
