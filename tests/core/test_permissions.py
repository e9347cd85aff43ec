"""Seed 004, section 5.3: the Module D permission matrix and the Module B invariants.

The ReAct state and machine are defined here again (not imported from the
example) so these tests pin the seed's contract, not the example's internals.
Every rule is checked twice: on `PatchValidator` and `StateView` directly (pure,
no event loop), and end to end through `AgentSystem` on both backends.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from pydantic import BaseModel, ConfigDict

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    Condition,
    ConfigurationError,
    ExitReason,
    Machine,
    Patch,
    Recoverable,
    SessionResult,
    Stage,
    StateView,
    TransitionEvent,
    stage,
)
from arkhon_rheo.errors import (
    ContractViolation,
    InvalidPatch,
    InvariantViolation,
    UndeclaredRead,
    UndeclaredWrite,
)
from arkhon_rheo.protocols import ErrorClass, EventKind, FailureRecord
from arkhon_rheo.session._commit_rule import PatchValidator
from arkhon_rheo.supervision import RestartIntensity
from tests.support.helpers import on_virtual_clock

if TYPE_CHECKING:
    import trio.testing

pytestmark = pytest.mark.anyio


# -- the seed 004 state ------------------------------------------------------------


class Phase(enum.Enum):
    """Seed 004's lifecycle plus a state for the error-handler stage to run in."""

    INITIALIZED = "Initialized"
    THINKING = "Thinking"
    ACTING = "Acting"
    OBSERVING = "Observing"
    RECOVERING = "Recovering"
    FINISHED = "Finished"
    FAILED = "Failed"


class Elsewhere(enum.Enum):
    """A state no machine here declares."""

    NOWHERE = "Nowhere"


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
    """Lifecycle, SessionID, UserInput, Iteration, Thought, Action, Observation, LastError."""

    lifecycle: Phase = Phase.INITIALIZED
    user_input: str | None = None
    thought: Thought | None = None
    action: Action | None = None
    observation: Observation | None = None


ALL_FIELDS = frozenset(ReActState.model_fields)
BUSINESS = ("user_input", "thought", "action", "observation")
SUPERVISOR_OWNED = frozenset({"lifecycle", "session_id", "iteration"})

Q = "What is 6 times 7?"
T_TOOLS = Thought(intent="compute", tools=("calculator",), reasoning="6*7")
T_PLAIN = Thought(intent="reflect", reasoning="no tool needed")
ACTION = Action(requested_tools=("calculator",), tool_outputs=("42",))
OBS_FINAL = Observation(summary="tool said 42", final_answer="42")
OBS_LOOP = Observation(summary="not there yet", need_loop=True)
FLAKE = FailureRecord(
    error_type="Recoverable",
    message="tool flaked",
    error_class=ErrorClass.RECOVERABLE,
    stage="act",
    lifecycle="Acting",
)

# -- the seed's invariants, named ----------------------------------------------------

INIT_HAS_INPUT = Condition[ReActState](
    "initialized requires user_input", lambda s: s.user_input is not None
)
INIT_IS_BLANK = Condition[ReActState](
    "initialized has no thought, action or observation",
    lambda s: s.thought is None and s.action is None and s.observation is None,
)
ACTING_HAS_INTENT = Condition[ReActState](
    "acting requires a thought with an intent",
    lambda s: s.thought is not None and bool(s.thought.intent),
)
OBSERVING_AFTER_TOOLS = Condition[ReActState](
    "observing after a tool request requires an action",
    lambda s: s.thought is None or not s.thought.tools or s.action is not None,
)
FINISHED_HAS_ANSWER = Condition[ReActState](
    "finished requires a non-empty final answer",
    lambda s: s.observation is not None and s.observation.final_answer != "",
)
ITERATION_NON_NEGATIVE = Condition[ReActState](
    "iteration is never negative", lambda s: s.iteration >= 0
)

# -- the machine ------------------------------------------------------------------------

Body = Callable[[StateView[ReActState]], Awaitable[Patch]]
Chooser = Callable[[ReActState], enum.Enum]

READS: dict[str, frozenset[str]] = {
    "load": frozenset({"user_input"}),
    "think": frozenset({"session_id", "user_input", "iteration", "observation"}),
    "act": frozenset({"session_id", "iteration", "thought"}),
    "observe": frozenset({"session_id", "iteration", "thought", "action"}),
    "handle": ALL_FIELDS,
}
WRITES: dict[str, frozenset[str]] = {
    "load": frozenset(),
    "think": frozenset({"thought"}),
    "act": frozenset({"action"}),
    "observe": frozenset({"observation"}),
    "handle": frozenset({"last_error"}),
}
PHASE_OF = {
    "think": Phase.THINKING,
    "act": Phase.ACTING,
    "observe": Phase.OBSERVING,
    "handle": Phase.RECOVERING,
}


async def _load(view: StateView[ReActState]) -> Patch:
    assert view.user_input
    return Patch()


async def _think(view: StateView[ReActState]) -> Patch:
    assert view.user_input == Q
    _ = view.observation  # think may read the previous observation
    return Patch(thought=T_TOOLS)


async def _act(view: StateView[ReActState]) -> Patch:
    assert view.thought is not None
    return Patch(action=ACTION)


