"""Properties of the session supervisor, on both backends.

The supervisor is driven through random scripts of stage outcomes and checked
against the machine's rules and against a small reference model of the
supervision policy. (The validator's properties are in
``tests/core/test_properties.py``.)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, cast

import anyio
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from structlog.testing import capture_logs

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ExitReason,
    Fatal,
    Lifecycle,
    Machine,
    Patch,
    Recoverable,
    SessionResult,
    Stage,
    StateView,
    Transient,
    TransitionEvent,
    stage,
)
from arkhon_rheo.protocols import ErrorClass, EventKind
from arkhon_rheo.supervision import Backoff, RestartIntensity
from arkhon_rheo.testing import EventCapture

# == patch validation =====================================================================


L = Lifecycle


class Thought(BaseModel):
    model_config = ConfigDict(frozen=True)
    intent: str
    tools: tuple[str, ...] = ()


class Action(BaseModel):
    model_config = ConfigDict(frozen=True)
    tool_outputs: tuple[str, ...]


class Observation(BaseModel):
    model_config = ConfigDict(frozen=True)
    summary: str
    final_answer: str = ""


class Agent(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    user_input: str | None = None
    thought: Thought | None = None
    action: Action | None = None
    observation: Observation | None = None


@dataclass(frozen=True)
class Ok:
    """Succeed with a well-typed patch; ``good`` patches meet the target's invariants."""

    target: Lifecycle | None  # None: the natural next state
    good: bool = True


@dataclass(frozen=True)
class Raise:
    kind: str  # transient, recoverable, fatal, generic


@dataclass(frozen=True)
class Undeclared:
    """Write a field outside the stage's write set."""


@dataclass(frozen=True)
class Invalid:
    """Propose a wrongly typed value (or no patch at all)."""


Outcome = Ok | Raise | Undeclared | Invalid

NATURAL = {
    L.INITIALIZED: L.THINKING,
    L.THINKING: L.ACTING,
    L.ACTING: L.OBSERVING,
    L.OBSERVING: L.FINISHED,
}
ROUTES: dict[enum.Enum, enum.Enum] = {L.ACTING: L.OBSERVING}
RAISES: dict[str, tuple[type[Exception], ErrorClass]] = {
    "transient": (Transient, ErrorClass.TRANSIENT),
    "recoverable": (Recoverable, ErrorClass.RECOVERABLE),
    "fatal": (Fatal, ErrorClass.FATAL),
    "generic": (RuntimeError, ErrorClass.RECOVERABLE),
}
MAX_ATTEMPTS = 2


class Script:
    """The outcomes left to play; every stage invocation pulls the next one."""

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = list(outcomes)
        self.target: enum.Enum = L.FAILED

    def pull(self) -> Outcome:
        return self.outcomes.pop(0) if self.outcomes else Ok(None)


def _ok_patch(phase: Lifecycle, good: bool) -> Patch:
    if phase is L.THINKING:
        return Patch(thought=Thought(intent="plan" if good else "", tools=("calc",)))
    if phase is L.ACTING:
        return Patch(action=Action(tool_outputs=("42",)))
    if phase is L.OBSERVING:
        return Patch(observation=Observation(summary="s", final_answer="42" if good else ""))
    return Patch()


def _bad_patch(phase: Lifecycle) -> Patch:
    if phase is L.THINKING:
        return Patch(thought="not a thought")
    if phase is L.ACTING:
        return Patch(action=42)
    if phase is L.OBSERVING:
        return Patch(observation=["no"])
    return cast("Patch", "not a patch")


