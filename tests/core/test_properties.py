"""Properties of patch validation, pure: checked against the model itself.

Whatever a permitted patch writes must be exactly what ``model_validate`` would
build, and a refused patch leaves the state untouched. (The supervisor's own
properties are in ``tests/supervision/test_properties.py``.)
"""

from __future__ import annotations

import copy
import enum
import pickle
from typing import Annotated, Any

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

from arkhon_rheo import AgentState, Condition, History, Machine, Patch, StateView, stage
from arkhon_rheo.errors import InvalidPatch, InvariantViolation, UndeclaredWrite
from arkhon_rheo.protocols import SUPERVISOR_FIELDS, ErrorClass, FailureRecord
from arkhon_rheo.session._commit_rule import PatchValidator

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


@settings(deadline=None)  # examples: the profile's (tests/conftest.py)
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