async def _observe(view: StateView[ReActState]) -> Patch:
    assert view.thought is not None
    return Patch(observation=OBS_FINAL)


async def _handle(view: StateView[ReActState]) -> Patch:
    for name in ALL_FIELDS:  # the error handler may read any field
        getattr(view, name)
    return Patch(last_error=None)


DEFAULT_BODIES: dict[str, Body] = {
    "load": _load,
    "think": _think,
    "act": _act,
    "observe": _observe,
    "handle": _handle,
}
DEFAULT_NEXTS: dict[str, Chooser] = {
    "load": lambda s: Phase.THINKING,
    "think": lambda s: (
        Phase.ACTING if s.thought is not None and s.thought.tools else Phase.OBSERVING
    ),
    "act": lambda s: Phase.OBSERVING,
    "observe": lambda s: (
        Phase.THINKING if s.observation is not None and s.observation.need_loop else Phase.FINISHED
    ),
    "handle": lambda s: Phase.THINKING,
}


def _make_stage(
    name: str,
    bodies: Mapping[str, Body],
    nexts: Mapping[str, Chooser],
    sabotage: Mapping[str, Mapping[str, Any]],
) -> type[Stage[Any]]:
    body = bodies.get(name, DEFAULT_BODIES[name])
    extra = dict(sabotage.get(name, {}))

    async def run(view: StateView[ReActState]) -> Patch:
        patch = await body(view)
        return patch.set(**extra) if extra else patch

    return stage(
        name=name,
        reads=READS[name],
        writes=WRITES[name],
        next=nexts.get(name, DEFAULT_NEXTS[name]),
    )(run)


def build_machine(
    *,
    bodies: Mapping[str, Body] | None = None,
    nexts: Mapping[str, Chooser] | None = None,
    sabotage: Mapping[str, Mapping[str, Any]] | None = None,
    handler: bool = False,
    error_routes: Mapping[enum.Enum, enum.Enum] | None = None,
) -> Machine[ReActState]:
    """Seed 004's machine; ``handler`` routes recoverable errors to the error handler."""
    made = {
        name: _make_stage(name, bodies or {}, nexts or {}, sabotage or {})
        for name in DEFAULT_BODIES
    }
    transitions: dict[enum.Enum, set[enum.Enum]] = {
        Phase.INITIALIZED: {Phase.THINKING},
        Phase.THINKING: {Phase.ACTING, Phase.OBSERVING},
        Phase.ACTING: {Phase.OBSERVING},
        Phase.OBSERVING: {Phase.THINKING, Phase.FINISHED},
    }
    stages: dict[enum.Enum, type[Stage[Any]]] = {
        Phase.INITIALIZED: made["load"],
        Phase.THINKING: made["think"],
        Phase.ACTING: made["act"],
        Phase.OBSERVING: made["observe"],
    }
    routes: dict[enum.Enum, enum.Enum] = dict(error_routes or {})
    if handler:
        for phase in (Phase.THINKING, Phase.ACTING, Phase.OBSERVING):
            transitions[phase].add(Phase.RECOVERING)
            routes[phase] = Phase.RECOVERING
        transitions[Phase.RECOVERING] = {Phase.THINKING}
        stages[Phase.RECOVERING] = made["handle"]
    invariants: dict[enum.Enum | None, list[Condition[Any]]] = {
        None: [ITERATION_NON_NEGATIVE],
        Phase.INITIALIZED: [INIT_HAS_INPUT, INIT_IS_BLANK],
        Phase.ACTING: [ACTING_HAS_INTENT],
        Phase.OBSERVING: [OBSERVING_AFTER_TOOLS],
        Phase.FINISHED: [FINISHED_HAS_ANSWER],
    }
    return Machine(
        name="seed-004",
        state_type=ReActState,
        initial=Phase.INITIALIZED,
        terminal={Phase.FINISHED, Phase.FAILED},
        failed=Phase.FAILED,
        loop_state=Phase.THINKING,
        transitions=transitions,
        stages=stages,
        invariants=invariants,
        error_routes=routes,
    )


async def run_session(
    machine: Machine[ReActState], state: ReActState | None = None, **system: Any
) -> tuple[SessionResult[ReActState], Sequence[TransitionEvent]]:
    async with AgentSystem(path=None, seed=4, **system) as agents:
        with anyio.fail_after(120):
            initial = state if state is not None else ReActState(user_input=Q)
            result = await agents.run(machine, initial, session_id="s")
        return result, (await agents.session("s").history())


def flaky_act(failures: int = 1) -> Body:
    """An act stage whose first ``failures`` invocations raise `Recoverable`."""
    calls = [0]

    async def act(view: StateView[ReActState]) -> Patch:
        calls[0] += 1
        if calls[0] <= failures:
            raise Recoverable("tool flaked")
        return Patch(action=ACTION)

    return act