def build_agent_machine(script: Script) -> Machine[Agent]:
    def make(phase: Lifecycle, name: str, reads: set[str], writes: set[str]) -> type[Stage[Any]]:
        async def body(view: StateView[Agent]) -> Patch:
            outcome = script.pull()
            if isinstance(outcome, Ok):
                script.target = outcome.target or NATURAL[phase]
                return _ok_patch(phase, outcome.good)
            if isinstance(outcome, Raise):
                raise RAISES[outcome.kind][0](f"scripted {outcome.kind}")
            if isinstance(outcome, Undeclared):
                return Patch(user_input="hijacked")
            return _bad_patch(phase)

        return stage(name=name, reads=reads, writes=writes, next=lambda _: script.target)(body)

    return Machine(
        name="scripted",
        state_type=Agent,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        transitions={
            L.INITIALIZED: {L.THINKING},
            L.THINKING: {L.ACTING, L.OBSERVING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.THINKING, L.FINISHED},
        },
        stages={
            L.INITIALIZED: make(L.INITIALIZED, "load", {"user_input"}, set()),
            L.THINKING: make(L.THINKING, "think", {"user_input", "observation"}, {"thought"}),
            L.ACTING: make(L.ACTING, "act", {"thought"}, {"action"}),
            L.OBSERVING: make(L.OBSERVING, "observe", {"thought", "action"}, {"observation"}),
        },
        invariants={
            L.INITIALIZED: [
                lambda s: s.user_input is not None,
                lambda s: s.thought is None and s.action is None and s.observation is None,
            ],
            L.ACTING: [lambda s: s.thought is not None and bool(s.thought.intent)],
            L.FINISHED: [lambda s: s.observation is not None and bool(s.observation.final_answer)],
        },
        error_routes=ROUTES,
    )


EventKey = tuple[EventKind, enum.Enum, enum.Enum, str | None, int]


@dataclass
class Prediction:
    events: list[EventKey]
    exit_reason: ExitReason
    iteration: int
    restarts: int
    retries: int


def predict(outcomes: list[Outcome], max_steps: int, max_restarts: int) -> Prediction:
    """The supervision policy, replayed on the script without an event loop."""
    machine = build_agent_machine(Script([]))
    script = Script(outcomes)
    phase: Lifecycle = L.INITIALIZED
    intent: str | None = None
    answer: str | None = None
    iteration = steps = restarts = retries = 0
    events: list[EventKey] = []

    def end(reason: ExitReason) -> Prediction:
        return Prediction(events, reason, iteration, restarts, retries)

    while True:
        if machine.is_terminal(phase):
            return end(ExitReason.FAILED if phase is L.FAILED else ExitReason.FINISHED)
        if steps >= max_steps:
            events.append((EventKind.FAILURE, phase, L.FAILED, "BudgetExhausted", 1))
            return end(ExitReason.MAX_STEPS)
        attempt = 1
        while True:
            outcome = script.pull()
            if isinstance(outcome, Ok):
                target = outcome.target or NATURAL[phase]
                new_intent = ("plan" if outcome.good else "") if phase is L.THINKING else intent
                new_answer = ("42" if outcome.good else "") if phase is L.OBSERVING else answer
                if target not in machine.allowed(phase):
                    error, error_class = "IllegalTransition", ErrorClass.FATAL
                elif (target is L.ACTING and not new_intent) or (
                    target is L.FINISHED and not new_answer
                ):
                    error, error_class = "InvariantViolation", ErrorClass.FATAL
                else:
                    intent, answer = new_intent, new_answer
                    if target is L.THINKING and phase is not L.THINKING:
                        iteration += 1
                    chose = "StageChoseFailure" if target is L.FAILED else None
                    events.append((EventKind.STEP, phase, target, chose, attempt))
                    phase, steps = target, steps + 1
                    break
            elif isinstance(outcome, Raise):
                exc_type, error_class = RAISES[outcome.kind]
                error = exc_type.__name__
            elif isinstance(outcome, Undeclared):
                error, error_class = "UndeclaredWrite", ErrorClass.FATAL
            else:
                error, error_class = "InvalidPatch", ErrorClass.RECOVERABLE
            if error_class is ErrorClass.TRANSIENT:
                if attempt < MAX_ATTEMPTS:
                    attempt += 1
                    retries += 1
                    continue
                error_class = ErrorClass.RECOVERABLE
            if error_class is ErrorClass.RECOVERABLE and restarts < max_restarts:
                restarts += 1
                target = cast("Lifecycle", ROUTES.get(phase, phase))
                events.append((EventKind.FAILURE, phase, target, error, attempt))
                phase, steps = target, steps + 1
                break
            # Failed (escalated past the restart intensity too): the error keeps its own type.
            events.append((EventKind.FAILURE, phase, L.FAILED, error, attempt))
            return end(ExitReason.FAILED)


