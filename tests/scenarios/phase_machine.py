"""Seed 003's phase machine: INIT → SEARCHING → ANALYZING → DECIDING → FINISHING, stuck detection.

Each step runs in one `Phase`: it carries out the action the model chose in
the step before (a search in SEARCHING, any tool in DECIDING, nothing in
ANALYZING), checks whether the agent is stuck (`StuckDetector`: the same tool
3 times in a row, 5 steps in one phase, the phase's timeout), then asks the
model, with an ``agent_state`` block in its payload, for its next action. The
phase that action leads to (`infer_state_from_tool`) is the next state; a move
the seed forbids (SEARCHING → DECIDING, ANALYZING → SEARCHING, anything → INIT)
is an `IllegalTransition` and the session fails. When stuck, the policy warns
(soft), forces STUCK_* where the model may only finish (hard), or finishes at
once with the best answer so far (auto-finish).

The model is scripted (``ScriptedModel``) unless ``OPENAI_BASE_URL`` is set;
model, clock and tool calls are recorded, so a stored run replays without the
model. Run it with
``python tests/scenarios/phase_machine.py [asyncio|trio] [soft|hard|auto_finish]``.

This is the seed's machine built by hand, kept as the reference that
tests/scenarios/test_phases.py checks; ``react_agent(checks=Checks(stuck=...))`` gives any agent
the same machinery in one line (examples/phase_agent.py).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, StateView, record_call
from arkhon_rheo.protocols import (
    AssistantMessage,
    Condition,
    EventKind,
    History,
    Message,
    ModelClient,
    ModelReply,
    Stage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from arkhon_rheo.react import (
    PHASE_TRANSITIONS,
    Phase,
    PhaseStep,
    PhaseTrack,
    StuckDetector,
    StuckPolicy,
    StuckReason,
    action_allowed,
    exit_suggestion,
    infer_state_from_tool,
    offered_actions,
)
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Toolbox, tool

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

P = Phase
log = structlog.get_logger("phase_agent")

SYSTEM_PROMPT = (
    "You are an agent that works in phases. Each turn, call exactly one of the tools "
    "offered: search with context_fts_search, write down what the results say with "
    "analyze, commit to a decision with decide or another tool, and end with finish. "
    "The last system message is your agent_state: when it says stuck, follow "
    "suggested_exit."
)

DOCUMENTS = {
    "savant-1": "Savant Framework: a Ruby framework for building agents.",
    "savant-2": "Savant Framework agents run a reasoning loop over tools.",
    "savant-3": "The Savant Framework architecture: runtime, reasoning API, MCP tools.",
    "math-1": "Division: 12 divided by 4 is 3.",
}


@tool(name="context_fts_search")
async def fts_search(query: str) -> str:
    """Full-text search over the project's documents."""
    words = [w for w in query.lower().split() if len(w) > 2]
    hits = [k for k, text in DOCUMENTS.items() if any(w in text.lower() for w in words)]
    return json.dumps({"query": query, "results": hits})


@tool(name="context_memory_search")
async def memory_search(query: str) -> str:
    """Search what earlier sessions remembered."""
    return json.dumps({"query": query, "results": []})


@tool
async def calculator(a: float, b: float, op: str) -> float:
    """Apply op (one of + - * /) to a and b."""
    match op:
        case "+":
            return a + b
        case "-":
            return a - b
        case "*":
            return a * b
        case "/":
            return a / b
    raise ValueError(f"unknown operator {op!r}: use one of + - * /")


# Control actions: offered to the model like tools, but they run nothing; they
# carry the model's analysis, decision or answer and move the phase.
@tool
async def analyze(notes: str) -> str:
    """Write down what the results so far say (moves to ANALYZING)."""
    return notes


@tool
async def decide(decision: str) -> str:
    """Commit to a decision (moves to DECIDING)."""
    return decision


@tool
async def finish(answer: str) -> str:
    """Finish with the answer, or a summary of what you found (moves to FINISHING)."""
    return answer


CONTROL = {"analyze": "notes", "decide": "decision", "finish": "answer"}


class PhaseExit(enum.Enum):
    """Why the agent finished."""

    #: The model finished with its answer.
    ANSWERED = "answered"
    #: The model finished with a summary in a STUCK_* phase (hard policy).
    STUCK_SUMMARY = "stuck_summary"
    #: Stuck with the auto-finish policy: finished at once with the best answer so far.
    AUTO_FINISHED = "auto_finished"