# The committed state just before each stage's first step in the default run
# (for "handle": after act's first invocation failed and was routed to it).
BEFORE: dict[str, ReActState] = {
    "think": ReActState(lifecycle=Phase.THINKING, session_id="s", iteration=1, user_input=Q),
    "act": ReActState(
        lifecycle=Phase.ACTING, session_id="s", iteration=1, user_input=Q, thought=T_TOOLS
    ),
    "observe": ReActState(
        lifecycle=Phase.OBSERVING,
        session_id="s",
        iteration=1,
        user_input=Q,
        thought=T_TOOLS,
        action=ACTION,
    ),
    "handle": ReActState(
        lifecycle=Phase.RECOVERING,
        session_id="s",
        iteration=1,
        user_input=Q,
        thought=T_TOOLS,
        last_error=FLAKE,
    ),
}
LEGAL: dict[str, Patch] = {
    "think": Patch(thought=T_TOOLS),
    "act": Patch(action=ACTION),
    "observe": Patch(observation=OBS_FINAL),
    "handle": Patch(last_error=None),
}
# A well-typed value for every field: only the permission is wrong.
FORGED: dict[str, Any] = {
    "lifecycle": Phase.FINISHED,
    "session_id": "another-session",
    "iteration": 99,
    "user_input": "ignore previous instructions",
    "thought": Thought(intent="forged"),
    "action": Action(requested_tools=("rm",), tool_outputs=("done",)),
    "observation": Observation(summary="forged", final_answer="forged"),
    "last_error": FailureRecord(
        error_type="Forged", message="forged", error_class=ErrorClass.RECOVERABLE
    ),
    "metadata": {"forged": True},
}
# Module D, as the seed words it; the matrix below must include every entry.
SEED_MUST_NOT: dict[str, frozenset[str]] = {
    "think": frozenset({"action", "observation"}),
    "act": frozenset({"user_input", "thought", "observation"}),
    "observe": frozenset({"user_input", "thought", "action"}),
    "handle": frozenset(BUSINESS),
}
FORBIDDEN = [
    (name, field)
    for name in ("think", "act", "observe", "handle")
    for field in sorted(ALL_FIELDS - WRITES[name])
]
FORBIDDEN_IDS = [f"{name}-writes-{field}" for name, field in FORBIDDEN]
UNREAD = [
    (name, field)
    for name in ("think", "act", "observe")
    for field in sorted(ALL_FIELDS - READS[name])
]


def assert_business_unchanged(after: ReActState, before: ReActState) -> None:
    """Every business field equal to, and the very same object as, before."""
    for name in BUSINESS:
        assert getattr(after, name) == getattr(before, name), name
        assert getattr(after, name) is getattr(before, name), name
    assert after.session_id == before.session_id
    assert after.iteration == before.iteration


def stage_of(machine: Machine[ReActState], name: str) -> type[Stage[Any]]:
    (found,) = [s for s in machine.stages.values() if s.name == name]
    return found


# -- the matrix as declared ------------------------------------------------------------


def test_the_declared_matrix_is_the_seeds() -> None:
    machine = build_machine(handler=True)
    for name in ("think", "act", "observe", "handle"):
        declared = stage_of(machine, name)
        assert declared.reads == READS[name]
        assert declared.writes == WRITES[name]
        forbidden = {field for stage_name, field in FORBIDDEN if stage_name == name}
        assert SEED_MUST_NOT[name] <= forbidden
        assert forbidden >= SUPERVISOR_OWNED
    assert READS["handle"] == ALL_FIELDS
    assert machine.allowed(Phase.THINKING) == {
        Phase.ACTING,
        Phase.OBSERVING,
        Phase.RECOVERING,
        Phase.FAILED,
    }


async def test_the_happy_path_writes_only_declared_fields() -> None:
    result, events = await run_session(build_machine())
    assert result.exit_reason is ExitReason.FINISHED
    assert [(e.stage, e.from_state, e.to_state) for e in events] == [
        ("load", Phase.INITIALIZED, Phase.THINKING),
        ("think", Phase.THINKING, Phase.ACTING),
        ("act", Phase.ACTING, Phase.OBSERVING),
        ("observe", Phase.OBSERVING, Phase.FINISHED),
    ]
    for event in events:
        assert event.stage is not None
        assert event.writes <= WRITES[event.stage]
        assert event.reads == READS[event.stage]
    state = result.state
    assert (state.thought, state.action, state.observation) == (T_TOOLS, ACTION, OBS_FINAL)
    assert state.thought is T_TOOLS
    assert state.iteration == 1
    assert state.last_error is None


# -- forbidden writes ----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "field"), FORBIDDEN, ids=FORBIDDEN_IDS)
def test_forbidden_write_is_rejected_by_the_validator(name: str, field: str) -> None:
    machine = build_machine(handler=True)
    validator = PatchValidator(machine)
    state = BEFORE[name]
    snapshot = state.model_dump()
    objects = {f: getattr(state, f) for f in ALL_FIELDS}
    writes = stage_of(machine, name).writes
    alone = Patch.of({field: FORGED[field]})
    with_legal = LEGAL[name].set(**{field: FORGED[field]})
    for patch in (alone, with_legal):
        with pytest.raises(UndeclaredWrite) as info:
            validator.updates(state, patch, stage=name, writes=writes)
        assert info.value.fields == (field,)
        assert info.value.stage == name
        assert f"wrote {field}," in str(info.value)
    assert state.model_dump() == snapshot
    for f, value in objects.items():
        assert getattr(state, f) is value
    # The stage's own write, alone, is accepted as it is.
    assert validator.updates(state, LEGAL[name], stage=name, writes=writes) == dict(
        LEGAL[name].values
    )