def run_script(
    outcomes: list[Outcome], *, max_steps: int, max_restarts: int, seed: int, backend: str
) -> tuple[SessionResult[Agent], list[TransitionEvent]]:
    script = Script(outcomes)
    machine = build_agent_machine(script)

    async def main() -> tuple[SessionResult[Agent], list[TransitionEvent]]:
        capture = EventCapture()
        agents = AgentSystem(
            path=None,
            seed=seed,
            backoff=Backoff(base=0, cap=0, max_attempts=MAX_ATTEMPTS),
            restart_intensity=RestartIntensity(max_restarts=max_restarts, within=3600),
            max_steps=max_steps,
            listeners=[capture],
        )
        async with agents:
            with anyio.fail_after(20):
                result = await agents.run(machine, Agent(user_input="q"), session_id="s")
            seen = capture.events("s")
            assert list(await agents.session("s").history()) == seen
        return result, seen

    return anyio.run(main, backend=backend)


# Drawn from a weighted menu: about half the draws are well-behaved steps to the
# natural next state, so that sessions get deep enough to loop, retry, restart
# and run out of budget; the first entry is what a failing example shrinks to.
MENU: list[Outcome] = [
    *[Ok(None)] * 12,
    *[Ok(None, good=False)] * 2,
    *[Ok(target) for target in Lifecycle],
    Ok(L.THINKING),  # loops back from Observing (illegal anywhere else)
    Ok(L.OBSERVING),  # skips Acting from Thinking
    *[Raise(kind) for kind in sorted(RAISES)],
    Raise("transient"),
    Raise("transient"),
    Undeclared(),
    Invalid(),
    Invalid(),
]
outcomes = st.sampled_from(MENU)


@settings(max_examples=50, deadline=None)
@given(
    script=st.lists(outcomes, max_size=12),
    # Half of the sessions get a budget they cannot run out of.
    max_steps=st.one_of(st.just(30), st.integers(2, 12)),
    max_restarts=st.one_of(st.just(3), st.integers(0, 2)),
    seed=st.integers(0, 2**16),
)
def test_supervisor_keeps_the_machines_rules_whatever_the_stages_do(
    script: list[Outcome], max_steps: int, max_restarts: int, seed: int
) -> None:
    machine = build_agent_machine(Script([]))
    expected = predict(script, max_steps, max_restarts)
    for backend in ("asyncio", "trio"):
        with capture_logs() as logs:
            result, events = run_script(
                script, max_steps=max_steps, max_restarts=max_restarts, seed=seed, backend=backend
            )
        state = result.state
        # It ended, in a terminal state, with a consistent exit reason.
        assert result.exit_reason not in (ExitReason.CANCELLED, ExitReason.CRASHED)
        assert machine.is_terminal(state.lifecycle)
        assert (result.exit_reason in (ExitReason.FAILED, ExitReason.MAX_STEPS)) == (
            state.lifecycle is L.FAILED
        )
        # The log is numbered 1..n and chains from the initial state to the final one.
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert all(e.session_id == "s" for e in events)
        chain = [L.INITIALIZED, *(e.to_state for e in events)]
        assert [e.from_state for e in events] == chain[:-1]
        assert chain[-1] is state.lifecycle
        for moved in events:
            # Every move is one the machine allows; a failure recorded in place is too.
            in_place = moved.kind is EventKind.FAILURE and moved.from_state is moved.to_state
            assert in_place or moved.to_state in machine.allowed(moved.from_state), moved
            assert not machine.is_terminal(moved.from_state), "committed after a terminal state"
            # Failures carry their record; so does a step whose stage chose to fail.
            chose_failure = moved.kind is EventKind.STEP and moved.to_state is machine.failed
            assert (moved.error is not None) == (moved.kind is EventKind.FAILURE or chose_failure)
            if moved.kind is EventKind.STEP:
                assert moved.stage is not None
                assert moved.writes <= machine.stages[moved.from_state].writes
        # Stage steps and recoverable records stay within the budget.
        assert result.steps <= max_steps
        if result.failure is not None:
            assert events[-1].error == result.failure
            assert state.last_error == result.failure
            assert result.failure.exit_reason == result.exit_reason.value
        restarted = [e for e in logs if e["event"] == "stages_restarted"]
        assert len(restarted) == result.restarts
        # And it did exactly what the supervision policy says.
        assert [
            (e.kind, e.from_state, e.to_state, e.error.error_type if e.error else None, e.attempt)
            for e in events
        ] == expected.events
        assert result.exit_reason is expected.exit_reason
        event(f"{backend}: {result.exit_reason.value}, {len(events)} events")
        assert state.iteration == expected.iteration
        assert (result.restarts, result.retries) == (expected.restarts, expected.retries)