class PhaseState(AgentState):
    """The phase agent's state: the conversation, the action in hand, the stuck counters."""

    lifecycle: Phase = P.INIT
    task: str = ""
    messages: History[Message] = History()
    pending: ToolCall | None = None
    track: PhaseTrack = PhaseTrack()
    steps: History[PhaseStep] = History()
    best: str = ""
    stuck_reason: StuckReason | None = None
    answer: str | None = None
    exit: PhaseExit | None = None


def _argument(call: ToolCall, key: str) -> str:
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return call.arguments
    return str(value.get(key, "")) if isinstance(value, dict) else str(value)


def build_machine(
    model: ModelClient,
    *,
    policy: StuckPolicy = StuckPolicy.HARD,
    clock: Callable[[], float] = time.time,
    detector: StuckDetector | None = None,
    name: str = "seed-003-phases",
) -> Machine[PhaseState]:
    """The phase machine over ``model``; ``clock`` gives the time stuck detection reads.

    The default clock is wall time (it survives a restart of the process);
    tests pass ``anyio.current_time`` to run on trio's virtual clock.
    """
    stuck = detector or StuckDetector(policy=policy)
    toolbox = Toolbox(fts_search, memory_search, calculator)
    controls = {t.name: t.spec for t in (analyze, decide, finish)}
    specs: dict[str, ToolSpec] = {s.name: s for s in toolbox.specs} | controls

    async def read_clock() -> float:
        return clock()

    async def now(step: int, at: str) -> float:
        return await record_call("clock", {"step": step, "at": at}, read_clock, returns=float)

    class Step(
        Stage[PhaseState],
        name="step",
        reads={"task", "messages", "pending", "track", "steps", "best"},
        writes={"messages", "pending", "track", "steps", "best", "stuck_reason", "answer", "exit"},
    ):
        phase: Phase = P.INIT

        async def execute(self, view: StateView[PhaseState]) -> Patch:
            phase = self.phase
            number = view.track.steps + 1
            started = await now(number, "start")
            track = view.track.start(started)
            new: list[Message] = []
            if not view.messages:
                new += [SystemMessage(content=SYSTEM_PROMPT), UserMessage(content=view.task)]
            best = view.best
            # 1. Carry out the action chosen in the step before.
            call, result, error = view.pending, "", False
            if call is not None and call.name in CONTROL:
                result = _argument(call, CONTROL[call.name])
                best = result or best
                new.append(ToolMessage(tool_call_id=call.id, name=call.name, content="noted"))
                track = track.step(None)
            elif call is not None:
                if action_allowed(phase, call.name):
                    answer = await toolbox.call(call)
                else:
                    answer = ToolMessage(
                        tool_call_id=call.id,
                        name=call.name,
                        content=f"error: {call.name} cannot run in {phase.value}",
                        is_error=True,
                    )
                result, error = answer.content, answer.is_error
                best = best if error else f"{call.name}: {result}"
                new.append(answer)
                track = track.step(call.name, error=error)
            else:
                track = track.step(None)
            # 2. Stuck?
            reason = stuck.why(track, started)
            patch = Patch(best=best, stuck_reason=reason, pending=None)
            chosen: Phase | None = None
            if reason is not None:
                suggestion = exit_suggestion(phase)
                log.warning("agent_stuck", phase=phase.value, reason=reason.value, hint=suggestion)
                chosen = stuck.forced_state(phase)
                if chosen is P.FINISHING:
                    patch = patch.set(
                        answer=f"Reached stuck state. Summary: {best or 'nothing found'}",
                        exit=PhaseExit.AUTO_FINISHED,
                    )
                elif chosen is not None:
                    new.append(UserMessage(content=f"You are stuck ({reason.value}). {suggestion}"))
            # 3. Ask the model for its next action.
            if chosen is None:
                chosen, more = await self._ask(view, phase, number, track, started, new)
                patch = patch.set(**more)
            ended = await now(number, "end")
            record = PhaseStep(
                step_num=number,
                state=phase,
                tool_name=call.name if call is not None else None,
                tool_args=call.arguments if call is not None else "",
                result=result,
                error=error,
                duration_ms=round(max(0.0, ended - started) * 1000),
                timestamp=started,
            )
            return (
                patch.set(track=track.enter(chosen, ended))
                .append("messages", *new)
                .append("steps", record)
            )

        async def _ask(
            self,
            view: StateView[PhaseState],
            phase: Phase,
            number: int,
            track: PhaseTrack,
            started: float,
            new: list[Message],
        ) -> tuple[Phase, dict[str, Any]]:
            offered = [specs[n] for n in offered_actions(phase, specs)]
            block = stuck.agent_state(track, started, view.steps)
            payload = (
                *view.messages,
                *new,
                SystemMessage(content="agent_state: " + json.dumps(block)),
            )
            request = {
                "step": number,
                "phase": phase.value,
                "tools": [s.name for s in offered],
                "agent_state": block,
            }
            reply = await record_call(
                "model",
                request,
                lambda: model.complete(payload, tools=offered),
                returns=ModelReply,
            )
            calls = reply.tool_calls
            new.append(AssistantMessage(content=reply.text, tool_calls=calls[:1]))
            exit = PhaseExit.STUCK_SUMMARY if phase.name.startswith("STUCK") else PhaseExit.ANSWERED
            if not calls:  # a plain answer: finish with it
                return P.FINISHING, {"answer": reply.text or "", "exit": exit}
            intent = calls[0]
            target = infer_state_from_tool(intent.name)
            if target is P.FINISHING:
                new.append(ToolMessage(tool_call_id=intent.id, name=intent.name, content="done"))
                return target, {"answer": _argument(intent, "answer"), "exit": exit}
            return target, {"pending": intent}

        def next(self, state: PhaseState) -> enum.Enum:
            return state.track.phase

    class Finishing(
        Stage[PhaseState], name="finishing", reads={"track", "answer"}, writes={"track", "steps"}
    ):
        async def execute(self, view: StateView[PhaseState]) -> Patch:
            number = view.track.steps + 1
            started = await now(number, "start")
            record = PhaseStep(step_num=number, state=P.FINISHING, timestamp=started)
            track = view.track.start(started).step(None).enter(P.DONE, started)
            return Patch(track=track).append("steps", record)

        def next(self, state: PhaseState) -> enum.Enum:
            return P.DONE

    def step_of(phase: Phase) -> type[Stage[PhaseState]]:
        return type(
            f"Step_{phase.value}",
            (Step,),
            {"phase": phase},
            name=phase.value,
            reads=Step.reads,
            writes=Step.writes,
        )

    transitions: dict[enum.Enum, frozenset[Phase]] = dict(PHASE_TRANSITIONS.items())
    stages: dict[enum.Enum, type[Stage[PhaseState]]] = {
        p: step_of(p) for p in PHASE_TRANSITIONS if p is not P.FINISHING
    }
    stages[P.FINISHING] = Finishing
    deadlines: dict[enum.Enum, float] = dict(stuck.timeouts.items())
    return Machine(
        name=name,
        state_type=PhaseState,
        initial=P.INIT,
        transitions=transitions,
        stages=stages,
        terminal={P.DONE, P.FAILED},
        failed=P.FAILED,
        # a step may not outlast its phase's timeout either (the stuck check reads the
        # time spent in the phase over all its steps)
        deadlines=deadlines,
        invariants={
            P.DONE: [
                Condition("a finished agent has an answer", lambda s: bool(s.answer)),
                Condition("a finished agent says why", lambda s: s.exit is not None),
            ]
        },
    )