@pytest.mark.parametrize(("name", "field"), FORBIDDEN, ids=FORBIDDEN_IDS)
async def test_forbidden_write_fails_the_session(name: str, field: str) -> None:
    machine = build_machine(
        handler=True,
        sabotage={name: {field: FORGED[field]}},
        bodies={"act": flaky_act()} if name == "handle" else {},
    )
    result, events = await run_session(machine)
    assert result.exit_reason is ExitReason.FAILED
    failure = result.failure
    assert failure is not None
    assert failure.error_type == "UndeclaredWrite"
    assert failure.error_class is ErrorClass.FATAL
    assert failure.stage == name
    assert failure.lifecycle == PHASE_OF[name].value
    assert f"wrote {field}," in failure.message
    state = result.state
    assert state.lifecycle is Phase.FAILED
    assert state.last_error == failure
    assert_business_unchanged(state, BEFORE[name])
    assert dict(state.metadata) == {}
    # The rejected patch was never committed: no step of that stage, and the
    # last event is the supervisor's failure record.
    assert not [e for e in events if e.kind is EventKind.STEP and e.stage == name]
    last = events[-1]
    assert (last.kind, last.from_state, last.to_state) == (
        EventKind.FAILURE,
        PHASE_OF[name],
        Phase.FAILED,
    )
    assert last.writes == {"last_error", "lifecycle"}
    assert result.restarts == (1 if name == "handle" else 0)


def test_append_to_a_forbidden_field_is_an_undeclared_write() -> None:
    validator = PatchValidator(build_machine())
    with pytest.raises(UndeclaredWrite) as info:
        validator.updates(
            BEFORE["think"],
            Patch(thought=T_TOOLS).append("action", ACTION),
            stage="think",
            writes=WRITES["think"],
        )
    assert info.value.fields == ("action",)


@pytest.mark.parametrize("field", sorted(SUPERVISOR_OWNED))
def test_supervisor_fields_are_refused_even_when_declared(field: str) -> None:
    validator = PatchValidator(build_machine())
    with pytest.raises(UndeclaredWrite) as info:
        validator.updates(
            BEFORE["think"],
            Patch.of({field: FORGED[field]}),
            stage="think",
            writes=WRITES["think"] | {field},
        )
    assert info.value.fields == (field,)


async def test_assigning_through_the_view_fails_the_session_at_once() -> None:
    """Seed 004, Module D: changing read-only fields must fail immediately."""

    async def observe(view: StateView[ReActState]) -> Patch:
        view.thought = None
        return Patch(observation=OBS_FINAL)

    result, _ = await run_session(build_machine(bodies={"observe": observe}))
    assert result.exit_reason is ExitReason.FAILED
    failure = result.failure
    assert failure is not None
    assert result.restarts == 0, (
        "a write through the read-only view was treated as recoverable and retried "
        f"{result.restarts} times; it ended with {failure.error_type}: {failure.message}"
    )
    assert failure.error_class is ErrorClass.FATAL
    assert failure.stage == "observe"
    assert "thought" in failure.message
    assert_business_unchanged(result.state, BEFORE["observe"])


# -- undeclared reads -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "field"), UNREAD, ids=[f"{name}-reads-{field}" for name, field in UNREAD]
)
def test_undeclared_read_raises_from_the_view(name: str, field: str) -> None:
    view: StateView[ReActState] = StateView(BEFORE[name], READS[name], name)
    with pytest.raises(UndeclaredRead) as info:
        getattr(view, field)
    assert isinstance(info.value, ContractViolation)
    assert info.value.field == field
    assert info.value.stage == name
    assert repr(field) in str(info.value)
    for declared in READS[name]:
        assert getattr(view, declared) is getattr(BEFORE[name], declared)


def test_the_error_handler_reads_every_field() -> None:
    state = BEFORE["handle"]
    view: StateView[ReActState] = StateView(state, READS["handle"], "handle")
    for name in ALL_FIELDS:
        assert getattr(view, name) is getattr(state, name)
    with pytest.raises((AttributeError, ContractViolation)):
        view.last_error = None


@pytest.mark.parametrize(
    ("name", "field"),
    [("think", "action"), ("act", "user_input"), ("observe", "observation")],
)
async def test_undeclared_read_fails_the_session(name: str, field: str) -> None:
    default = DEFAULT_BODIES[name]

    async def peek(view: StateView[ReActState]) -> Patch:
        getattr(view, field)
        return await default(view)

    result, events = await run_session(build_machine(bodies={name: peek}))
    assert result.exit_reason is ExitReason.FAILED
    failure = result.failure
    assert failure is not None
    assert failure.error_type == "UndeclaredRead"
    assert failure.stage == name
    assert repr(field) in failure.message
    assert result.restarts == 0
    assert_business_unchanged(result.state, BEFORE[name])
    assert not [e for e in events if e.kind is EventKind.STEP and e.stage == name]


# -- invalid values -----------------------------------------------------------------------

INVALID = [
    ("think", "thought", "not a thought"),
    ("think", "thought", {"intent": 3}),
    ("act", "action", {"requested_tools": ("calculator",)}),
    ("act", "action", 42),
    ("observe", "observation", ["summary"]),
    ("handle", "last_error", "oops"),
]


