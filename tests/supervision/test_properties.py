"""Properties of patch validation (pure) and of the session supervisor (both backends).

The validator is checked against the model itself: whatever a permitted patch
writes must be exactly what ``model_validate`` would build, and a refused patch
leaves the state untouched. The supervisor is driven through random scripts of
stage outcomes and checked against the machine's rules and against a small
reference model of the supervision policy.
"""

from __future__ import annotations

import copy
import enum
import pickle
from dataclasses import dataclass
from typing import Annotated, Any, cast

import anyio
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)
from structlog.testing import capture_logs

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    Condition,
    ExitReason,
    Fatal,
    History,
    InvalidPatch,
    InvariantViolation,
    Lifecycle,
    Machine,
    Patch,
    Recoverable,
    SessionResult,
    Stage,
    StateView,
    Transient,
    TransitionEvent,
    UndeclaredWrite,
    stage,
)
from arkhon_rheo.protocols import SUPERVISOR_FIELDS, ErrorClass, EventKind, FailureRecord
from arkhon_rheo.supervision import Backoff, PatchValidator, RestartIntensity
from arkhon_rheo.testing import EventCapture

# == patch validation =====================================================================


class Kind(enum.Enum):
    OPEN = "open"
    DONE = "done"
    FAILED = "failed"


class Note(BaseModel):
    model_config = ConfigDict(frozen=True)
    text: str
    score: int = 0


class Doc(AgentState):
    """A state with plain, constrained, optional-model and sequence fields."""

    lifecycle: Kind = Kind.OPEN
    title: str = "untitled"
    count: int = Field(default=0, ge=0)
    note: Note | None = None
    steps: History[str] = History()
    tags: tuple[int, ...] = ()


FIELDS = tuple(sorted(Doc.model_fields))
SEQUENCES = frozenset({"steps", "tags"})
RECORD = FailureRecord(error_type="Boom", message="boom", error_class=ErrorClass.RECOVERABLE)


@stage(writes={"title"}, next=Kind.DONE)
async def _edit(view: StateView[Doc]) -> Patch:
    return Patch()


DOC_MACHINE = Machine(
    name="doc",
    state_type=Doc,
    initial=Kind.OPEN,
    terminal={Kind.DONE, Kind.FAILED},
    failed=Kind.FAILED,
    transitions={Kind.OPEN: {Kind.DONE}},
    stages={Kind.OPEN: _edit},
    invariants={
        None: [
            Condition[Doc]("at most 6 steps", lambda s: len(s.steps) <= 6),
            Condition[Doc]("the title is never 'forbidden'", lambda s: s.title != "forbidden"),
        ],
        Kind.OPEN: [Condition[Doc]("an open doc counts below 100", lambda s: s.count < 100)],
        Kind.DONE: [Condition[Doc]("a done doc has a note", lambda s: s.note is not None)],
    },
)
VALIDATOR = PatchValidator(DOC_MACHINE)

