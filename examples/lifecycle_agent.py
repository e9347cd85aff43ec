"""An agent's lifecycle machine, supervised: Initialized → Thinking → Acting/Observing → Finished.

Each stage declares its permission matrix (what it reads and writes);
the supervisor enforces it and the lifecycle invariants at every commit,
including the one that depends on the path taken ("Observing reached from
Acting ⇒ Action is set", a transition invariant). The model is a scripted one
(``arkhon_rheo.testing.ScriptedModel``) by default, so the run is
deterministic, or the OpenAI-compatible server at ``OPENAI_BASE_URL`` when that
is set (``arkhon_rheo.models.OpenAIChatClient``); the calculator is an
``arkhon_rheo.tools`` tool run through a ``Toolbox``. Model and tool calls are
recorded in the stored events, and the run ends by replaying the stored log:
every stage runs again on the recorded calls, without the model.
Run it with ``python examples/lifecycle_agent.py [asyncio|trio]``.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import anyio
import structlog
from pydantic import BaseModel, ConfigDict

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    TransitionCondition,
    record_call,
    stage,
)
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.protocols import ModelClient, ModelReply, SystemMessage, ToolCall, UserMessage
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Toolbox, tool

L = Lifecycle


class Thought(BaseModel):
    model_config = ConfigDict(frozen=True)
    intent: str
    tools: tuple[str, ...] = ()
    reasoning: str = ""


class Action(BaseModel):
    model_config = ConfigDict(frozen=True)
    requested_tools: tuple[str, ...]
    tool_outputs: tuple[str, ...]


class Observation(BaseModel):
    model_config = ConfigDict(frozen=True)
    summary: str
    final_answer: str = ""
    need_loop: bool = False


class ReActState(AgentState):
    """The minimal state set: lifecycle, session, input, iteration, T/A/O, last error."""

    lifecycle: Lifecycle = L.INITIALIZED
    user_input: str | None = None
    thought: Thought | None = None
    action: Action | None = None
    observation: Observation | None = None


@tool
async def calculator(expression: str) -> str:
    """A tiny, safe tool: adds and multiplies integers.

    Args:
        expression: Like ``6*7+0``.
    """
    total = 0
    for term in expression.split("+"):
        product = 1
        for factor in term.split("*"):
            product *= int(factor)
        total += product
    return str(total)


TOOLS = Toolbox(calculator)  # each call is recorded in the step's event as "tool:calculator"
PROMPT = (
    'Reply with JSON only: {"intent": str, "tools": [tool names], "reasoning": str}. '
    "To compute, name the calculator in tools and put the expression (integers, + and *) "
    "in reasoning."
)


def build_machine(model: ModelClient) -> Machine[ReActState]:
    @stage(reads={"user_input"}, writes=(), next=L.THINKING)
    async def load(view: StateView[ReActState]) -> Patch:
        return Patch()

    @stage(
        reads={"session_id", "user_input", "iteration", "observation"},
        writes={"thought"},
        next=lambda s: L.ACTING if s.thought.tools else L.OBSERVING,
    )
    async def think(view: StateView[ReActState]) -> Patch:
        previous = view.observation.summary if view.observation else "none"
        prompt = f"input={view.user_input} previous={previous}"
        # Recorded too: a replay re-executes this stage without the model.
        reply = await record_call(
            "model",
            {"prompt": prompt},
            lambda: model.complete(
                [SystemMessage(content=PROMPT), UserMessage(content=prompt)], json_mode=True
            ),
            returns=ModelReply,
        )
        return Patch(thought=Thought.model_validate_json(reply.text or "{}"))

    @stage(reads={"session_id", "iteration", "thought"}, writes={"action"}, next=L.OBSERVING)
    async def act(view: StateView[ReActState]) -> Patch:
        tools = view.thought.tools
        arguments = json.dumps({"expression": view.thought.reasoning})
        outputs = []
        for index, name in enumerate(tools):
            answer = await TOOLS.call(ToolCall(id=f"t{index}", name=name, arguments=arguments))
            outputs.append(answer.content)
        return Patch(action=Action(requested_tools=tools, tool_outputs=tuple(outputs)))

    @stage(
        reads={"session_id", "iteration", "thought", "action"},
        writes={"observation"},
        next=lambda s: L.THINKING if s.observation.need_loop else L.FINISHED,
    )
    async def observe(view: StateView[ReActState]) -> Patch:
        if view.action is None or not view.action.tool_outputs:
            return Patch(observation=Observation(summary="no tool used", need_loop=True))
        result = view.action.tool_outputs[-1]
        return Patch(observation=Observation(summary=f"tool said {result}", final_answer=result))

    return Machine(
        name="lifecycle",
        state_type=ReActState,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        transitions={
            L.INITIALIZED: {L.THINKING},
            L.THINKING: {L.ACTING, L.OBSERVING, L.FAILED},
            L.ACTING: {L.OBSERVING, L.FAILED},
            L.OBSERVING: {L.FINISHED, L.THINKING, L.FAILED},
        },
        stages={L.INITIALIZED: load, L.THINKING: think, L.ACTING: act, L.OBSERVING: observe},
        invariants={
            L.INITIALIZED: [
                lambda s: s.user_input is not None,
                lambda s: s.thought is None and s.action is None and s.observation is None,
            ],
            L.ACTING: [lambda s: s.thought is not None and bool(s.thought.intent)],
            L.FINISHED: [lambda s: s.observation is not None and bool(s.observation.final_answer)],
        },
        transition_invariants={  # an invariant that sees the path taken, not only the state
            (L.ACTING, L.OBSERVING): [
                TransitionCondition(
                    "Observing reached from Acting needs the Action",
                    lambda before, after: after.action is not None,
                )
            ],
        },
    )


async def main() -> None:
    if os.environ.get("OPENAI_BASE_URL"):  # a real OpenAI-compatible server
        async with OpenAIChatClient() as client:
            await run(client)
    else:
        await run(ScriptedModel(SCRIPT))


SCRIPT = [
    json.dumps({"intent": "reflect", "reasoning": "I should compute it."}),
    json.dumps({"intent": "compute", "tools": ["calculator"], "reasoning": "6*7+0"}),
]


async def run(model: ModelClient) -> None:
    machine = build_machine(model)
    # No arguments: sessions are kept in ./arkhon-rheo.db, the embedded SQLite default.
    async with AgentSystem(seed=4) as system:
        handle = await system.start(machine, ReActState(user_input="What is 6 times 7?"))
        async for event in handle.events():
            print(
                f"#{event.seq} {event.stage:>8}: {event.from_state.value:>11} -> "
                f"{event.to_state.value:<9} wrote {sorted(event.writes)}"
            )
        result = await handle.result()
        stored = await system.stored(machine, handle.session_id).history()
        assert system.store is not None
        records = await system.store.sessions()
        # Check the stored log: fold it, and run every stage again on the recorded
        # model and tool calls, with a model that has nothing left to say.
        offline = build_machine(ScriptedModel([]))
        report = await system.stored(offline, handle.session_id).replay(reexecute=True)
    answer = result.state.observation.final_answer if result.state.observation else None
    print(f"exit: {result.exit_reason.value}, iteration {result.state.iteration}, answer {answer}")
    print(f"stored history of session {handle.session_id} in arkhon-rheo.db:")
    for event in stored:
        calls = [call["kind"] for call in (event.info or {}).get("io", [])]
        recorded_calls = f" (recorded calls: {', '.join(calls)})" if calls else ""
        print(
            f"  #{event.seq} {event.stage}: {event.from_state.name} -> {event.to_state.name}"
            f"{recorded_calls}"
        )
    verdict = "ok" if report.ok else f"diverged at {report.divergence}"
    print(
        f"replay: {verdict}; {report.events} events folded, {report.reexecuted} stages "
        "re-executed on their recorded calls, without the model"
    )
    print(f"{len(records)} session(s) in the file")


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