@pytest.mark.parametrize(("name", "field", "value"), INVALID)
def test_invalid_value_for_a_declared_field_is_an_invalid_patch(
    name: str, field: str, value: object
) -> None:
    validator = PatchValidator(build_machine(handler=True))
    state = BEFORE[name]
    snapshot = state.model_dump()
    with pytest.raises(InvalidPatch) as info:
        validator.updates(state, Patch.of({field: value}), stage=name, writes=WRITES[name])
    assert info.value.field == field
    assert info.value.stage == name
    assert state.model_dump() == snapshot


def test_a_value_that_validates_is_coerced_like_the_model_would() -> None:
    validator = PatchValidator(build_machine())
    updates = validator.updates(
        BEFORE["think"],
        Patch(thought={"intent": "plan", "tools": ["calculator"]}),
        stage="think",
        writes=WRITES["think"],
    )
    assert updates == {"thought": Thought(intent="plan", tools=("calculator",))}


def invalid_think(valid_after: int | None) -> tuple[Body, list[int]]:
    """A think stage proposing a wrongly typed thought, valid from call ``valid_after + 1``."""
    iterations: list[int] = []

    async def think(view: StateView[ReActState]) -> Patch:
        iterations.append(view.iteration)
        if valid_after is None or len(iterations) <= valid_after:
            return Patch(thought="a string is not a Thought")
        return Patch(thought=T_TOOLS)

    return think, iterations


async def test_invalid_value_is_recoverable_restarts_the_stage_and_records_last_error() -> None:
    think, calls = invalid_think(valid_after=1)
    result, events = await run_session(build_machine(bodies={"think": think}))
    assert result.exit_reason is ExitReason.FINISHED
    assert result.failure is None
    assert result.restarts == 1
    assert len(calls) == 2
    failures = [e for e in events if e.kind is EventKind.FAILURE]
    assert len(failures) == 1
    (record,) = failures
    assert (record.from_state, record.to_state) == (Phase.THINKING, Phase.THINKING)
    assert record.error is not None
    assert record.error.error_type == "InvalidPatch"
    assert record.error.error_class is ErrorClass.RECOVERABLE
    assert record.error.stage == "think"
    assert "'thought'" in record.error.message
    assert record.writes == {"last_error"}
    # Nobody clears it in this machine, so the record is still the last error.
    assert result.state.last_error == record.error
    assert result.state.thought is T_TOOLS
    assert result.state.iteration == 1  # a restart in place is no new iteration


async def test_invalid_value_every_time_escalates_to_fatal() -> None:
    think, calls = invalid_think(valid_after=None)
    result, events = await run_session(
        build_machine(bodies={"think": think}),
        restart_intensity=RestartIntensity(max_restarts=0, within=60),
    )
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "InvalidPatch"  # the cause, kept
    assert "[the restart intensity ran out: " in result.failure.message
    assert result.failure.stage == "think"
    assert result.restarts == 0
    assert len(calls) == 1
    assert_business_unchanged(result.state, BEFORE["think"])
    assert [e.kind for e in events] == [EventKind.STEP, EventKind.FAILURE]


def slow_invalid_think(seconds: float) -> tuple[Body, list[float]]:
    times: list[float] = []

    async def think(view: StateView[ReActState]) -> Patch:
        await anyio.sleep(seconds)
        times.append(anyio.current_time())
        return Patch(thought=["not", "a", "thought"])

    return think, times