# -- scripts for the scripted model: seed 003's scenarios ----------------------


def _call(name: str, n: int, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c{n}", name=name, arguments=json.dumps(arguments))


SCENARIOS: dict[str, tuple[str, list[Any]]] = {
    # §7 scenario 1: Init → Searching → Analyzing → Deciding → Finishing.
    "normal": (
        "What is the Savant Framework?",
        [
            _call("context_fts_search", 1, query="Savant Framework"),
            _call("analyze", 2, notes="Savant is a Ruby framework for agents."),
            _call("decide", 3, decision="The documents answer the question."),
            _call("finish", 4, answer="Savant is a Ruby framework for building agents."),
        ],
    ),
    # §7 scenario 2: Init → Searching → Searching → Searching (stuck) → Finishing.
    "stuck_search": (
        "Find the Savant quantum module.",
        [
            _call("context_fts_search", 1, query="Savant quantum module"),
            _call("context_fts_search", 2, query="Savant quantum"),
            _call("context_fts_search", 3, query="quantum module"),
            _call("finish", 4, answer="No quantum module is documented."),
            "No quantum module is documented.",
        ],
    ),
    # §7 scenario 3: Init → Deciding → Finishing.
    "quick_decision": (
        "Should the report be in English?",
        [
            _call("decide", 1, decision="Yes: the user wrote in English."),
            _call("finish", 2, answer="Yes, in English."),
        ],
    ),
    # Appendix B: the math agent stays in DECIDING.
    "math": (
        "What is 12 divided by 4?",
        [
            _call("calculator", 1, a=12, b=4, op="/"),
            _call("finish", 2, answer="3"),
        ],
    ),
    # Appendix C: the searcher cycles SEARCHING → ANALYZING → DECIDING, then gets stuck.
    "searcher": (
        "Tell me about Savant Framework",
        [
            _call("context_fts_search", 1, query="Savant Framework"),
            _call("analyze", 2, notes="Savant: a Ruby agent framework with a reasoning loop."),
            _call("decide", 3, decision="Need more specific info on the architecture."),
            _call("context_fts_search", 4, query="Savant Framework architecture"),
            _call("context_fts_search", 5, query="Savant architecture runtime"),
            _call("finish", 6, answer="Savant: a Ruby agent framework (runtime, reasoning API)."),
            "Savant: a Ruby agent framework (runtime, reasoning API).",
        ],
    ),
}


def scripted(scenario: str) -> tuple[str, ScriptedModel]:
    """The task and a scripted model for one of `SCENARIOS`."""
    task, script = SCENARIOS[scenario]
    return task, ScriptedModel(script)


def trace(events: Sequence[Any]) -> list[str]:
    """One readable line per step: phase moves and the tool each step ran."""
    lines = []
    for event in events:
        if event.kind is not EventKind.STEP:
            continue
        steps = (event.patch.appends if event.patch is not None else {}).get("steps", ())
        tool = next(
            (s.get("tool_name") if isinstance(s, dict) else s.tool_name for s in steps), None
        )
        ran = f" ran {tool}" if tool else ""
        lines.append(f"  #{event.seq} {event.from_state.value} -> {event.to_state.value}{ran}")
    return lines


async def run_scenario(
    system: AgentSystem, scenario: str, policy: StuckPolicy, *, model: ModelClient | None = None
) -> None:
    task, scripted_model = scripted(scenario)
    machine = build_machine(model or scripted_model, policy=policy)
    result = await system.run(
        machine, PhaseState(task=task), session_id=f"{scenario}-{policy.value}"
    )
    events = await system.stored(machine, result.session_id).history()
    path = [e.to_state.value for e in events if e.kind is EventKind.STEP]
    print(f"{scenario} ({policy.value}): {' -> '.join(['init', *path])}")
    for line in trace(events):
        print(line)
    state = result.state
    reason = f", stuck: {state.stuck_reason.value}" if state.stuck_reason else ""
    exit = state.exit.value if state.exit else result.exit_reason.value
    print(f"  exit: {exit}{reason}; answer: {state.answer}")
    print(f"  transitions: {dict(state.track.transitions)}")
    report = await system.stored(
        build_machine(ScriptedModel([]), policy=policy), result.session_id
    ).replay(reexecute=True)
    print(f"  replay without the model: {'ok' if report.ok else report.divergence}")


async def main(policy: StuckPolicy) -> None:
    real = os.environ.get("OPENAI_BASE_URL")
    with tempfile.TemporaryDirectory() as folder:
        async with AgentSystem(path=Path(folder) / "phases.db", seed=3) as system:
            if real:
                from arkhon_rheo.models import OpenAIChatClient

                async with OpenAIChatClient() as client:
                    await run_scenario(system, "searcher", policy, model=client)
                return
            for scenario in SCENARIOS:
                await run_scenario(system, scenario, policy)


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    backend = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    chosen = StuckPolicy(sys.argv[2]) if len(sys.argv) > 2 else StuckPolicy.HARD
    anyio.run(main, chosen, backend=backend)