notes = st.builds(Note, text=st.text(max_size=3), score=st.integers(-2, 2))
# Valid and invalid values for each field (the model decides which is which).
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "lifecycle": st.sampled_from(Kind),
    "session_id": st.text(max_size=3),
    "iteration": st.integers(-1, 3),
    "title": st.one_of(st.text(max_size=3), st.just("forbidden"), st.integers(), st.none()),
    "count": st.one_of(st.integers(-3, 120), st.sampled_from(["7", "x", 1.5]), st.none()),
    "note": st.one_of(
        st.none(), notes, st.fixed_dictionaries({"text": st.text(max_size=2)}), st.integers()
    ),
    "steps": st.one_of(st.lists(st.text(max_size=2), max_size=8), st.integers()),
    "tags": st.one_of(st.lists(st.integers(), max_size=3).map(tuple), st.text(max_size=2)),
    "last_error": st.one_of(st.none(), st.just(RECORD), st.integers()),
    "metadata": st.one_of(
        st.dictionaries(st.text(max_size=2), st.integers(), max_size=2), st.integers()
    ),
}
items = st.lists(st.one_of(st.text(max_size=2), st.integers(-2, 2)), max_size=4)
docs = st.builds(
    Doc,
    lifecycle=st.sampled_from([Kind.OPEN, Kind.DONE]),
    session_id=st.text(max_size=3),
    iteration=st.integers(0, 3),
    title=st.text(max_size=3),
    count=st.integers(0, 120),
    note=st.none() | notes,
    steps=st.lists(st.text(max_size=2), max_size=6).map(History),
    tags=st.lists(st.integers(), max_size=3).map(tuple),
    last_error=st.none() | st.just(RECORD),
    metadata=st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@st.composite
def patches(draw: st.DrawFn) -> Patch:
    assigned = draw(st.sets(st.sampled_from(FIELDS), max_size=3))
    appended = draw(st.sets(st.sampled_from(FIELDS), max_size=2))
    values = {name: draw(VALUES[name]) for name in sorted(assigned)}
    appends = {name: tuple(draw(items)) for name in sorted(appended)}
    return Patch.of(values, appends)


def _reference(state: Doc, patch: Patch) -> Doc:
    """What the model itself builds from the state with the patch applied."""
    merged: dict[str, Any] = {name: getattr(state, name) for name in FIELDS}
    merged.update(patch.values)
    for name, added in patch.appends.items():
        if name in SEQUENCES:
            merged[name] = [*getattr(state, name), *added]
    return Doc.model_validate(merged)


@st.composite
def patches_and_writes(draw: st.DrawFn) -> tuple[Patch, frozenset[str]]:
    """A patch, and a write set that permits it half of the time."""
    patch = draw(patches())
    writes = draw(st.frozensets(st.sampled_from(FIELDS)))
    if draw(st.booleans()):
        writes |= patch.fields - SUPERVISOR_FIELDS
    return patch, writes


@settings(max_examples=200, deadline=None)
@given(state=docs, patch_and_writes=patches_and_writes())
@example(state=Doc(), patch_and_writes=(Patch(count=-1), frozenset({"count"})))
@example(state=Doc(), patch_and_writes=(Patch(metadata={"k": 1}), frozenset({"metadata"})))
@example(
    state=Doc(steps=History(["a"])), patch_and_writes=(Patch().append("steps", 1), frozenset())
)
@example(
    state=Doc(lifecycle=Kind.DONE, note=Note(text="n")),
    patch_and_writes=(Patch(note=None).append("steps", "b"), frozenset({"note", "steps"})),
)
def test_a_patch_commits_what_the_model_would_or_nothing_at_all(
    state: Doc, patch_and_writes: tuple[Patch, frozenset[str]]
) -> None:
    patch, writes = patch_and_writes
    # A deep copy is not possible (see test_states_deep_copy_and_pickle): a dump is one.
    snapshot = state.model_dump()
    objects = {name: getattr(state, name) for name in FIELDS}
    undeclared = patch.fields - (writes - SUPERVISOR_FIELDS)
    event("undeclared" if undeclared else "permitted")
    malformed = bool(set(patch.values) & set(patch.appends) or set(patch.appends) - SEQUENCES)
    try:
        reference: Doc | None = _reference(state, patch)
    except ValidationError:
        reference = None
    committed: Doc | None = None
    refusal: Exception | None = None
    try:
        updates = VALIDATOR.updates(state, patch, stage="edit", writes=writes)
        committed = state.model_copy(update=updates)
        VALIDATOR.check_invariants(committed, committed.lifecycle, stage="edit")
    except (UndeclaredWrite, InvalidPatch, InvariantViolation) as exc:
        refusal = exc
    if isinstance(refusal, UndeclaredWrite):
        assert undeclared, "refused a patch that stays within its write set"
        assert refusal.fields == tuple(sorted(undeclared))
    elif isinstance(refusal, InvalidPatch):
        assert not undeclared, "an undeclared write must be refused as such, first"
        assert malformed or reference is None, f"refused a value the model accepts: {refusal}"
        assert refusal.field in patch.fields
    elif isinstance(refusal, InvariantViolation):
        assert not undeclared
        assert committed is not None
        failing = [
            c.name for c in DOC_MACHINE.invariants_of(committed.lifecycle) if not c.holds(committed)
        ]
        assert failing
        assert refusal.invariant == failing[0]
    else:
        assert not undeclared, f"accepted writes to {sorted(undeclared)}"
        assert not malformed
        assert committed is not None
        assert reference is not None, (
            f"accepted {patch!r}, but the model refuses the state it makes: "
            f"{_model_error(state, patch)}"
        )
        for condition in DOC_MACHINE.invariants_of(committed.lifecycle):
            assert condition.holds(committed), condition.name
        for name in FIELDS:
            if name in patch.fields:
                assert getattr(committed, name) == getattr(reference, name), name
                assert type(getattr(committed, name)) is type(getattr(reference, name)), name
            else:
                assert getattr(committed, name) is objects[name], name
        for name, added in patch.appends.items():
            old = list(objects[name])
            assert list(getattr(committed, name))[: len(old)] == old
            assert len(getattr(committed, name)) == len(old) + len(added)
    # Whatever happened, the original state is untouched.
    assert state.model_dump() == snapshot
    for name, value in objects.items():
        assert getattr(state, name) is value


def _model_error(state: Doc, patch: Patch) -> str:
    try:
        _reference(state, patch)
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"])
    return "none"  # pragma: no cover


class Constrained(AgentState):
    """Field-level validation the validator must apply to patches too."""

    lifecycle: Kind = Kind.OPEN
    count: int = Field(default=0, ge=0)
    name: Annotated[str, StringConstraints(min_length=1)] = "x"
    checked: str = "ok"

    @field_validator("checked")
    @classmethod
    def _refuse_bad(cls, value: str) -> str:
        if value == "bad":
            raise ValueError("'bad' is not allowed")
        return value


@stage(writes={"count", "name", "checked", "metadata"}, next=Kind.DONE)
async def _write_all(view: StateView[Constrained]) -> Patch:
    return Patch()


CONSTRAINED = PatchValidator(
    Machine(
        name="constrained",
        state_type=Constrained,
        initial=Kind.OPEN,
        terminal={Kind.DONE, Kind.FAILED},
        failed=Kind.FAILED,
        transitions={Kind.OPEN: {Kind.DONE}},
        stages={Kind.OPEN: _write_all},
    )
)


@pytest.mark.parametrize(
    ("field", "value"),
    [("count", -1), ("name", ""), ("checked", "bad")],
    ids=["Field-ge", "StringConstraints", "field_validator"],
)
def test_patch_values_get_the_fields_full_validation(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        Constrained.model_validate({field: value})
    with pytest.raises(InvalidPatch) as info:
        CONSTRAINED.updates(
            Constrained(), Patch.of({field: value}), stage="write_all", writes=_write_all.writes
        )
    assert info.value.field == field


def test_written_metadata_is_frozen_like_the_models() -> None:
    updates = CONSTRAINED.updates(
        Constrained(), Patch(metadata={"k": 1}), stage="write_all", writes=_write_all.writes
    )
    committed = Constrained().model_copy(update=updates)
    assert type(committed.metadata) is type(Constrained(metadata={"k": 1}).metadata)
    with pytest.raises(TypeError):
        committed.metadata["k"] = 2  # type: ignore[index]


def test_states_deep_copy_and_pickle() -> None:
    state = Doc(title="t", steps=History(["a"]), metadata={"k": 1})
    assert copy.deepcopy(state) == state
    assert pickle.loads(pickle.dumps(state)) == state


# == supervision ==========================================================================

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
            if error_class is ErrorClass.RECOVERABLE:
                if restarts < max_restarts:
                    restarts += 1
                    target = cast("Lifecycle", ROUTES.get(phase, phase))
                    events.append((EventKind.FAILURE, phase, target, error, attempt))
                    phase, steps = target, steps + 1
                    break
                error = "RestartIntensityExceeded"
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