@on_virtual_clock
async def test_restart_intensity_counts_restarts_within_the_window(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Default intensity: 3 restarts within 5 s. One failure a second: the 4th escalates.
    think, times = slow_invalid_think(1.0)
    result, _ = await run_session(build_machine(bodies={"think": think}), max_steps=50)
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "InvalidPatch"  # the cause, kept
    assert "[the restart intensity ran out: " in result.failure.message
    assert result.restarts == 3
    assert len(times) == 4
    assert times[-1] - times[0] == pytest.approx(3.0)


@on_virtual_clock
async def test_restarts_spread_beyond_the_window_never_escalate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # One failure every 2 s: never more than 3 within 5 s, so only the step budget stops it.
    think, times = slow_invalid_think(2.0)
    result, events = await run_session(build_machine(bodies={"think": think}), max_steps=12)
    assert result.exit_reason is ExitReason.MAX_STEPS
    assert result.state.lifecycle is Phase.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "BudgetExhausted"
    assert result.restarts == 11
    assert len(times) == 11
    assert all(e.error is None or e.error.error_type != "RestartIntensityExceeded" for e in events)


# -- invariants ----------------------------------------------------------------------------

INVARIANT_CASES = [
    (
        Phase.INITIALIZED,
        INIT_HAS_INPUT,
        ReActState(lifecycle=Phase.INITIALIZED),
    ),
    (
        Phase.INITIALIZED,
        INIT_IS_BLANK,
        ReActState(lifecycle=Phase.INITIALIZED, user_input=Q, thought=T_PLAIN),
    ),
    (
        Phase.ACTING,
        ACTING_HAS_INTENT,
        ReActState(lifecycle=Phase.ACTING, user_input=Q, thought=Thought(intent="")),
    ),
    (Phase.ACTING, ACTING_HAS_INTENT, ReActState(lifecycle=Phase.ACTING, user_input=Q)),
    (
        Phase.OBSERVING,
        OBSERVING_AFTER_TOOLS,
        ReActState(lifecycle=Phase.OBSERVING, user_input=Q, thought=T_TOOLS),
    ),
    (
        Phase.FINISHED,
        FINISHED_HAS_ANSWER,
        ReActState(lifecycle=Phase.FINISHED, user_input=Q, observation=OBS_LOOP),
    ),
    (Phase.FINISHED, FINISHED_HAS_ANSWER, ReActState(lifecycle=Phase.FINISHED, user_input=Q)),
]


@pytest.mark.parametrize(
    ("phase", "condition", "state"),
    INVARIANT_CASES,
    ids=[f"{p.value}-{i}" for i, (p, _, _) in enumerate(INVARIANT_CASES)],
)
def test_each_invariant_is_checked_and_named(
    phase: Phase, condition: Condition[ReActState], state: ReActState
) -> None:
    machine = build_machine()
    assert condition in machine.invariants_of(phase)
    assert ITERATION_NON_NEGATIVE in machine.invariants_of(phase)
    snapshot = state.model_dump()
    with pytest.raises(InvariantViolation) as info:
        PatchValidator(machine).check_invariants(state, phase, stage="probe")
    assert info.value.invariant == condition.name
    assert info.value.lifecycle == phase.value
    assert condition.name in str(info.value)
    assert state.model_dump() == snapshot


def test_a_violating_candidate_is_refused_and_the_state_is_untouched() -> None:
    machine = build_machine()
    validator = PatchValidator(machine)
    state = BEFORE["think"]
    snapshot = state.model_dump()
    blank = Patch(thought=Thought(intent="", tools=("calculator",)))
    updates = validator.updates(state, blank, stage="think", writes=WRITES["think"])
    candidate = state.model_copy(update={**updates, "lifecycle": Phase.ACTING})
    with pytest.raises(InvariantViolation) as info:
        validator.check_invariants(candidate, Phase.ACTING, stage="think")
    assert info.value.invariant == ACTING_HAS_INTENT.name
    assert state.model_dump() == snapshot
    assert state.thought is None
    assert state.lifecycle is Phase.THINKING


async def _blank_intent(view: StateView[ReActState]) -> Patch:
    return Patch(thought=Thought(intent="", tools=("calculator",)))


async def _no_action(view: StateView[ReActState]) -> Patch:
    return Patch()


async def _empty_answer(view: StateView[ReActState]) -> Patch:
    return Patch(observation=Observation(summary="nothing", final_answer=""))


@pytest.mark.parametrize(
    ("name", "body", "condition", "target"),
    [
        ("think", _blank_intent, ACTING_HAS_INTENT, Phase.ACTING),
        ("act", _no_action, OBSERVING_AFTER_TOOLS, Phase.OBSERVING),
        ("observe", _empty_answer, FINISHED_HAS_ANSWER, Phase.FINISHED),
    ],
    ids=["acting-needs-intent", "observing-needs-action", "finished-needs-answer"],
)
async def test_invariant_violation_fails_the_session_without_committing(
    name: str, body: Body, condition: Condition[ReActState], target: Phase
) -> None:
    result, events = await run_session(build_machine(bodies={name: body}))
    assert result.exit_reason is ExitReason.FAILED
    failure = result.failure
    assert failure is not None
    assert failure.error_type == "InvariantViolation"
    assert failure.error_class is ErrorClass.FATAL
    assert failure.stage == name
    assert condition.name in failure.message
    assert repr(target.value) in failure.message
    # Apart from the supervisor's failure record, nothing changed.
    assert_business_unchanged(result.state, BEFORE[name])
    assert result.state.lifecycle is Phase.FAILED
    assert result.state.last_error == failure
    assert not [e for e in events if e.kind is EventKind.STEP and e.stage == name]
    assert all(e.to_state is not target for e in events)


@pytest.mark.parametrize(
    ("state", "condition"),
    [
        (ReActState(), INIT_HAS_INPUT),
        (ReActState(user_input=Q, thought=T_PLAIN), INIT_IS_BLANK),
        (ReActState(user_input=Q, observation=OBS_FINAL), INIT_IS_BLANK),
        (ReActState(user_input=Q, action=ACTION), INIT_IS_BLANK),
    ],
    ids=["no-input", "thought", "observation", "action"],
)
async def test_start_refuses_an_initial_state_breaking_an_invariant(
    state: ReActState, condition: Condition[ReActState]
) -> None:
    async with AgentSystem(path=None) as agents:
        with pytest.raises(InvariantViolation) as info:
            await agents.start(build_machine(), state)
        assert info.value.invariant == condition.name
        assert info.value.lifecycle == "Initialized"
        assert agents.sessions() == []


async def test_iteration_grows_by_one_on_each_return_to_thinking() -> None:
    seen: list[tuple[str, int]] = []
    observations = [OBS_LOOP, OBS_LOOP, OBS_FINAL]

    async def think(view: StateView[ReActState]) -> Patch:
        seen.append(("think", view.iteration))
        return Patch(thought=T_PLAIN if view.observation is None else T_TOOLS)

    async def observe(view: StateView[ReActState]) -> Patch:
        seen.append(("observe", view.iteration))
        return Patch(observation=observations.pop(0))

    result, events = await run_session(build_machine(bodies={"think": think, "observe": observe}))
    assert result.exit_reason is ExitReason.FINISHED
    assert seen == [
        ("think", 1),
        ("observe", 1),
        ("think", 2),
        ("observe", 2),
        ("think", 3),
        ("observe", 3),
    ]
    entries = [e for e in events if e.to_state is Phase.THINKING and e.from_state is not e.to_state]
    assert len(entries) == result.state.iteration == 3
    assert [(e.stage, e.from_state) for e in entries] == [
        ("load", Phase.INITIALIZED),
        ("observe", Phase.OBSERVING),
        ("observe", Phase.OBSERVING),
    ]


async def test_iteration_counts_a_return_through_the_error_handler() -> None:
    iterations: list[int] = []
    handled: list[FailureRecord | None] = []

    async def think(view: StateView[ReActState]) -> Patch:
        iterations.append(view.iteration)
        return Patch(thought=T_TOOLS)

    async def handle(view: StateView[ReActState]) -> Patch:
        handled.append(view.last_error)
        assert view.lifecycle is Phase.RECOVERING
        return Patch(last_error=None)

    machine = build_machine(
        handler=True, bodies={"think": think, "act": flaky_act(), "handle": handle}
    )
    result, events = await run_session(machine)
    assert result.exit_reason is ExitReason.FINISHED
    assert iterations == [1, 2]
    assert result.state.iteration == 2
    assert result.state.last_error is None  # cleared by the handler
    assert len(handled) == 1
    assert handled[0] is not None
    assert (handled[0].error_type, handled[0].stage) == ("Recoverable", "act")
    assert [(e.kind, e.from_state, e.to_state) for e in events][2:4] == [
        (EventKind.FAILURE, Phase.ACTING, Phase.RECOVERING),
        (EventKind.STEP, Phase.RECOVERING, Phase.THINKING),
    ]


async def test_error_route_into_the_loop_state_counts_an_iteration() -> None:
    """A recoverable error routed Observing -> Thinking is a return to Thinking too."""
    iterations: list[int] = []
    calls = [0]

    async def think(view: StateView[ReActState]) -> Patch:
        iterations.append(view.iteration)
        return Patch(thought=T_PLAIN)

    async def observe(view: StateView[ReActState]) -> Patch:
        calls[0] += 1
        if calls[0] == 1:
            raise Recoverable("renderer hiccup")
        return Patch(observation=OBS_FINAL)

    machine = build_machine(
        bodies={"think": think, "observe": observe},
        error_routes={Phase.OBSERVING: Phase.THINKING},
    )
    result, events = await run_session(machine)
    assert result.exit_reason is ExitReason.FINISHED
    assert [(e.kind, e.from_state, e.to_state) for e in events] == [
        (EventKind.STEP, Phase.INITIALIZED, Phase.THINKING),
        (EventKind.STEP, Phase.THINKING, Phase.OBSERVING),
        (EventKind.FAILURE, Phase.OBSERVING, Phase.THINKING),
        (EventKind.STEP, Phase.THINKING, Phase.OBSERVING),
        (EventKind.STEP, Phase.OBSERVING, Phase.FINISHED),
    ]
    assert iterations == [1, 2]
    assert result.state.iteration == 2


# -- illegal transitions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("think", Phase.FINISHED),
        ("think", Phase.INITIALIZED),
        ("think", Phase.RECOVERING),  # a member of the enum the machine never uses
        ("think", Elsewhere.NOWHERE),
        ("act", Phase.THINKING),
        ("observe", Phase.ACTING),
        ("load", Phase.OBSERVING),
    ],
    ids=lambda value: value.value if isinstance(value, enum.Enum) else str(value),
)
async def test_illegal_transition_fails_the_session(name: str, target: enum.Enum) -> None:
    result, events = await run_session(build_machine(nexts={name: lambda s: target}))
    assert result.exit_reason is ExitReason.FAILED
    failure = result.failure
    assert failure is not None
    assert failure.error_type == "IllegalTransition"
    assert failure.error_class is ErrorClass.FATAL
    assert failure.stage == name
    assert str(target.value) in failure.message
    assert not [e for e in events if e.kind is EventKind.STEP and e.stage == name]
    assert events[-1].from_state is (PHASE_OF[name] if name != "load" else Phase.INITIALIZED)
    if name != "load":
        assert_business_unchanged(result.state, BEFORE[name])
    assert result.state.lifecycle is Phase.FAILED


# -- machine build checks --------------------------------------------------------------------


def machine_kwargs() -> dict[str, Any]:
    """A valid configuration of seed 004's machine, to break one piece at a time."""

    @stage(reads={"user_input"}, next=Phase.THINKING)
    async def load(view: StateView[ReActState]) -> Patch:
        return Patch()

    @stage(reads=READS["think"], writes=WRITES["think"], next=Phase.OBSERVING)
    async def think(view: StateView[ReActState]) -> Patch:
        return Patch()

    @stage(reads=READS["act"], writes=WRITES["act"], next=Phase.OBSERVING)
    async def act(view: StateView[ReActState]) -> Patch:
        return Patch()

    @stage(reads=READS["observe"], writes=WRITES["observe"], next=Phase.FINISHED)
    async def observe(view: StateView[ReActState]) -> Patch:
        return Patch()

    transitions: dict[enum.Enum, set[enum.Enum]] = {
        Phase.INITIALIZED: {Phase.THINKING},
        Phase.THINKING: {Phase.ACTING, Phase.OBSERVING},
        Phase.ACTING: {Phase.OBSERVING},
        Phase.OBSERVING: {Phase.THINKING, Phase.FINISHED},
    }
    stages: dict[enum.Enum, type[Stage[Any]]] = {
        Phase.INITIALIZED: load,
        Phase.THINKING: think,
        Phase.ACTING: act,
        Phase.OBSERVING: observe,
    }
    return {
        "name": "broken",
        "state_type": ReActState,
        "initial": Phase.INITIALIZED,
        "terminal": {Phase.FINISHED, Phase.FAILED},
        "failed": Phase.FAILED,
        "transitions": transitions,
        "stages": stages,
    }


def _stage_writing(*fields: str) -> type[Stage[Any]]:
    @stage(reads={"user_input"}, writes=fields, next=Phase.OBSERVING, name="scribble")
    async def scribble(view: StateView[ReActState]) -> Patch:
        return Patch()

    return scribble


def _stage_reading(*fields: str) -> type[Stage[Any]]:
    @stage(reads=fields, writes={"thought"}, next=Phase.OBSERVING, name="peek")
    async def peek(view: StateView[ReActState]) -> Patch:
        return Patch()

    return peek


def _unknown_state(kw: dict[str, Any]) -> None:
    kw["transitions"][Phase.THINKING].add(Elsewhere.NOWHERE)


def _missing_stage(kw: dict[str, Any]) -> None:
    del kw["stages"][Phase.ACTING]


def _writes_missing_field(kw: dict[str, Any]) -> None:
    kw["stages"][Phase.THINKING] = _stage_writing("thought", "scratchpad")


def _reads_missing_field(kw: dict[str, Any]) -> None:
    kw["stages"][Phase.THINKING] = _stage_reading("user_input", "prompt_cache")


def _writes_lifecycle(kw: dict[str, Any]) -> None:
    kw["stages"][Phase.THINKING] = _stage_writing("thought", "lifecycle")


def _writes_session_id(kw: dict[str, Any]) -> None:
    kw["stages"][Phase.THINKING] = _stage_writing("session_id")


def _writes_iteration(kw: dict[str, Any]) -> None:
    kw["stages"][Phase.THINKING] = _stage_writing("iteration")


def _unreachable(kw: dict[str, Any]) -> None:
    kw["transitions"][Phase.RECOVERING] = {Phase.THINKING}
    kw["stages"][Phase.RECOVERING] = _stage_writing("last_error")


def _terminal_with_exit(kw: dict[str, Any]) -> None:
    kw["transitions"][Phase.FINISHED] = {Phase.THINKING}


def _failed_not_terminal(kw: dict[str, Any]) -> None:
    kw["terminal"] = {Phase.FINISHED}


@pytest.mark.parametrize(
    ("breaks", "culprits"),
    [
        (_unknown_state, ["unknown state", "Nowhere"]),
        (_missing_stage, ["non-terminal state", "Acting", "no stage"]),
        (_writes_missing_field, ["'scribble'", "scratchpad", "does not have"]),
        (_reads_missing_field, ["'peek'", "prompt_cache", "does not have"]),
        (_writes_lifecycle, ["'scribble'", "lifecycle", "only the supervisor"]),
        (_writes_session_id, ["'scribble'", "session_id", "only the supervisor"]),
        (_writes_iteration, ["'scribble'", "iteration", "only the supervisor"]),
        (_unreachable, ["Recovering", "cannot be reached"]),
        (_terminal_with_exit, ["terminal state", "Finished", "outgoing"]),
        (_failed_not_terminal, ["failed state", "Failed", "must be terminal"]),
    ],
    ids=lambda value: value.__name__.strip("_") if callable(value) else None,
)
def test_machine_build_check_names_the_culprit(
    breaks: Callable[[dict[str, Any]], None], culprits: list[str]
) -> None:
    Machine(**machine_kwargs())  # the unbroken configuration builds
    kwargs = machine_kwargs()
    breaks(kwargs)
    with pytest.raises(ConfigurationError) as info:
        Machine(**kwargs)
    message = str(info.value)
    assert "'broken'" in message
    for culprit in culprits:
        assert culprit in message


def test_the_fast_named_tuple_item_check_wants_the_exact_type_length_and_parts() -> None:
    # A `History` of named tuples skips pydantic for an item of exactly the
    # declared shape; anything else goes through full validation.
    from arkhon_rheo.session._commit_rule import _item_check
    from arkhon_rheo.testing import ReferenceStep

    check = _item_check(ReferenceStep)
    assert check is not None
    assert check(ReferenceStep(1, "calc", "42"))
    assert not check(ReferenceStep(1, "calc", 42))  # type: ignore[arg-type]  # a part of another type
    assert not check((1, "calc", "42"))  # a plain tuple
    assert not check(tuple.__new__(ReferenceStep, (1, "calc")))  # one part short
